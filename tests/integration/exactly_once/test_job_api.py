"""The Job API in-process on the test session's SparkSession: refusals, failover, bounded streams."""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.exactly_once.support import assert_exactly_once, make_input
from support.file_sink import JsonLinesFileSink, _OpenFile

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.run.restart import RestartStrategy
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.spark.handle import JobHandle
from twophase.coordinator.spark.job import Job
from twophase.coordinator.spark.results import EpochTotals
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.sinks.errors import ConfigError, JobError, SchemaError

pytestmark = [pytest.mark.spark]


class _NeedsColumn(JsonLinesFileSink):
    """A file sink that only takes data with a ``value`` column."""

    def validate(self, schema: pa.Schema) -> None:
        if "value" not in schema.names:
            raise SchemaError(f"sink {self.name}: column 'value' missing from {schema.names}")


class _AlwaysFails(JsonLinesFileSink):
    """A file sink whose every write fails: the restart strategy must give up."""

    def write(self, txn: _OpenFile, batch: pa.RecordBatch) -> None:
        raise RuntimeError("disk on fire")


def _stream(spark: Any, root: Path) -> Any:
    return spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(str(root / "input"))


def _start_bounded(job: Job, spark: Any, root: Path) -> JobHandle:
    return job.start(
        _stream(spark, root), spark_checkpoint_location=str(root / "spark"), trigger={"availableNow": True}
    )


def test_available_now_stream_finishes_exactly_once(spark: Any, tmp_path: Path) -> None:
    expected = make_input(tmp_path, files=3)
    job = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out"))
    handle = job.start(
        _stream(spark, tmp_path),
        spark_checkpoint_location=str(tmp_path / "spark"),
        trigger={"availableNow": True},
    )
    assert handle.await_termination(300)
    assert handle.status is JobState.FINISHED
    assert [m.records for m in handle.metrics] == [50, 50, 50]
    final = handle.checkpoint_metrics[-1]
    assert final.kind.value == "final"
    assert_exactly_once(tmp_path, ["a"], expected)


def test_a_handle_keeps_the_newest_epochs_and_counts_every_one(spark: Any, tmp_path: Path) -> None:
    # metrics_history bounds what a long stream keeps on the driver (the soak, #29 item 5)
    expected = make_input(tmp_path, files=3)
    config = RuntimeConfig(metrics_history=2)
    job = Job(spark, "eo", str(tmp_path / "chk"), config=config).sink(
        JsonLinesFileSink("a", tmp_path / "out")
    )
    handle = _start_bounded(job, spark, tmp_path)
    assert handle.await_termination(300)
    assert [m.batch_id for m in handle.metrics] == [1, 2]
    assert handle.totals == EpochTotals(epochs=3, records=150)
    assert handle.runtime.checkpoints_completed == {CheckpointKind.CHECKPOINT: 3, CheckpointKind.FINAL: 1}
    assert_exactly_once(tmp_path, ["a"], expected)


def test_batch_write_twice_with_one_job_id_writes_once(spark: Any, tmp_path: Path) -> None:
    expected = make_input(tmp_path, files=2)
    df = spark.read.parquet(str(tmp_path / "input"))
    first = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out")).write(df)
    again = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out")).write(df)
    assert (first.state, len(first.epochs)) == (JobState.FINISHED, 1)
    assert (again.state, len(again.epochs), again.final) == (JobState.FINISHED, 0, None)
    assert_exactly_once(tmp_path, ["a"], expected)


def test_batch_write_rerun_with_other_input_is_refused(spark: Any, tmp_path: Path) -> None:
    """#14 scenario 10: a write() re-run under the same job name with other input must not be
    taken for a replay of the completed write (its data silently skipped)."""
    expected = make_input(tmp_path, files=2)
    other = make_input(tmp_path / "other", files=1, start=10_000)
    job = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out"))
    job.write(spark.read.parquet(str(tmp_path / "input")))
    again = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out"))
    with pytest.raises(JobError, match="already wrote other input"):
        again.write(spark.read.parquet(str(tmp_path / "other" / "input")))
    assert other and expected
    assert_exactly_once(tmp_path, ["a"], expected)


def test_restart_strategy_exhausted_fails_the_job(spark: Any, tmp_path: Path) -> None:
    make_input(tmp_path, files=1)
    config = RuntimeConfig(restart=RestartStrategy.fixed_delay(max_restarts=2, delay_ms=0))
    job = Job(spark, "eo", str(tmp_path / "chk"), config=config).sink(_AlwaysFails("a", tmp_path / "out"))
    handle = job.start(
        _stream(spark, tmp_path),
        spark_checkpoint_location=str(tmp_path / "spark"),
        trigger={"availableNow": True},
    )
    with pytest.raises(JobError, match="restart strategy exhausted"):
        handle.await_termination(300)
    assert handle.status is JobState.FAILED
    assert not (tmp_path / "out" / "data").exists()  # nothing committed, ever


