"""``twophase demo``: an end-to-end smoke run against the real services.

For now it proves the two primitives the sinks build on: a Kafka transaction whose records a
read_committed consumer sees exactly once, and an S3 multipart upload that becomes visible only
when completed. The flights job will replace this module's :func:`run_demo`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from integration.readback import read_topic
from integration.services import S3Endpoint, kafka_service, s3_service

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

log = logging.getLogger(__name__)

DEMO_RECORDS = 1000
PART_SIZE = 5 * 1024 * 1024  # S3's minimum size of every part but the last, bytes


@dataclass(frozen=True)
class DemoCheck:
    """One line of the demo summary: what was checked, whether it held, and the evidence."""

    name: str
    ok: bool
    detail: str


def kafka_transaction_check(bootstrap: str, records: int = DEMO_RECORDS) -> DemoCheck:
    """Produce ``records`` records in one transaction, commit, read them back read_committed."""
    topic = f"twophase-demo-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    expected = {(str(i).encode(), f"record-{i}".encode()) for i in range(records)}
    for key, value in sorted(expected):
        producer.produce(topic, key=key, value=value)
    producer.commit_transaction(30)
    seen = read_topic(bootstrap, topic, until_stable=True)
    ok = len(seen) == records and set(seen) == expected
    return DemoCheck(
        "Kafka transaction → read_committed", ok, f"{len(seen)}/{records} records read back from {topic}"
    )


def s3_multipart_check(s3: S3Endpoint) -> DemoCheck:
    """Upload two parts (5 MiB + 1 KiB) as one multipart upload, complete it, read it back."""
    bucket = "twophase-demo"
    key = f"demo/{uuid.uuid4().hex}.bin"
    s3.ensure_bucket(bucket)
    client = s3.boto3_client()
    parts_data = [bytes(range(256)) * (PART_SIZE // 256), b"tail" * 256]
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts: list[CompletedPartTypeDef] = []
    for number, data in enumerate(parts_data, start=1):
        answer = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)
        parts.append({"ETag": answer["ETag"], "PartNumber": number})
    client.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    want = b"".join(parts_data)
    ok = hashlib.sha256(body).digest() == hashlib.sha256(want).digest()
    return DemoCheck(
        "S3 multipart upload → read back", ok, f"{len(body):,}/{len(want):,} bytes at s3://{bucket}/{key}"
    )


def _guarded(name: str, check: Callable[[], DemoCheck]) -> DemoCheck:
    try:
        return check()
    except Exception as exc:  # a failed check is reported in the table, not as a traceback
        log.debug("demo check failed", exc_info=True)
        return DemoCheck(name, False, f"{type(exc).__name__}: {exc}".splitlines()[0])


def run_demo() -> list[DemoCheck]:
    """Ensure the services (environment, ``services up`` or native), run every check, stop what it
    started. Service start-up errors (ConfigError, ServiceUnavailableError) propagate."""
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(kafka_service())
        s3 = stack.enter_context(s3_service())
        return [
            _guarded("Kafka transaction → read_committed", lambda: kafka_transaction_check(bootstrap)),
            _guarded("S3 multipart upload → read back", lambda: s3_multipart_check(s3)),
        ]
