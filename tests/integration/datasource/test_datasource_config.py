"""What the facade refuses before anything is written, and its naming rules (no SparkSession needed)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from pyspark.sql.types import LongType, StructField, StructType
from support.datasource.jsonl_format import FORMAT, JsonLinesTwoPhase
from support.fakes import FakeExternalSystem, FakeInProgressSink
from support.file_sink import JsonLinesFileSink

from twophase.coordinator.spark.datasource import (
    FacadeSettings,
    TwoPhaseDataSource,
    TwoPhaseStreamWriter,
    checkpoint_id_for_batch,
)
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import ConfigError

SCHEMA = StructType([StructField("id", LongType())])


def options(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {
        "job": "Orders Job",
        "twophaseCheckpointDir": str(tmp_path / "chk"),
        "outputDir": str(tmp_path / "out"),
        "checkpointLocation": str(tmp_path / "spark"),
    }
    return {**base, **extra}


def test_for_sink_names_the_format_and_builds_the_sink(tmp_path: Path) -> None:
    assert JsonLinesTwoPhase.name() == FORMAT
    writer = JsonLinesTwoPhase(options(tmp_path, sinkName="events")).streamWriter(SCHEMA, False)
    assert isinstance(writer, TwoPhaseStreamWriter)
    assert isinstance(writer.sink, JsonLinesFileSink)
    assert (writer.sink.name, writer.sink.root) == ("events", str(tmp_path / "out"))
    assert writer.settings == FacadeSettings("orders_job", str(tmp_path / "chk"))


def test_subclass_style_and_explicit_job_id(tmp_path: Path) -> None:
    class Jsonl(TwoPhaseDataSource):
        format_name = "twophase-jsonl-sub"

        def build_sink(self, options: Mapping[str, str]) -> TwoPhaseCommitSink[object, object]:
            return JsonLinesFileSink("s", options["outputdir"])  # type: ignore[return-value]

    assert Jsonl.name() == "twophase-jsonl-sub"
    writer = Jsonl(options(tmp_path, jobId="Orders.v2")).streamWriter(SCHEMA, False)
    assert writer.settings.job_id == "Orders.v2"


def test_missing_format_name_or_build_sink_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="format_name"):
        TwoPhaseDataSource.name()

    class NoSink(TwoPhaseDataSource):
        format_name = "twophase-nothing"

    with pytest.raises(ConfigError, match="build_sink"):
        NoSink(options(tmp_path)).streamWriter(SCHEMA, False)


@pytest.mark.parametrize(
    ("drop", "extra", "message"),
    [
        ("twophaseCheckpointDir", {}, "twophaseCheckpointDir"),
        ("job", {}, '"job"'),
        (None, {"asyncProgressTrackingEnabled": "true"}, "asyncProgressTrackingEnabled"),
        (None, {"jobId": "bad id!"}, "job id"),
        ("outputDir", {}, "outputDir"),
    ],
)
def test_bad_options_are_refused(
    tmp_path: Path, drop: str | None, extra: dict[str, str], message: str
) -> None:
    opts = options(tmp_path, **extra)
    if drop:
        del opts[drop]
    with pytest.raises(ConfigError, match=message):
        JsonLinesTwoPhase(opts).streamWriter(SCHEMA, False)
    assert not (tmp_path / "chk").exists() and not (tmp_path / "out").exists()


def test_in_progress_sinks_are_refused(tmp_path: Path) -> None:
    # no end-of-input hook: their last in-progress data could never be finished (FLIP-147)
    source = TwoPhaseDataSource.for_sink(
        "twophase-fake-in-progress", lambda _: FakeInProgressSink("ip", FakeExternalSystem())
    )
    with pytest.raises(ConfigError, match="InProgressSink"):
        source(options(tmp_path)).streamWriter(SCHEMA, False)


def test_complete_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="complete output mode"):
        JsonLinesTwoPhase(options(tmp_path)).streamWriter(SCHEMA, True)


def test_checkpoint_ids_follow_batch_ids() -> None:
    assert [checkpoint_id_for_batch(b) for b in (0, 1, 41)] == [1, 2, 42]
    with pytest.raises(ConfigError):
        checkpoint_id_for_batch(-1)


def test_a_sink_unsafe_under_speculation_needs_speculation_stated_off(tmp_path: Path) -> None:
    """#14 scenario 10: the facade's worker cannot read spark.speculation; a sink that cannot take
    two concurrent attempts of one task is refused unless the query states speculation is off."""

    class Unsafe(TwoPhaseDataSource):
        format_name = "twophase-unsafe"

        def build_sink(self, options: Mapping[str, str]) -> TwoPhaseCommitSink[object, object]:
            sink = JsonLinesFileSink("s", options["outputdir"])
            sink.speculation_safe = False
            return sink  # type: ignore[return-value]

    with pytest.raises(ConfigError, match="speculation"):
        Unsafe(options(tmp_path)).streamWriter(SCHEMA, False)
    Unsafe(options(tmp_path, speculation="false")).streamWriter(SCHEMA, False)
    with pytest.raises(ConfigError, match="speculation"):
        Unsafe(options(tmp_path, speculation="true")).streamWriter(SCHEMA, False)