@pytest.mark.parametrize(
    ("output_mode", "options", "message"),
    [
        ("append", {"asyncProgressTrackingEnabled": "true"}, "asyncProgressTrackingEnabled"),
        ("complete", {}, "output mode"),
    ],
)
def test_unsafe_stream_settings_are_refused(
    spark: Any, tmp_path: Path, output_mode: str, options: dict[str, str], message: str
) -> None:
    make_input(tmp_path, files=1)
    job = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out"))
    with pytest.raises(ConfigError, match=message):
        job.start(
            _stream(spark, tmp_path),
            spark_checkpoint_location=str(tmp_path / "spark"),
            output_mode=output_mode,
            options=options,
        )
    assert not (tmp_path / "chk").exists()


def test_sink_name_used_twice_is_refused(spark: Any, tmp_path: Path) -> None:
    job = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out"))
    with pytest.raises(ConfigError, match="used twice"):
        job.sink(JsonLinesFileSink("a", tmp_path / "other"))


def test_schema_a_sink_cannot_take_is_refused_before_writing(spark: Any, tmp_path: Path) -> None:
    make_input(tmp_path, files=1)
    df = spark.read.parquet(str(tmp_path / "input"))
    job = Job(spark, "eo", str(tmp_path / "chk")).sink(_NeedsColumn("a", tmp_path / "out"))
    with pytest.raises(SchemaError, match="value"):
        job.write(df)
    assert not (tmp_path / "out").exists() and not (tmp_path / "chk").exists()


def test_resuming_against_another_spark_checkpoint_is_refused(spark: Any, tmp_path: Path) -> None:
    make_input(tmp_path, files=2)
    job = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out"))
    first = job.start(
        _stream(spark, tmp_path),
        spark_checkpoint_location=str(tmp_path / "spark"),
        trigger={"availableNow": True},
    )
    assert first.await_termination(300)
    before = sorted(p.name for p in (tmp_path / "out" / "data" / "a").iterdir())
    again = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out"))
    with pytest.raises(JobError, match="different Spark checkpoint"):
        again.start(
            _stream(spark, tmp_path),
            spark_checkpoint_location=str(tmp_path / "spark-new"),
            trigger={"availableNow": True},
        )
    assert sorted(p.name for p in (tmp_path / "out" / "data" / "a").iterdir()) == before


def test_an_empty_job_checkpoint_is_refused_against_a_spark_checkpoint_with_commits(
    spark: Any, tmp_path: Path
) -> None:
    """#14 scenario 2: a new (or emptied) checkpoint_dir with the old Spark checkpoint would resume
    after Spark's last committed batch with nothing of what the job's checkpoints held."""
    make_input(tmp_path, files=2)
    job = Job(spark, "eo", str(tmp_path / "chk")).sink(JsonLinesFileSink("a", tmp_path / "out"))
    assert _start_bounded(job, spark, tmp_path).await_termination(300)
    fresh = Job(spark, "eo", str(tmp_path / "chk-new")).sink(JsonLinesFileSink("a", tmp_path / "out"))
    with pytest.raises(JobError, match="the job has no checkpoint"):
        _start_bounded(fresh, spark, tmp_path)


def test_checkpoint_metadata_is_versioned_json_with_encoded_committables(spark: Any, tmp_path: Path) -> None:
    make_input(tmp_path, files=2)
    df = spark.read.parquet(str(tmp_path / "input"))
    config = RuntimeConfig(checkpoint=CheckpointConfig(retained_checkpoints=2))
    Job(spark, "eo", str(tmp_path / "chk"), config=config).sink(
        JsonLinesFileSink("a", tmp_path / "out")
    ).write(df)
    manifests = sorted((tmp_path / "chk" / "eo").glob("chk-*/_metadata"))
    epoch, final = (json.loads(zlib.decompress(p.read_bytes())) for p in manifests)
    assert (epoch["format"], epoch["version"], epoch["kind"], final["kind"]) == (
        "twophase.checkpoint",
        3,
        "checkpoint",
        "final",
    )
    # format v3 (#42 item 2): the manifest names the sink's committable file, an Arrow IPC file
    # beside it whose size and sha256 it records; read here with plain pyarrow, not the writer
    ref = epoch["sinks"]["a"]["committables"]
    data = (manifests[0].parent / ref["file"]).read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (ref["bytes"], ref["sha256"])
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    assert table.num_rows == ref["rows"]
    payloads = [json.loads(p) for p in table.column("payload").to_pylist()]
    assert payloads and {(p["kind"], p["version"]) for p in payloads} == {("test.jsonl-file", 1)}
    assert sum(p["body"]["records"] for p in payloads) == 100
