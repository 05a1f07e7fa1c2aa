"""The Spark layer's refusals, as pure functions (no Spark needed)."""

from __future__ import annotations

import pytest
from support.fakes import FakeExternalSystem, FakeSink

from twophase.coordinator.spark.checks import (
    batch_position,
    check_job_id,
    check_query_id,
    check_speculation,
    check_stream_options,
    job_id_from_name,
)
from twophase.sinks.errors import ConfigError, JobError


@pytest.mark.parametrize(
    ("name", "job_id"),
    [("Flights", "flights"), ("NYC flights 2013!", "nyc_flights_2013"), ("a-b.c", "a_b.c"), ("__x__", "x")],
)
def test_job_id_from_name(name: str, job_id: str) -> None:
    assert job_id_from_name(name) == job_id


@pytest.mark.parametrize("bad", ["", "-x", "a/b", "a-b", "x" * 101, "é"])
def test_bad_job_ids_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError):
        check_job_id(bad)


def test_empty_name_is_refused() -> None:
    with pytest.raises(ConfigError):
        job_id_from_name("!!!")


@pytest.mark.parametrize(
    ("mode", "options", "match"),
    [
        ("append", {"asyncProgressTrackingEnabled": "true"}, "asyncProgressTrackingEnabled"),
        ("append", {"ASYNCPROGRESSTRACKINGENABLED": " True "}, "asyncProgressTrackingEnabled"),
        ("complete", {}, "output mode"),
        ("append", {"checkpointLocation": "/x"}, "spark_checkpoint_location"),
    ],
)
def test_unsafe_stream_options_are_refused(mode: str, options: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_stream_options(mode, options)


@pytest.mark.parametrize("mode", ["append", "update", "Append"])
def test_safe_stream_options_pass(mode: str) -> None:
    check_stream_options(mode, {"asyncProgressTrackingEnabled": "false", "maxRecordsPerFile": "10"})


def test_query_id_must_match_the_spark_checkpoint() -> None:
    stored = {"engine": "spark", "query_id": "q1", "batch_id": 3}
    check_query_id(stored, "q1", "/spark")
    check_query_id(None, None, "/spark")  # a new job may start on any location
    check_query_id({"engine": "spark-batch", "job": "j"}, None, "/spark")
    with pytest.raises(JobError, match="different Spark checkpoint"):
        check_query_id(stored, "q2", "/spark")
    with pytest.raises(JobError, match="no query"):
        check_query_id(stored, None, "/spark-new")


def test_speculation_is_refused_only_for_unsafe_sinks() -> None:
    system = FakeExternalSystem()
    safe, unsafe = FakeSink("safe", system), FakeSink("unsafe", system)
    unsafe.speculation_safe = False
    check_speculation("true", [safe])
    check_speculation("false", [safe, unsafe])
    check_speculation(None, [unsafe])
    with pytest.raises(ConfigError, match="unsafe"):
        check_speculation("true", [safe, unsafe])


def test_an_empty_job_checkpoint_refuses_a_spark_checkpoint_with_committed_batches() -> None:
    """#14 scenario 2: Spark resumes after its last committed batch; if the job's own checkpoints
    are gone (a new or emptied checkpoint_dir, cancel with delete), what they held — commits still
    pending, files in progress — would be lost silently, and checkpoint ids would start again."""
    check_query_id(None, "q1", "/spark", committed_batch=None)  # Spark wrote offsets, committed nothing
    with pytest.raises(JobError, match=r"no checkpoint.*committed batch 4"):
        check_query_id(None, "q1", "/spark", committed_batch=4)


def test_a_batch_rerun_is_a_replay_only_with_the_same_input() -> None:
    fresh = batch_position("j", None, "2:fp1")
    assert fresh == {"engine": "spark-batch", "job": "j", "input": "2:fp1"}
    assert batch_position("j", fresh, "2:fp1") == fresh  # the same write again: a replay
    with pytest.raises(JobError, match="already wrote other input"):
        batch_position("j", fresh, "2:fp2")
    old = {"engine": "spark-batch", "job": "j"}  # checkpoints from before input fingerprints
    assert batch_position("j", old, "2:fp2") == old
    assert batch_position("j", {"engine": "spark", "query_id": "q", "batch_id": 3}, "2:fp") == {
        "engine": "spark-batch",
        "job": "j",
        "input": "2:fp",
    }


def test_a_scheme_1_fingerprint_is_not_compared() -> None:
    # scheme 1 hashed semanticHash(), which no other JVM reproduces: a rerun must not be refused
    stored = {"engine": "spark-batch", "job": "j", "input": "497860c291c517dfbd8e277584919f94"}
    assert batch_position("j", stored, "2:fp") == {"engine": "spark-batch", "job": "j", "input": "2:fp"}
