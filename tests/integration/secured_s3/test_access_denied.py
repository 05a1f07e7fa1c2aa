"""Each action of the least-privilege policy is needed, and its absence is reported as what to
allow: for every action the S3 sink, the Delta sink or ``s3://`` checkpoint storage uses, a user
whose policy lacks just that action runs the component, which fails with ONE line naming the IAM
action and the ``s3://`` key or prefix it was refused on (#27 item 5).

The sinks raise :class:`S3AccessDeniedError`; checkpoint storage keeps its own error types (the
coordinator decides on them) with the same words in the message.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pytest

from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig
from twophase.connectors.s3 import S3Committable, S3Sink
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import open_storage
from twophase.coordinator.storage.s3 import S3CheckpointStorage
from twophase.integration.services import S3Endpoint
from twophase.integration.services.s3_tls import LEAST_PRIVILEGE_ACTIONS
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import CheckpointStorageError, S3AccessDeniedError

from .conftest import BUCKET, MakeUser, jsonl_config

pytestmark = [pytest.mark.s3, pytest.mark.delta]

JOB = "denied-job"


def ctx(checkpoint: int, partition: int = 0, state: JsonObject | None = None) -> WriterContext:
    return WriterContext(JOB, "out", checkpoint, partition, 0, 2, restored_state=state)


def lines(first: int, count: int) -> pa.RecordBatch:
    return pa.record_batch({"v": [json.dumps({"id": i}) for i in range(first, first + count)]})


def run_s3_sink(endpoint: S3Endpoint, prefix: str) -> None:
    """Every call the S3 sink makes in a life with a resumed file, a crash and lingering cleanup."""
    config = jsonl_config(
        endpoint, prefix, max_attempts=2, retry_initial_backoff_ms=1, retry_max_backoff_ms=2
    )
    sink = S3Sink("out", config)
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, lines(0, 5))
    first = sink.pre_commit(txn)
    state = sink.snapshot_in_progress(txn)
    crashed = sink.begin_transaction(ctx(2, partition=1))
    sink.write(crashed, lines(1000, 3))
    sink.pre_commit(crashed)
    resumed = sink.begin_transaction(ctx(2, state=state))
    sink.write(resumed, lines(5, 4))
    final = sink.finish(resumed)
    assert final is not None
    sink.verify_pre_committed([final], [])
    for committable in (first, final):
        if committable is not None:
            sink.commit(committable)
    sink.abort_lingering(LingeringScope[S3Committable](JOB, "out", held=(final,), up_to_checkpoint=2))


def run_delta_sink(endpoint: S3Endpoint, prefix: str) -> None:
    """A committed checkpoint, then a failed one's files cleaned as lingering."""
    sink = DeltaSink(
        "out", DeltaSinkConfig(f"s3://{BUCKET}/{prefix}/table", storage_options=endpoint.s3_options())
    )
    batch = pa.record_batch({"id": pa.array(range(10), pa.int64())})
    sink.validate(batch.schema)
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, batch)
    committable = sink.pre_commit(txn)
    assert committable is not None
    sink.commit_checkpoint(1, [committable])
    txn = sink.begin_transaction(ctx(2))
    sink.write(txn, batch)
    sink.pre_commit(txn)
    sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "out"))


def run_checkpoints(endpoint: S3Endpoint, prefix: str) -> None:
    """Publish, mark committed, list, retention, latest."""
    storage = open_storage(f"s3://{BUCKET}/{prefix}/chk", JOB, s3_options=endpoint.s3_options())
    refs = [
        storage.publish(CheckpointMetadata(JOB, cid, kind, 1_700_000_000_000, {}))
        for cid, kind in ((1, CheckpointKind.CHECKPOINT), (2, CheckpointKind.FINAL))
    ]
    storage.mark_committed(refs[-1].location)
    storage.list_checkpoints()
    storage.apply_retention(1)
    storage.latest()


Runner = Callable[[S3Endpoint, str], None]
CASES: list[tuple[str, Runner, str, type[Exception]]] = [
    *((action, run_s3_sink, "s3-sink", S3AccessDeniedError) for action in LEAST_PRIVILEGE_ACTIONS),
    *(
        (action, run_delta_sink, "delta-sink", S3AccessDeniedError)
        for action in ("s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:ListBucket")
    ),
    *(
        (action, run_checkpoints, "checkpoints", CheckpointStorageError)
        for action in ("s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:ListBucket")
    ),
]


@pytest.mark.parametrize(
    ("action", "run", "error"),
    [pytest.param(a, r, e, id=f"{name}-without-{a.removeprefix('s3:')}") for a, r, name, e in CASES],
)
def test_a_missing_action_is_named_with_the_key(
    make_user: MakeUser, action: str, run: Runner, error: type[Exception]
) -> None:
    user = make_user(tuple(a for a in LEAST_PRIVILEGE_ACTIONS if a != action))
    with pytest.raises(error) as raised:
        run(user.endpoint, user.prefix)
    message = str(raised.value)
    assert "\n" not in message, message
    assert f"S3 denied {action} on s3://{BUCKET}" in message, message
    if action != "s3:ListBucket" or run is not run_delta_sink:  # a HeadBucket names no key
        assert f"s3://{BUCKET}/{user.prefix}/" in message or action == "s3:ListBucketMultipartUploads", (
            message
        )
    if isinstance(raised.value, S3AccessDeniedError):
        assert raised.value.action == action


def test_the_full_policy_runs_every_component(make_user: MakeUser) -> None:
    user = make_user()
    for run in (run_s3_sink, run_delta_sink, run_checkpoints):
        run(user.endpoint, user.prefix)


def test_a_checkpoint_it_may_not_read_is_not_taken_for_corrupt(
    tls_minio: object, make_user: MakeUser
) -> None:
    """Without s3:GetObject, a restore must fail naming the action: were the refusal taken for a
    corrupt checkpoint, ``fallback_to_valid`` would skip every checkpoint and start the job anew."""
    from twophase.integration.services.s3_tls import TlsMinioServer
    from twophase.sinks.errors import CorruptCheckpointError

    assert isinstance(tls_minio, TlsMinioServer)
    user = make_user(tuple(a for a in LEAST_PRIVILEGE_ACTIONS if a != "s3:GetObject"))
    location = f"s3://{BUCKET}/{user.prefix}/chk"
    writer = open_storage(location, JOB, s3_options=tls_minio.endpoint.s3_options())
    for cid in (1, 2):
        writer.publish(CheckpointMetadata(JOB, cid, CheckpointKind.CHECKPOINT, 1_700_000_000_000, {}))
    reader = open_storage(location, JOB, s3_options=user.endpoint.s3_options())
    assert isinstance(reader, S3CheckpointStorage)
    with pytest.raises(CheckpointStorageError) as raised:
        reader.latest(fallback_to_valid=True)
    assert not isinstance(raised.value, CorruptCheckpointError)
    assert f"S3 denied s3:GetObject on s3://{BUCKET}/{user.prefix}/chk/{JOB}/chk-2/_metadata" in str(
        raised.value
    )
