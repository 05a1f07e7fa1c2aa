"""A restore re-commits an unmarked checkpoint long after its commit, on real MinIO (#43 item 1).

CompleteMultipartUpload leaves no upload behind: a re-commit always answers NoSuchUpload, however
soon, and the committed object at the file's unique key is the sink's only evidence. It must
decide ALREADY_COMMITTED after later checkpoints and after a lifecycle pass that aborts every
incomplete upload, and LOST, naming the key, where the object is gone or holds other bytes.
Everything is read back with a plain boto3 client.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from support.s3.worker import rows

from twophase.connectors.s3 import S3Committable, S3Sink, S3SinkConfig
from twophase.sinks.context import WriterContext
from twophase.sinks.outcome import CommitOutcome

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.s3

MakeConfig = Callable[..., S3SinkConfig]
PARTITIONS = 2
PER_FILE = 5


def _checkpoint(sink: S3Sink, checkpoint: int) -> list[S3Committable]:
    out = []
    for partition in range(PARTITIONS):
        txn = sink.begin_transaction(
            WriterContext("job-unmarked", "out", checkpoint, partition, 0, PARTITIONS)
        )
        sink.write(txn, rows((checkpoint * PARTITIONS + partition) * PER_FILE, PER_FILE))
        committable = sink.finish(txn)
        assert committable is not None
        out.append(committable)
    return out


def _stored(sink: S3Sink, committables: list[S3Committable]) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(sink.encode(c))) for c in committables]


def _restore(make_config: MakeConfig, stored: list[dict[str, Any]]) -> list[CommitOutcome]:
    """A new driver decodes the unmarked checkpoint's committables and re-commits them."""
    sink = S3Sink("out", make_config(format="jsonl", json_column="v"))
    return [sink.recover_and_commit(sink.decode(c)) for c in stored]


def _ids(s3: S3Client, bucket: str) -> list[int]:
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="warehouse/out/"):
        for obj in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            out += [json.loads(line)["id"] for line in body.decode().splitlines()]
    return sorted(out)


def _lifecycle_pass(s3: S3Client, bucket: str) -> int:
    """What a rule AbortIncompleteMultipartUpload does once its days passed: abort every upload."""
    uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    for u in uploads:
        s3.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
    return len(uploads)


def _committed_with_later_checkpoints(
    make_config: MakeConfig,
) -> tuple[S3Sink, dict[int, list[dict[str, Any]]]]:
    """Checkpoint 1 commits (its marker refused), then checkpoints 2..5 commit."""
    sink = S3Sink("out", make_config(format="jsonl", json_column="v"))
    stored = {}
    for checkpoint in range(1, 6):
        committables = _checkpoint(sink, checkpoint)
        assert [sink.commit(c) for c in committables] == [CommitOutcome.COMMITTED] * PARTITIONS
        stored[checkpoint] = _stored(sink, committables)
    return sink, stored


def test_an_unmarked_checkpoint_after_later_checkpoints_and_a_lifecycle_pass_is_already_committed(
    make_config: MakeConfig, s3: S3Client, bucket: str
) -> None:
    sink, stored = _committed_with_later_checkpoints(make_config)
    pending = _stored(sink, _checkpoint(sink, 6))  # published, not committed: the driver died
    assert _lifecycle_pass(s3, bucket) == PARTITIONS  # only checkpoint 6's uploads were incomplete

    assert _restore(make_config, stored[1]) == [CommitOutcome.ALREADY_COMMITTED] * PARTITIONS
    assert _restore(make_config, stored[5]) == [CommitOutcome.ALREADY_COMMITTED] * PARTITIONS
    # the lifecycle rule aborted checkpoint 6 before its commit: nothing can bring it back
    assert _restore(make_config, pending) == [CommitOutcome.LOST] * PARTITIONS
    assert _ids(s3, bucket) == list(range(PARTITIONS * PER_FILE, 6 * PARTITIONS * PER_FILE))


def test_a_committed_object_deleted_by_someone_else_is_lost_by_name(
    make_config: MakeConfig, s3: S3Client, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink, stored = _committed_with_later_checkpoints(make_config)
    key = sink.decode(stored[1][0]).files[0].key
    s3.delete_object(Bucket=bucket, Key=key)
    with caplog.at_level(logging.ERROR):
        assert _restore(make_config, stored[1]) == [CommitOutcome.LOST, CommitOutcome.ALREADY_COMMITTED]
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert key in line and "deleted after its commit" in line and "lifecycle" in line


def test_a_committed_object_overwritten_by_someone_else_is_lost_by_name(
    make_config: MakeConfig, s3: S3Client, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink, stored = _committed_with_later_checkpoints(make_config)
    key = sink.decode(stored[1][1]).files[0].key
    s3.put_object(Bucket=bucket, Key=key, Body=b'{"id": -1}\n')
    with caplog.at_level(logging.ERROR):
        assert _restore(make_config, stored[1]) == [CommitOutcome.ALREADY_COMMITTED, CommitOutcome.LOST]
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert key in line and "overwritten after its commit" in line
    assert -1 in _ids(s3, bucket)  # the other writer's object is left as it is
