"""Checkpoint metadata encoding without payload copies and with the collector paused (issue #29
item 3): the bytes are the plain encoding, zlib-compressed (version 2), version 1's plain bytes
still load, and the collector's state is restored."""

from __future__ import annotations

import gc
import json
import zlib

import pytest

from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import payload_bytes
from twophase.sinks.errors import CommittableDecodeError


def _meta() -> CheckpointMetadata:
    payload = payload_bytes(
        {"kind": "kafka.transaction", "version": 1, "body": {"transactional_id": "t-0", "z": 1, "a": [1]}}
    )
    return CheckpointMetadata(
        job_id="j",
        checkpoint_id=3,
        kind=CheckpointKind.CHECKPOINT,
        timestamp_ms=1,
        sinks={
            "k": SinkSnapshot(2, (CommittableRecord(0, 0, payload, 3), CommittableRecord(1, 1, payload))),
            "s": SinkSnapshot(1, in_progress={0: {"kind": "s3.in_progress", "version": 1, "body": {}}}),
        },
        source_position={"engine": "spark", "batch_id": 2},
    )


def test_bytes_are_the_plain_encoding_compressed() -> None:
    meta = _meta()
    plain = json.dumps(meta.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")
    assert zlib.decompress(meta.dumps()) == plain
    assert meta.dumps() == meta.dumps()  # deterministic: S3's publish compares what it reads back
    assert CheckpointMetadata.loads(plain) == meta  # uncompressed, as version 1 wrote it


def test_version_1_bytes_still_load() -> None:
    meta = _meta()
    v1 = json.dumps(meta.to_json() | {"version": 1}, sort_keys=True, separators=(",", ":")).encode("utf-8")
    assert CheckpointMetadata.loads(v1) == meta


def test_embedded_payloads_read_back_as_the_canonical_bytes() -> None:
    """Versions 1 and 2 embed each payload as a JSON object; reading one gives the canonical
    bytes whatever the object's key order or spacing (issue #42: payloads are bytes)."""
    meta = _meta()
    obj = meta.to_json()
    assert obj["sinks"]["k"]["committables"][0]["payload"] == json.loads(
        meta.sinks["k"].committables[0].payload
    )
    shuffled = json.loads(json.dumps(obj, indent=3))
    first = shuffled["sinks"]["k"]["committables"][0]
    first["payload"] = dict(reversed(list(first["payload"].items())))
    back = CheckpointMetadata.from_json(shuffled)
    assert [r.payload for r in back.sinks["k"].committables] == [
        r.payload for r in meta.sinks["k"].committables
    ]
    with pytest.raises(CommittableDecodeError, match="invalid checkpoint metadata"):
        CheckpointMetadata.from_json(
            obj
            | {
                "sinks": {
                    "k": {
                        **obj["sinks"]["k"],
                        "committables": [{"partition": 0, "attempt": 0, "payload": [1]}],
                    }
                }
            }
        )


def test_collector_state_is_restored() -> None:
    assert gc.isenabled()
    _meta().dumps()
    CheckpointMetadata.loads(_meta().dumps())
    with pytest.raises(CommittableDecodeError):
        CheckpointMetadata.loads(b"{not json")
    with pytest.raises(CommittableDecodeError):
        CheckpointMetadata.loads(b'{"format": "twophase.checkpoint", "version": 1}')
    assert gc.isenabled()
    gc.disable()
    try:
        CheckpointMetadata.loads(_meta().dumps())
        assert not gc.isenabled()  # left as the caller set it
    finally:
        gc.enable()
