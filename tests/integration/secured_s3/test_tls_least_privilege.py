"""The S3 sink, the Delta sink and ``s3://`` checkpoint storage over TLS (a CA made at start-up,
trusted through ``AWS_CA_BUNDLE``) with an IAM user holding only the least-privilege policy
(``least_privilege_policy``, documented in docs/secured-s3.md). Real writes, read back by another
principal (the root user) through other clients, exact records, zero lingering. No Spark: the
connectors are driven as the coordinator drives them (see test_secured_job.py for the whole job).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig
from twophase.connectors.s3 import S3Committable, S3Sink
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import open_storage
from twophase.integration.services.s3_tls import TlsMinioServer
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError
from twophase.sinks.outcome import CommitOutcome

from .conftest import BUCKET, MakeUser, jsonl_config

pytestmark = [pytest.mark.s3, pytest.mark.delta]

JOB = "secured-job"


def ctx(checkpoint: int, partition: int = 0, state: JsonObject | None = None) -> WriterContext:
    return WriterContext(JOB, "out", checkpoint, partition, 0, 2, restored_state=state)


def lines(first: int, count: int) -> pa.RecordBatch:
    return pa.record_batch({"v": [json.dumps({"id": i}) for i in range(first, first + count)]})


def test_endpoint_is_https_and_unverified_clients_are_refused(tls_minio: TlsMinioServer) -> None:
    import botocore.exceptions

    assert tls_minio.endpoint.endpoint_url.startswith("https://")
    client = tls_minio.endpoint.boto3_client(max_attempts=1)
    client.head_bucket(Bucket=BUCKET)  # verified through AWS_CA_BUNDLE
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("AWS_CA_BUNDLE")
        with pytest.raises(botocore.exceptions.SSLError):
            tls_minio.endpoint.boto3_client(max_attempts=1).head_bucket(Bucket=BUCKET)


def test_s3_sink_under_the_least_privilege_policy(tls_minio: TlsMinioServer, make_user: MakeUser) -> None:
    user = make_user()
    config = jsonl_config(user.endpoint, user.prefix, retry_initial_backoff_ms=1, retry_max_backoff_ms=2)
    sink = S3Sink("out", config)
    # checkpoint 1: the file stays in progress (tail object, open upload)
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, lines(0, 5))
    first = sink.pre_commit(txn)
    state = sink.snapshot_in_progress(txn)
    assert state is not None
    # a crashed attempt of partition 1 leaves an upload nobody holds
    crashed = sink.begin_transaction(ctx(2, partition=1))
    sink.write(crashed, lines(1000, 3))
    sink.pre_commit(crashed)
    # checkpoint 2 resumes the file and ends the input
    resumed = sink.begin_transaction(ctx(2, state=state))
    sink.write(resumed, lines(5, 4))
    final = sink.finish(resumed)
    assert final is not None
    sink.verify_pre_committed([final], [])  # ListParts
    for committable in (first, final):
        if committable is not None:
            assert sink.commit(committable) is CommitOutcome.COMMITTED
    scope = LingeringScope[S3Committable](JOB, "out", held=(final,), up_to_checkpoint=2)
    assert sink.abort_lingering(scope) >= 1
    assert sink.abort_lingering(LingeringScope[S3Committable](JOB, "out")) == 0

    root = tls_minio.endpoint.boto3_client()  # another principal reads back
    listed = root.list_objects_v2(Bucket=BUCKET, Prefix=f"{user.prefix}/files/").get("Contents", [])
    keys = [o["Key"] for o in listed]
    data_keys = [k for k in keys if "/_" not in k.removeprefix(f"{user.prefix}/files/")]
    assert data_keys and len(data_keys) == len(keys)  # no tails left
    got = sorted(
        json.loads(line)["id"]
        for k in data_keys
        for line in root.get_object(Bucket=BUCKET, Key=k)["Body"].read().decode().splitlines()
    )
    assert got == list(range(9))
    uploads = root.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    assert [u["Key"] for u in uploads if u["Key"].startswith(user.prefix)] == []


def test_delta_sink_under_the_least_privilege_policy(tls_minio: TlsMinioServer, make_user: MakeUser) -> None:
    from deltalake import DeltaTable

    user = make_user()
    uri = f"s3://{BUCKET}/{user.prefix}/table"
    sink = DeltaSink("out", DeltaSinkConfig(uri, storage_options=user.endpoint.s3_options()))
    table = pa.table({"id": pa.array(range(300), pa.int64()), "s": [f"r{i}" for i in range(300)]})
    sink.validate(table.schema)
    committables: list[DeltaCommittable] = []
    for partition in (0, 1):
        txn = sink.begin_transaction(ctx(1, partition))
        for batch in table.slice(partition * 150, 150).to_batches():
            sink.write(txn, batch)
        committable = sink.pre_commit(txn)
        assert committable is not None
        committables.append(committable)
    assert sink.commit_checkpoint(1, committables) is CommitOutcome.COMMITTED
    # checkpoint 2 fails after writing its files: they linger until abort_lingering
    txn = sink.begin_transaction(ctx(2))
    sink.write(txn, pa.record_batch({"id": pa.array([999], pa.int64()), "s": ["lost"]}))
    lingering = sink.pre_commit(txn)
    assert lingering is not None
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "out")) == len(lingering.adds)
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "out")) == 0

    root = DeltaSinkConfig(uri, storage_options=tls_minio.endpoint.s3_options())  # trusts AWS_CA_BUNDLE
    reader = DeltaTable(uri, storage_options=root.delta_storage_options())
    got = reader.to_pyarrow_table().sort_by("id")
    assert got.equals(table.select(got.column_names))


def test_delta_sink_keeps_refusing_verify_tls_false(make_user: MakeUser) -> None:
    options = make_user().endpoint.s3_options()
    unverified = type(options)(**{**options.__dict__, "verify_tls": False})
    with pytest.raises(ConfigError, match="verify_tls=False"):
        DeltaSinkConfig(f"s3://{BUCKET}/t", storage_options=unverified)


def test_checkpoints_under_the_least_privilege_policy(tls_minio: TlsMinioServer, make_user: MakeUser) -> None:
    user = make_user()
    storage = open_storage(f"s3://{BUCKET}/{user.prefix}/chk", JOB, s3_options=user.endpoint.s3_options())
    refs = [
        storage.publish(CheckpointMetadata(JOB, cid, kind, 1_700_000_000_000 + cid, {}))
        for cid, kind in (
            (1, CheckpointKind.CHECKPOINT),
            (2, CheckpointKind.CHECKPOINT),
            (3, CheckpointKind.FINAL),
        )
    ]
    storage.mark_committed(refs[-1].location)
    assert storage.is_committed(refs[-1].location)
    assert [r.checkpoint_id for r in storage.list_checkpoints()] == [1, 2, 3]
    assert [r.checkpoint_id for r in storage.apply_retention(1)] == [1, 2]
    latest = storage.latest()
    assert latest is not None and latest.checkpoint_id == 3 and latest.kind is CheckpointKind.FINAL
    root = tls_minio.endpoint.boto3_client()
    listed = root.list_objects_v2(Bucket=BUCKET, Prefix=f"{user.prefix}/chk/").get("Contents", [])
    assert all("chk-3" in o["Key"] for o in listed) and listed
