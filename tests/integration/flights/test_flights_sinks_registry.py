"""The flights job's registry of optional sinks agrees with the names ``--sinks`` accepts."""

from __future__ import annotations

from twophase.integration.jobs.flights_sinks import OPTIONAL_SINKS, optional_sinks
from twophase.integration.jobs.flights_spec import (
    BASE_SINKS,
    OPTIONAL_SINK_NAMES,
    SINK_CHOICES,
    STORE_FILE_SINKS,
    FlightsJobSpec,
)


def test_every_optional_name_has_a_registered_sink_and_no_other() -> None:
    assert tuple(OPTIONAL_SINKS) == OPTIONAL_SINK_NAMES
    assert (*BASE_SINKS, *OPTIONAL_SINK_NAMES, *STORE_FILE_SINKS) == SINK_CHOICES
    for name, load in OPTIONAL_SINKS.items():
        assert load().name == name


def test_a_run_gets_its_optional_sinks_in_choice_order(tmp_path: object) -> None:
    spec = FlightsJobSpec(job_id="r1", work_dir=str(tmp_path), sinks=("iceberg", "kafka", "postgres"))
    assert spec.sinks == ("kafka", "postgres", "iceberg")
    assert [s.name for s in optional_sinks(spec)] == ["postgres", "iceberg"]
