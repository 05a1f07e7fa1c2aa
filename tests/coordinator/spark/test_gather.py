"""The gather's threshold (``tasks.acknowledgements_of``, issue #42): which epochs gather their
acknowledgements into one partition before the driver collects them. The plan itself runs against
real Spark, Kafka and S3 in tests/integration/exactly_once/test_gathered_acknowledgements.py."""

from __future__ import annotations

import pytest

from twophase.coordinator.run.runtime_config import DEFAULT_GATHER_ABOVE, RuntimeConfig
from twophase.coordinator.spark.tasks import acknowledgements_of
from twophase.sinks.errors import ConfigError


class _Written:
    """Stands for the write's DataFrame: records the repartitions and sorts asked of it."""

    def __init__(self) -> None:
        self.asked: list[object] = []

    def repartition(self, n: int) -> _Written:
        self.asked.append(n)
        return self

    def sortWithinPartitions(self, *columns: str) -> str:
        self.asked.append(columns)
        return "gathered"


@pytest.mark.parametrize(
    ("partitions", "gather_above", "gathered"),
    [
        (5, 4, True),
        (4, 4, False),
        (1, 0, True),
        (10**5, None, False),
        (1_001, 1_000, True),
        (1_000, 1_000, False),
    ],
)
def test_only_an_epoch_of_more_partitions_than_the_threshold_is_gathered(
    partitions: int, gather_above: int | None, gathered: bool
) -> None:
    written = _Written()
    out: object = acknowledgements_of(written, partitions, gather_above)  # type: ignore[arg-type]
    assert (out == "gathered") is gathered
    # one partition, by a shuffle (not coalesce), its rows sorted by the intake's key (issue #42:
    # the driver then slices the payloads per sink instead of copying them)
    assert written.asked == ([1, ("sink", "partition")] if gathered else [])


def test_the_default_threshold_is_the_one_documented() -> None:
    assert RuntimeConfig().gather_acknowledgements_above == DEFAULT_GATHER_ABOVE


@pytest.mark.parametrize("bad", [-1, 1.5, True, "100"])
def test_a_bad_threshold_is_refused_in_one_line_naming_the_setting(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"^gather_acknowledgements_above must be a whole number") as e:
        RuntimeConfig(gather_acknowledgements_above=bad)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("ok", [0, 4, None])
def test_zero_always_gathers_and_none_never(ok: int | None) -> None:
    assert RuntimeConfig(gather_acknowledgements_above=ok).gather_acknowledgements_above == ok
