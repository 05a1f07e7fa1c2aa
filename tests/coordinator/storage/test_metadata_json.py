"""CheckpointMetadata as versioned JSON: round trips and refusal of unknown formats/versions."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twophase.coordinator.state.metadata import (
    FORMAT,
    VERSION,
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import payload_bytes
from twophase.sinks.errors import CommittableDecodeError

MakeMeta = Callable[..., CheckpointMetadata]


@pytest.mark.parametrize("kind", list(CheckpointKind))
def test_round_trip_every_kind(make_meta: MakeMeta, kind: CheckpointKind) -> None:
    meta = make_meta(12, kind, end_of_input=kind is CheckpointKind.FINAL)
    back = CheckpointMetadata.loads(meta.dumps())
    assert back == meta
    assert back.kind is kind
    assert back.sinks["archive"].in_progress[2]["body"]["key"] == "out/part-2.jsonl"
    assert back.source_position == {"engine": "spark", "query_id": "0f1e2d3c", "batch_id": 11}
    assert back.fully_finished == (("source-1",) if kind is CheckpointKind.FINAL else ())
    assert back.end_of_input is (kind is CheckpointKind.FINAL)


def test_round_trip_without_source_position_and_sinks() -> None:
    meta = CheckpointMetadata("j", 1, CheckpointKind.CHECKPOINT, 5, sinks={}, source_position=None)
    assert CheckpointMetadata.loads(meta.dumps()) == meta


def test_json_starts_with_format_and_version(make_meta: MakeMeta) -> None:
    obj = json.loads(zlib.decompress(make_meta(1).dumps()))
    assert obj["format"] == FORMAT == "twophase.checkpoint"
    assert obj["version"] == VERSION == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": VERSION + 1}, "version 3 is a manifest whose committables are in files"),
        (
            {"version": VERSION + 2},
            "unsupported checkpoint metadata version 4: this twophase reads versions 1 to 3",
        ),
        ({"version": 0}, "unsupported checkpoint metadata version 0"),
        ({"version": True}, "unsupported checkpoint metadata version True"),
        ({"version": "1"}, "unsupported checkpoint metadata version"),
        ({"format": "flink.checkpoint"}, "not a twophase.checkpoint object"),
        ({"kind": "incremental"}, "invalid checkpoint metadata"),
        ({"checkpoint_id": "7"}, "invalid checkpoint metadata"),
        ({"sinks": []}, "invalid checkpoint metadata"),
    ],
)
def test_unknown_format_version_or_fields_refused(
    make_meta: MakeMeta, change: dict[str, Any], message: str
) -> None:
    obj = make_meta(3).to_json() | change
    with pytest.raises(CommittableDecodeError, match=message):
        CheckpointMetadata.loads(json.dumps(obj))


def test_missing_version_refused(make_meta: MakeMeta) -> None:
    obj = make_meta(3).to_json()
    del obj["version"]
    with pytest.raises(CommittableDecodeError, match="unsupported checkpoint metadata version None"):
        CheckpointMetadata.loads(json.dumps(obj))


def test_not_json_refused() -> None:
    with pytest.raises(CommittableDecodeError, match="not JSON"):
        CheckpointMetadata.loads(b'{"format": "twophase.checkpoint", "vers')


# -- property: any metadata survives dumps/loads unchanged -----------------------------------------

_json_scalar = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
_json_value = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_json_object = st.dictionaries(st.text(max_size=6), _json_value, max_size=4)
_snapshot = st.builds(
    SinkSnapshot,
    num_partitions=st.integers(1, 64),
    committables=st.lists(
        st.builds(CommittableRecord, st.integers(0, 63), st.integers(0, 5), _json_object.map(payload_bytes)),
        max_size=4,
    ).map(tuple),
    in_progress=st.dictionaries(st.integers(0, 63), _json_object, max_size=3),
)
_metadata = st.builds(
    CheckpointMetadata,
    job_id=st.text(min_size=1, max_size=12),
    checkpoint_id=st.integers(1, 2**62),
    kind=st.sampled_from(CheckpointKind),
    timestamp_ms=st.integers(0, 2**62),
    sinks=st.dictionaries(st.text(min_size=1, max_size=8), _snapshot, max_size=3),
    source_position=st.none() | _json_object,
    fully_finished=st.lists(st.text(max_size=6), max_size=3).map(tuple),
    end_of_input=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(_metadata)
def test_any_metadata_round_trips(meta: CheckpointMetadata) -> None:
    assert CheckpointMetadata.loads(meta.dumps()) == meta
