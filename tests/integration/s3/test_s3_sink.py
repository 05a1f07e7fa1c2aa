"""The S3 sink against a real S3 server (MinIO, ``s3_endpoint``): outputs read back exactly,
files spanning checkpoints (also across processes), lingering cleanup after a crash, idempotent
recovery, and typed errors for bad input. No mocks."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pytest
from support.s3.worker import rows

from twophase.connectors.s3 import RollingPolicy, S3Committable, S3Sink, S3SinkConfig
from twophase.connectors.s3.config import MiB
from twophase.connectors.s3.internal.committable import IN_PROGRESS_CODEC
from twophase.connectors.s3.internal.naming import TEMP_DIR
from twophase.integration.services import S3Endpoint
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError
from twophase.sinks.outcome import CommitOutcome

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.s3

MakeConfig = Callable[..., S3SinkConfig]
PREFIX = "warehouse/out"
NEVER_ROLL = RollingPolicy(max_file_bytes=10**12, rollover_interval_ms=None, inactivity_interval_ms=None)


def ctx(
    checkpoint: int, partition: int = 0, state: JsonObject | None = None, attempt: int = 0
) -> WriterContext:
    return WriterContext("job-it", "out", checkpoint, partition, attempt, 2, restored_state=state)


def pending_uploads(s3: S3Client, bucket: str) -> list[str]:
    return [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def keys(s3: S3Client, bucket: str, prefix: str = "") -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for p in pages for o in p.get("Contents", []))


def data_keys(s3: S3Client, bucket: str) -> list[str]:
    return [k for k in keys(s3, bucket, PREFIX + "/") if f"/{TEMP_DIR}/" not in k]


def tail_keys(s3: S3Client, bucket: str) -> list[str]:
    return keys(s3, bucket, f"{PREFIX}/{TEMP_DIR}/")


def read(s3: S3Client, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def ids_of(data: bytes) -> list[int]:
    return [json.loads(line)["id"] for line in data.decode().splitlines()]


def padded_rows(first: int, count: int, pad: int = 1000) -> pa.RecordBatch:
    """Pre-encoded JSON lines of about ``pad`` bytes each."""
    return pa.record_batch(
        {"v": [json.dumps({"id": i, "pad": "x" * pad}) for i in range(first, first + count)]}
    )


def arrow_fs(endpoint: S3Endpoint) -> pafs.S3FileSystem:
    url = urlsplit(endpoint.endpoint_url)
    return pafs.S3FileSystem(
        endpoint_override=url.netloc,
        scheme=url.scheme,
        access_key=endpoint.access_key,
        secret_key=endpoint.secret_key,
        region=endpoint.region,
    )


# --- outputs read back exactly ---------------------------------------------------------------------


def test_partitioned_parquet_reads_back_exactly(
    make_config: MakeConfig, s3: S3Client, bucket: str, s3_endpoint: S3Endpoint
) -> None:
    sink = S3Sink(
        "out",
        make_config(
            partition_by=("day",),
            part_size_bytes=5 * MiB,
            parquet_compression="none",
            parquet_row_group_bytes=2 * MiB,
        ),
    )
    n = 800_000  # ~13 MiB per subtask in the `big` column: several 5 MiB parts per file
    table = pa.table(
        {
            "id": pa.array(range(2 * n), pa.int64()),
            "day": pa.array([i % 2 for i in range(2 * n)], pa.int64()),
            "big": pa.array([(i * 2654435761) % 2**61 for i in range(2 * n)], pa.int64()),
            "name": pa.array([None if i % 7 == 0 else f"n{i}" for i in range(2 * n)], pa.string()),
            "ts": pa.array(range(2 * n), pa.timestamp("us", tz="UTC")),
            "flag": pa.array([i % 3 == 0 for i in range(2 * n)], pa.bool_()),
        }
    )
    sink.validate(table.schema)
    committables = []
    for partition in (0, 1):
        txn = sink.begin_transaction(ctx(1, partition))
        for batch in table.slice(partition * n, n).to_batches(max_chunksize=100_000):
            sink.write(txn, batch)
        committable = sink.pre_commit(txn)
        assert sink.snapshot_in_progress(txn) is None
        assert committable is not None
        committables.append(sink.decode(json.loads(json.dumps(sink.encode(committable)))))
    assert any(len(f.parts) > 1 for c in committables for f in c.files)
    assert data_keys(s3, bucket) == []  # invisible until commit
    for c in committables:
        assert sink.commit(c) is CommitOutcome.COMMITTED
    assert len(data_keys(s3, bucket)) == 4 and pending_uploads(s3, bucket) == []

    dataset = ds.dataset(
        f"{bucket}/{PREFIX}",
        filesystem=arrow_fs(s3_endpoint),
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("day", pa.int64())]), flavor="hive"),
    )
    got = dataset.to_table().sort_by("id")
    assert got.equals(table.select(got.column_names))


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_row_formats_read_back_exactly(make_config: MakeConfig, s3: S3Client, bucket: str, fmt: str) -> None:
    sink = S3Sink("out", make_config(format=fmt, rolling=RollingPolicy(on_checkpoint=True)))
    table = pa.table(
        {
            "id": pa.array(range(1000), pa.int64()),
            "x": pa.array([i / 8 for i in range(1000)], pa.float64()),
            "s": pa.array([None if i % 5 == 0 else f'é,"{i}"\n' for i in range(1000)], pa.string()),
            "b": pa.array([i % 2 == 0 for i in range(1000)], pa.bool_()),
        }
    )
    txn = sink.begin_transaction(ctx(1))
    for batch in table.to_batches(max_chunksize=300):
        sink.write(txn, batch)
    committable = sink.pre_commit(txn)
    assert sink.snapshot_in_progress(txn) is None and committable is not None
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    (key,) = data_keys(s3, bucket)
    assert key.endswith("." + fmt)
    data = read(s3, bucket, key)
    if fmt == "jsonl":
        got = pajson.read_json(
            io.BytesIO(data), parse_options=pajson.ParseOptions(explicit_schema=table.schema)
        )
    else:
        types = {f.name: f.type for f in table.schema}
        got = pacsv.read_csv(
            io.BytesIO(data),
            convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True),
        )
    assert got.equals(table)


def test_storage_class_is_passed_through(make_config: MakeConfig, s3: S3Client, bucket: str) -> None:
    sink = S3Sink("out", make_config(format="jsonl", storage_class="REDUCED_REDUNDANCY"))
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, rows(0, 3))
    committable = sink.finish(txn)
    assert committable is not None and sink.commit(committable) is CommitOutcome.COMMITTED
    (key,) = data_keys(s3, bucket)
    assert s3.head_object(Bucket=bucket, Key=key).get("StorageClass") == "REDUCED_REDUNDANCY"


# --- files spanning checkpoints ----------------------------------------------------------------------


def epoch(
    sink: S3Sink, checkpoint: int, batch: pa.RecordBatch, state: JsonObject | None, attempt: int = 0
) -> tuple[S3Committable | None, JsonObject | None]:
    txn = sink.begin_transaction(ctx(checkpoint, state=state, attempt=attempt))
    sink.write(txn, batch)
    return sink.pre_commit(txn), sink.snapshot_in_progress(txn)


def test_json_lines_file_spans_checkpoints_and_completes_at_the_final_one(
    make_config: MakeConfig, s3: S3Client, bucket: str
) -> None:
    sink = S3Sink(
        "out", make_config(format="jsonl", json_column="v", part_size_bytes=5 * MiB, rolling=NEVER_ROLL)
    )
    c1, s1 = epoch(sink, 1, padded_rows(0, 3000), None)  # ~3 MiB: a tail, no part
    assert c1 is None and s1 is not None
    (f1,) = IN_PROGRESS_CODEC.from_json(s1).files
    assert f1.parts == () and f1.tail_key is not None
    c2, s2 = epoch(sink, 2, padded_rows(3000, 4000), s1)  # +4 MiB: one 5 MiB part, 2 MiB tail
    assert c2 is None and s2 is not None
    (f2,) = IN_PROGRESS_CODEC.from_json(s2).files
    assert (f2.key, f2.upload_id) == (f1.key, f1.upload_id)
    assert [p.size for p in f2.parts] == [5 * MiB] and 0 < f2.tail_size < 5 * MiB
    assert data_keys(s3, bucket) == [] and len(tail_keys(s3, bucket)) == 2
    assert pending_uploads(s3, bucket) == [f1.key]

    txn = sink.begin_transaction(ctx(3, state=s2))
    sink.write(txn, padded_rows(7000, 10))
    final = sink.finish(txn)  # end of input: the in-progress file becomes the final committable
    assert final is not None and [f.key for f in final.files] == [f1.key]
    assert data_keys(s3, bucket) == []  # still invisible until the final checkpoint commits
    assert sink.commit(final) is CommitOutcome.COMMITTED
    assert data_keys(s3, bucket) == [f1.key]
    assert ids_of(read(s3, bucket, f1.key)) == list(range(7010))
    assert tail_keys(s3, bucket) == [] and pending_uploads(s3, bucket) == []


def test_retried_epoch_overwrites_the_failed_attempts_parts(
    make_config: MakeConfig, s3: S3Client, bucket: str
) -> None:
    sink = S3Sink(
        "out", make_config(format="jsonl", json_column="v", part_size_bytes=5 * MiB, rolling=NEVER_ROLL)
    )
    _, s1 = epoch(sink, 1, padded_rows(0, 3000), None)
    # attempt 0 of epoch 2 uploads part 1 and snapshots, but its task fails before acknowledging
    _, s2_failed = epoch(sink, 2, padded_rows(100_000, 4000), s1, attempt=0)
    assert [p.number for p in IN_PROGRESS_CODEC.from_json(s2_failed).files[0].parts] == [1]  # type: ignore[arg-type]
    # attempt 1 resumes from checkpoint 1 again and writes the replayed rows
    txn = sink.begin_transaction(ctx(2, state=s1, attempt=1))
    sink.write(txn, padded_rows(3000, 4000))
    final = sink.finish(txn)
    assert final is not None and sink.commit(final) is CommitOutcome.COMMITTED
    (key,) = data_keys(s3, bucket)
    assert ids_of(read(s3, bucket, key)) == list(range(7000))


def run_worker(
    request: dict[str, Any], endpoint: S3Endpoint, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"request-{request['mode']}-{request['checkpoint_id']}-{request['partition']}.json"
    path.write_text(json.dumps(request))
    env = {**os.environ, **endpoint.aws_env()}  # the standard AWS chain, as on an executor
    return subprocess.run(
        [sys.executable, "-m", "support.s3.worker", str(path)],
        env=env,
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
    )


def worker_request(
    bucket: str,
    mode: str,
    checkpoint: int,
    partition: int,
    state: JsonObject | None,
    first: int,
    n: int,
    out: Path,
) -> dict[str, Any]:
    return {
        "mode": mode,
        "config": {
            "bucket": bucket,
            "prefix": PREFIX,
            "format": "jsonl",
            "json_column": "v",
            "rolling": {
                "max_file_bytes": 10**12,
                "rollover_interval_ms": None,
                "inactivity_interval_ms": None,
            },
        },
        "job_id": "job-it",
        "sink": "out",
        "checkpoint_id": checkpoint,
        "partition": partition,
        "num_partitions": 2,
        "restored_state": state,
        "rows": [first, n],
        "out": str(out),
    }


def test_resume_in_a_new_process_continues_the_same_file(
    make_config: MakeConfig, s3: S3Client, bucket: str, s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    sink = S3Sink("out", make_config(format="jsonl", json_column="v", rolling=NEVER_ROLL))
    _, s1 = epoch(sink, 1, rows(0, 5), None)
    assert s1 is not None
    out = tmp_path / "result.json"
    proc = run_worker(worker_request(bucket, "epoch", 2, 0, s1, 5, 7, out), s3_endpoint, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["committable"] is None
    (f1,) = IN_PROGRESS_CODEC.from_json(s1).files
    (f2,) = IN_PROGRESS_CODEC.from_json(result["state"]).files
    assert (f2.key, f2.upload_id, f2.record_count) == (f1.key, f1.upload_id, 12)
    assert s3_endpoint.secret_key not in out.read_text()

    txn = sink.begin_transaction(ctx(3, state=result["state"]))
    sink.write(txn, rows(12, 3))
    final = sink.finish(txn)
    assert final is not None and sink.commit(final) is CommitOutcome.COMMITTED
    assert ids_of(read(s3, bucket, f1.key)) == list(range(15))
    assert pending_uploads(s3, bucket) == [] and tail_keys(s3, bucket) == []


# --- recovery ----------------------------------------------------------------------------------


def test_zero_lingering_uploads_and_tails_after_a_crash(
    make_config: MakeConfig, s3: S3Client, bucket: str, s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    config = make_config(format="jsonl", json_column="v", rolling=NEVER_ROLL)
    sink = S3Sink("out", config)
    # checkpoint 1 completes: partition 0 keeps a file in progress, partition 1 rolled one
    _, held_state = epoch(sink, 1, rows(0, 5), None)
    txn = sink.begin_transaction(ctx(1, partition=1))
    sink.write(txn, rows(100, 5))
    held_committable = sink.finish(txn)
    assert held_state is not None and held_committable is not None
    # epoch 2 crashes in other processes (kill -9 semantics): partition 0 had resumed the held
    # file and written a new tail; partition 1 had opened a new upload
    for partition, state, first in ((0, held_state, 5), (1, None, 105)):
        req = worker_request(bucket, "crash", 2, partition, state, first, 4, tmp_path / "unused.json")
        assert run_worker(req, s3_endpoint, tmp_path).returncode == 137
    assert len(pending_uploads(s3, bucket)) == 3 and len(tail_keys(s3, bucket)) == 3
    # another job's upload under the same prefix is never touched
    other = S3Sink("out", config)
    other_txn = other.begin_transaction(WriterContext("job-other", "out", 1, 0, 0, 1))
    other.write(other_txn, rows(0, 1))

    # restart from checkpoint 1, in a fresh sink instance as after a driver crash
    restored = S3Sink("out", config)
    committable = restored.decode(json.loads(json.dumps(restored.encode(held_committable))))
    assert restored.recover_and_commit(committable) is CommitOutcome.COMMITTED
    scope = LingeringScope[S3Committable](
        "job-it", "out", held=(committable,), held_in_progress=(held_state,), up_to_checkpoint=2
    )
    assert restored.abort_lingering(scope) == 1  # partition 1's crashed upload
    (held_file,) = IN_PROGRESS_CODEC.from_json(held_state).files
    assert sorted(pending_uploads(s3, bucket)) == sorted([held_file.key, other_txn.files[""].key])
    assert tail_keys(s3, bucket) == [held_file.tail_key]  # only the held checkpoint's tail

    # epoch 2 replayed, then end of input
    txn = restored.begin_transaction(ctx(2, state=held_state, attempt=1))
    restored.write(txn, rows(5, 4))
    final = restored.finish(txn)
    assert final is not None and restored.commit(final) is CommitOutcome.COMMITTED
    txn = restored.begin_transaction(ctx(2, partition=1, attempt=1))
    restored.write(txn, rows(105, 4))
    final1 = restored.finish(txn)
    assert final1 is not None and restored.commit(final1) is CommitOutcome.COMMITTED
    assert restored.abort_lingering(LingeringScope("job-it", "out")) == 0
    other.abort_open(other_txn)

    assert pending_uploads(s3, bucket) == [] and tail_keys(s3, bucket) == []
    got = sorted(i for k in data_keys(s3, bucket) for i in ids_of(read(s3, bucket, k)))
    assert got == [*range(9), *range(100, 109)]  # exactly once: nothing from the crashed attempts


def test_commit_after_recovery_is_idempotent(make_config: MakeConfig, s3: S3Client, bucket: str) -> None:
    sink = S3Sink("out", make_config(format="jsonl", json_column="v"))
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, rows(0, 10))
    committable = sink.finish(txn)
    assert committable is not None
    payload = json.loads(json.dumps(sink.encode(committable)))
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    (key,) = data_keys(s3, bucket)
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    again = S3Sink("out", make_config(format="jsonl", json_column="v"))
    assert again.recover_and_commit(again.decode(payload)) is CommitOutcome.ALREADY_COMMITTED
    assert again.commit(again.decode(payload)) is CommitOutcome.ALREADY_COMMITTED
    assert s3.head_object(Bucket=bucket, Key=key)["ETag"] == etag
    assert ids_of(read(s3, bucket, key)) == list(range(10))


def test_commit_of_an_aborted_upload_is_lost(make_config: MakeConfig, s3: S3Client, bucket: str) -> None:
    sink = S3Sink("out", make_config(format="jsonl", json_column="v"))
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, rows(0, 10))
    committable = sink.finish(txn)
    assert committable is not None
    (f,) = committable.files
    s3.abort_multipart_upload(Bucket=bucket, Key=f.key, UploadId=f.upload_id)  # e.g. a lifecycle rule
    assert sink.recover_and_commit(committable) is CommitOutcome.LOST
    assert data_keys(s3, bucket) == []


# --- bad input ---------------------------------------------------------------------------------------


def test_missing_bucket_is_a_config_error(make_config: MakeConfig, s3: S3Client) -> None:
    sink = S3Sink("out", make_config(bucket="no-such-bucket-twophase", format="jsonl", max_attempts=1))
    with pytest.raises(ConfigError, match="does not exist"):
        sink.validate(pa.schema([("v", pa.string())]))
    txn = sink.begin_transaction(ctx(1))
    with pytest.raises(ConfigError, match="does not exist"):
        sink.write(txn, rows(0, 1))


def test_denied_credentials_are_a_config_error(make_config: MakeConfig, s3: S3Client, bucket: str) -> None:
    base = make_config(format="jsonl", max_attempts=1)
    wrong = dataclasses.replace(base.storage_options, secret_access_key="definitely-wrong-secret")
    bad = dataclasses.replace(base, storage_options=wrong)
    sink = S3Sink("out", bad)
    with pytest.raises(ConfigError, match="denied") as info:
        sink.validate(pa.schema([("v", pa.string())]))
    assert "definitely-wrong-secret" not in str(info.value)
    txn = sink.begin_transaction(ctx(1))
    with pytest.raises(ConfigError, match="denied"):
        sink.write(txn, rows(0, 1))
    assert keys(s3, bucket) == [] and pending_uploads(s3, bucket) == []


@pytest.mark.parametrize("prefix", ["bad prefix", "a/../b", "tab\there", "x#y"])
def test_illegal_prefix_is_refused_before_anything_is_written(
    make_config: MakeConfig, s3: S3Client, bucket: str, prefix: str
) -> None:
    with pytest.raises(ConfigError):
        make_config(prefix=prefix)
    assert keys(s3, bucket) == [] and pending_uploads(s3, bucket) == []
