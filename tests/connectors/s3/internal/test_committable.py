"""Committable and in-progress state encodings: versioned JSON round trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twophase.connectors.s3.internal.committable import (
    COMMITTABLE_CODEC,
    IN_PROGRESS_CODEC,
    InProgressFile,
    InProgressState,
    PendingFile,
    S3Committable,
    UploadedPart,
)
from twophase.sinks.errors import CommittableDecodeError

parts_strategy = st.lists(
    st.tuples(
        st.integers(1, 10**10), st.text(min_size=1, max_size=40), st.one_of(st.none(), st.text(max_size=12))
    ),
    min_size=1,
    max_size=6,
).map(
    lambda items: tuple(
        UploadedPart(number=i + 1, etag=etag, size=size, checksum_crc32=crc)
        for i, (size, etag, crc) in enumerate(items)
    )
)


@given(
    parts=parts_strategy, records=st.integers(0, 10**9), tail=st.one_of(st.none(), st.just("p/_twophase/t/"))
)
def test_committable_round_trip(parts: tuple[UploadedPart, ...], records: int, tail: str | None) -> None:
    f = PendingFile(
        bucket="b",
        key="p/day=1/part-00001-3-abc.jsonl",
        upload_id="id/with+chars==",
        parts=parts,
        byte_count=sum(p.size for p in parts),
        record_count=records,
        tail_prefix=tail,
    )
    c = S3Committable(files=(f, f))
    payload = json.loads(json.dumps(COMMITTABLE_CODEC.to_json(c)))
    assert payload["kind"] == "s3.files" and payload["version"] == 1
    assert COMMITTABLE_CODEC.from_json(payload) == c
    assert COMMITTABLE_CODEC.loads(COMMITTABLE_CODEC.dumps(c)) == c


@given(
    parts=st.one_of(st.just(()), parts_strategy),
    tail=st.one_of(st.none(), st.integers(1, 5 * 1024 * 1024 - 1)),
    times=st.tuples(st.integers(0, 2**45), st.integers(0, 2**45)),
)
def test_in_progress_state_round_trip(
    parts: tuple[UploadedPart, ...], tail: int | None, times: tuple[int, int]
) -> None:
    f = InProgressFile(
        partition_path="day=1",
        bucket="b",
        key="p/day=1/part-00000-1-t-u.jsonl",
        file_id="0" * 32,
        upload_id="up",
        parts=parts,
        uploaded_bytes=sum(p.size for p in parts),
        tail_key=None if tail is None else "p/_twophase/t/tails/u/1-0-ab.tail",
        tail_size=tail or 0,
        record_count=5,
        opened_at_ms=times[0],
        last_write_ms=times[1],
        has_tails=tail is not None,
    )
    state = InProgressState(files=(f,))
    payload = json.loads(json.dumps(IN_PROGRESS_CODEC.to_json(state)))
    assert payload["kind"] == "s3.in_progress"
    assert IN_PROGRESS_CODEC.from_json(payload) == state
    assert IN_PROGRESS_CODEC.from_json(payload).files[0].byte_count == f.uploaded_bytes + (tail or 0)


def _payload(parts: list[dict[str, object]], byte_count: int) -> dict[str, object]:
    body = {
        "bucket": "b",
        "key": "k",
        "upload_id": "u",
        "parts": parts,
        "byte_count": byte_count,
        "record_count": 1,
    }
    return {"kind": "s3.files", "version": 1, "body": {"files": [body]}}


@pytest.mark.parametrize(
    "payload",
    [
        _payload([], 0),  # no parts
        _payload([{"number": 2, "etag": "a", "size": 1}, {"number": 1, "etag": "b", "size": 1}], 2),  # order
        _payload([{"number": 1, "etag": "a", "size": 1}], 5),  # byte count mismatch
        _payload([{"number": "1", "etag": "a", "size": 1}], 1),  # mistyped
        {"kind": "s3.files", "version": 1, "body": {"files": []}},  # empty committable
        {"kind": "s3.files", "version": 2, "body": {"files": []}},  # newer version
        {"kind": "kafka.transaction", "version": 1, "body": {}},  # other kind
    ],
)
def test_invalid_payloads_are_refused(payload: dict[str, object]) -> None:
    with pytest.raises(CommittableDecodeError):
        COMMITTABLE_CODEC.from_json(payload)


def test_in_progress_tail_fields_must_agree() -> None:
    body = {
        "files": [
            {
                "partition_path": "",
                "bucket": "b",
                "key": "k",
                "file_id": "f",
                "upload_id": "u",
                "parts": [],
                "uploaded_bytes": 0,
                "tail_key": None,
                "tail_size": 10,
                "record_count": 1,
                "opened_at_ms": 0,
                "last_write_ms": 0,
                "has_tails": False,
            }
        ]
    }
    with pytest.raises(CommittableDecodeError):
        IN_PROGRESS_CODEC.from_json({"kind": "s3.in_progress", "version": 1, "body": body})


def test_the_sink_measures_records_and_bytes_of_a_committable() -> None:
    from twophase.connectors.s3 import S3Sink, S3SinkConfig
    from twophase.sinks.outcome import CommittableSize

    sink = S3Sink("out", S3SinkConfig(bucket="bucket", prefix="p"))
    files = tuple(
        PendingFile("b", f"p/k{i}", f"u{i}", (UploadedPart(1, '"e"', n),), n, r)
        for i, (n, r) in enumerate([(100, 3), (50, 2)])
    )
    assert sink.measure(S3Committable(files)) == CommittableSize(records=5, bytes=150)
