"""The GCS file sink's configuration, committable and names: typed errors before anything is
written, session URIs kept out of reprs, digests as GCS reports them, the chunk stream the upload
library reads, the declaration found by the registry."""

from __future__ import annotations

import base64
import hashlib

import google_crc32c
import pytest

from twophase.connectors.gcs import GcsFileSinkConfig
from twophase.connectors.gcs.internal import naming
from twophase.connectors.gcs.internal.committable import COMMITTABLE_CODEC, GcsCommittable, PendingUpload
from twophase.connectors.gcs.internal.writer import ChunkStream
from twophase.connectors.objectstore.internal.layout import FileFormat
from twophase.coordinator.storage.gcs import GcsStorageOptions
from twophase.sinks.errors import ConfigError
from twophase.sinks.registry import CONNECTORS

LOCATION = "gs://data-bucket/warehouse/events"
SESSION = (
    "https://storage.googleapis.com/upload/storage/v1/b/b/o?uploadType=resumable&upload_id=ADPycdsecretsecret"
)


def test_a_valid_config_normalizes_its_fields() -> None:
    config = GcsFileSinkConfig(location=LOCATION + "/", format="jsonl", partition_by=["day"])  # type: ignore[arg-type]
    assert config.bucket == "data-bucket"
    assert config.prefix == "warehouse/events"
    assert config.file_format is FileFormat.JSON_LINES
    assert config.partition_by == ("day",)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"location": "s3://b/p"}, "not a gs://"),
        ({"location": "gs://Data/p"}, "invalid GCS bucket name"),
        ({"location": "gs://data-bucket/a b"}, "GCS key prefix"),
        ({"location": "gs://data-bucket/a/_twophase"}, "reserved segment"),
        ({"format": "avro"}, "unknown GCS file format"),
        ({"chunk_size_bytes": 1000}, "multiple of 256 KiB"),
        ({"chunk_size_bytes": 1024 * 1024 + 1}, "multiple of 256 KiB"),
        ({"partition_by": ("day", "day")}, "distinct"),
        ({"columns": ("key",), "partition_by": ("day",)}, "not among columns"),
        ({"json_column": "j"}, "JSON lines format only"),
        ({"max_open_files": 0}, "max_open_files"),
        ({"storage_options": {"project": "p"}}, "GcsStorageOptions"),
        ({"storage_options": GcsStorageOptions(timeout_s=0)}, "timeout_s"),
    ],
)
def test_bad_configuration_is_one_typed_line(fields: dict[str, object], message: str) -> None:
    fields.setdefault("location", LOCATION)
    with pytest.raises(ConfigError, match=message):
        GcsFileSinkConfig(**fields)  # type: ignore[arg-type]


def _pending(**changes: object) -> PendingUpload:
    fields: dict[str, object] = {
        "bucket": "b",
        "name": "p/part-00000-1-abcdefabcdef-" + "0" * 32 + ".jsonl",
        "session_uri": SESSION,
        "persisted_bytes": 256 * 1024,
        "tail": b"tail",
        "byte_count": 256 * 1024 + 4,
        "crc32c": "AAAAAA==",
        "md5": "x",
        "record_count": 2,
        "content_type": "application/x-ndjson",
    }
    fields.update(changes)
    return PendingUpload(**fields)  # type: ignore[arg-type]


def test_the_committable_round_trips_and_never_shows_its_session() -> None:
    committable = GcsCommittable(files=(_pending(),))
    payload = COMMITTABLE_CODEC.to_json(committable)
    assert payload["kind"] == "gcs.files"
    assert COMMITTABLE_CODEC.from_json(payload) == committable
    assert "secret" not in repr(committable)
    assert "secret" not in committable.files[0].session and "ADPycd" in committable.files[0].session


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"persisted_bytes": 1000, "byte_count": 1004}, "make the file's size"),
        ({"byte_count": 5}, "make the file's size"),
        ({"persisted_bytes": 0, "tail": b"x" * 256 * 1024, "byte_count": 256 * 1024}, "under 256 KiB"),
    ],
)
def test_a_committable_that_cannot_be_a_file_is_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _pending(**changes)


def test_digests_are_what_gcs_reports() -> None:
    digests = naming.Digests()
    digests.update(b"hello ")
    digests.update(b"world")
    assert digests.md5() == base64.b64encode(hashlib.md5(b"hello world").digest()).decode()
    crc = google_crc32c.Checksum(b"hello world")  # type: ignore[no-untyped-call]
    assert digests.crc32c() == base64.b64encode(crc.digest()).decode()  # type: ignore[no-untyped-call]


def test_the_initiate_url_creates_only_and_the_mask_hides_the_upload_id() -> None:
    url = naming.initiate_url("http://127.0.0.1:1/", "b")
    assert url == "http://127.0.0.1:1/upload/storage/v1/b/b/o?uploadType=resumable&ifGenerationMatch=0"
    assert naming.mask_session(SESSION).endswith("upload_id=ADPycd…")


def test_the_chunk_stream_holds_only_what_gcs_has_not_persisted() -> None:
    stream = ChunkStream()
    stream.append(b"abcdef")
    assert stream.read(4) == b"abcd" and stream.tell() == 4
    stream.seek(2)  # the server confirmed 2 bytes: the library reads again from there
    stream.forget(2)
    assert stream.read() == b"cdef" and stream.unread() == 0
    with pytest.raises(ValueError, match="persisted"):
        stream.seek(1)
    stream.append(b"g")
    assert stream.rest() == b"cdefg"


def test_the_registry_knows_the_connector_by_its_declaration() -> None:
    declaration = CONNECTORS.get("gcs")
    assert declaration.extra == "gcs"
    assert declaration.config_class() is GcsFileSinkConfig
