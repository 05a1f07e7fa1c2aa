"""The real services behave as the sinks need: Kafka transactions and S3 multipart uploads."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from twophase.integration.readback import key_values, read_topic
from twophase.integration.services import S3Endpoint

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

PART = 5 * 1024 * 1024  # minimum size of a non-final multipart part, bytes


def _topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"services-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    return name


def _transaction(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], commit: bool) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _records(tag: str, n: int) -> list[tuple[bytes, bytes]]:
    return [(f"{tag}-{i}".encode(), f"{tag}-value-{i}".encode()) for i in range(n)]


@pytest.mark.kafka
def test_committed_transaction_is_read_exactly(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    produced = _records("committed", 500)

    _transaction(kafka_bootstrap, topic, produced, commit=True)

    seen = key_values(read_topic(kafka_bootstrap, topic, "read_committed", until_stable=True))
    assert sorted(seen) == sorted(produced)


@pytest.mark.kafka
def test_aborted_transaction_is_invisible_to_read_committed(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    before, aborted, after = _records("before", 50), _records("aborted", 70), _records("after", 30)

    _transaction(kafka_bootstrap, topic, before, commit=True)
    _transaction(kafka_bootstrap, topic, aborted, commit=False)
    _transaction(kafka_bootstrap, topic, after, commit=True)

    assert sorted(
        key_values(read_topic(kafka_bootstrap, topic, "read_committed", until_stable=True))
    ) == sorted(before + after)
    # the aborted records were really written: an uncommitted reader sees them
    assert sorted(
        key_values(read_topic(kafka_bootstrap, topic, "read_uncommitted", until_stable=True))
    ) == sorted(before + aborted + after)


@pytest.mark.s3
def test_completed_multipart_upload_reads_back_exactly(s3_endpoint: S3Endpoint) -> None:
    bucket = f"services-{uuid.uuid4().hex[:8]}"
    s3_endpoint.ensure_bucket(bucket)
    client = s3_endpoint.boto3_client()
    data = [bytes([n]) * PART for n in (1, 2)] + [b"last part"]
    upload = client.create_multipart_upload(Bucket=bucket, Key="obj")["UploadId"]
    parts: list[CompletedPartTypeDef] = [
        {
            "PartNumber": i,
            "ETag": client.upload_part(Bucket=bucket, Key="obj", UploadId=upload, PartNumber=i, Body=d)[
                "ETag"
            ],
        }
        for i, d in enumerate(data, start=1)
    ]
    assert "Contents" not in client.list_objects_v2(Bucket=bucket)  # invisible before completion

    client.complete_multipart_upload(
        Bucket=bucket, Key="obj", UploadId=upload, MultipartUpload={"Parts": parts}
    )

    assert client.get_object(Bucket=bucket, Key="obj")["Body"].read() == b"".join(data)
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


@pytest.mark.s3
def test_aborted_multipart_upload_leaves_nothing(s3_endpoint: S3Endpoint) -> None:
    bucket = f"services-{uuid.uuid4().hex[:8]}"
    s3_endpoint.ensure_bucket(bucket)
    client = s3_endpoint.boto3_client()
    upload = client.create_multipart_upload(Bucket=bucket, Key="obj")["UploadId"]
    client.upload_part(Bucket=bucket, Key="obj", UploadId=upload, PartNumber=1, Body=b"x" * PART)
    assert [u["UploadId"] for u in client.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [upload]

    client.abort_multipart_upload(Bucket=bucket, Key="obj", UploadId=upload)

    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    with pytest.raises(ClientError) as missing:
        client.head_object(Bucket=bucket, Key="obj")
    assert missing.value.response["Error"]["Code"] in {"404", "NoSuchKey"}


@pytest.mark.s3
@pytest.mark.delta
def test_storage_options_let_deltalake_write_and_read(s3_endpoint: S3Endpoint) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    bucket = f"services-{uuid.uuid4().hex[:8]}"
    s3_endpoint.ensure_bucket(bucket)
    uri = f"s3://{bucket}/table"
    options = s3_endpoint.s3_options().delta_rs_options()

    write_deltalake(uri, pa.table({"id": list(range(10))}), storage_options=options)
    write_deltalake(uri, pa.table({"id": list(range(10, 15))}), mode="append", storage_options=options)

    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(15))


def test_s3_endpoint_repr_hides_the_secret() -> None:
    endpoint = S3Endpoint("http://127.0.0.1:9", "key", "very-secret-value")
    assert "very-secret-value" not in repr(endpoint)
    assert "very-secret-value" not in repr(endpoint.s3_options())
    assert endpoint.s3_options().delta_rs_options()["AWS_ALLOW_HTTP"] == "true"
