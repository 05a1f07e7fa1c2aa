"""sinks.codec: versioned JSON committables — round trips, version refusal, upgrades, strict typing."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twophase.sinks.codec import CommittableCodec
from twophase.sinks.errors import CommittableDecodeError


@dataclass(frozen=True)
class Part:
    number: int
    etag: str


@dataclass(frozen=True)
class Upload:
    bucket: str
    key: str
    upload_id: str
    parts: tuple[Part, ...]
    size: int
    ratio: float
    tail: bytes | None = None
    note: str | None = None
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    flags: tuple[bool, int] = (False, 0)


CODEC = CommittableCodec(Upload, "test.upload", version=1)

text = st.text(max_size=20)
uploads = st.builds(
    Upload,
    bucket=text,
    key=text,
    upload_id=text,
    parts=st.lists(st.builds(Part, number=st.integers(1, 10_000), etag=text), max_size=5).map(tuple),
    size=st.integers(min_value=0, max_value=2**62),
    ratio=st.floats(allow_nan=False, allow_infinity=False),
    tail=st.none() | st.binary(max_size=64),
    note=st.none() | text,
    tags=st.dictionaries(text, text, max_size=3),
    flags=st.tuples(st.booleans(), st.integers(-5, 5)),
)


@given(uploads)
def test_round_trip_through_json_text(value: Upload) -> None:
    assert CODEC.loads(CODEC.dumps(value)) == value
    assert CODEC.from_json(json.loads(json.dumps(CODEC.to_json(value)))) == value


def test_payload_shape_is_versioned_and_bytes_are_base64() -> None:
    payload = CODEC.to_json(Upload("b", "k", "u", (Part(1, "e"),), 5, 0.5, tail=b"\x00\xff"))
    assert payload["kind"] == "test.upload" and payload["version"] == 1
    assert payload["body"]["tail"] == {"$b64": "AP8="}
    assert payload["body"]["parts"] == [{"number": 1, "etag": "e"}]


def test_newer_version_is_refused() -> None:
    payload = CODEC.to_json(Upload("b", "k", "u", (), 0, 0.0))
    payload["version"] = 2
    with pytest.raises(CommittableDecodeError, match=r"unsupported version 2 \(this release reads 1..1\)"):
        CODEC.from_json(payload)
    for bad in (0, -1, "1", None, 1.0):
        payload["version"] = bad
        with pytest.raises(CommittableDecodeError):
            CODEC.from_json(payload)


def test_bool_version_is_refused() -> None:
    payload = CODEC.to_json(Upload("b", "k", "u", (), 0, 0.0))
    payload["version"] = True
    with pytest.raises(CommittableDecodeError):
        CODEC.from_json(payload)


def test_other_kind_is_refused() -> None:
    payload = CODEC.to_json(Upload("b", "k", "u", (), 0, 0.0))
    payload["kind"] = "kafka.transaction"
    with pytest.raises(CommittableDecodeError, match="expected committable kind"):
        CODEC.from_json(payload)


def test_older_versions_are_upgraded_step_by_step() -> None:
    @dataclass(frozen=True)
    class V3:
        topic: str
        partitions: tuple[int, ...]
        epoch: int

    codec = CommittableCodec(
        V3,
        "test.v",
        version=3,
        upgraders={
            1: lambda b: {**b, "partitions": [b.pop("partition")]},
            2: lambda b: {**b, "epoch": 0},
        },
    )
    assert codec.from_json({"kind": "test.v", "version": 1, "body": {"topic": "t", "partition": 4}}) == V3(
        "t", (4,), 0
    )
    assert codec.from_json({"kind": "test.v", "version": 2, "body": {"topic": "t", "partitions": [1]}}) == V3(
        "t", (1,), 0
    )
    no_path = CommittableCodec(V3, "test.v", version=3, upgraders={2: lambda b: b})
    with pytest.raises(CommittableDecodeError, match="no upgrade from version 1"):
        no_path.from_json({"kind": "test.v", "version": 1, "body": {}})


@pytest.mark.parametrize(
    "body",
    [
        {"bucket": "b"},  # missing fields
        {"bucket": 1, "key": "k", "upload_id": "u", "parts": [], "size": 0, "ratio": 0.0},  # int for str
        {
            "bucket": "b",
            "key": "k",
            "upload_id": "u",
            "parts": [],
            "size": True,
            "ratio": 0.0,
        },  # bool for int
        {
            "bucket": "b",
            "key": "k",
            "upload_id": "u",
            "parts": {},
            "size": 0,
            "ratio": 0.0,
        },  # object for tuple
        {"bucket": "b", "key": "k", "upload_id": "u", "parts": [], "size": 0, "ratio": "x"},  # str for float
        {"bucket": "b", "key": "k", "upload_id": "u", "parts": [], "size": 0, "ratio": 0.0, "tail": "raw"},
        {"bucket": "b", "key": "k", "upload_id": "u", "parts": [], "size": 0, "ratio": 0.0, "flags": [True]},
        {
            "bucket": "b",
            "key": "k",
            "upload_id": "u",
            "parts": [],
            "size": 0,
            "ratio": 0.0,
            "flags": [True, 1, 2],
        },
        {"bucket": "b", "key": "k", "upload_id": "u", "parts": [], "size": 0, "ratio": 0.0, "flags": "ab"},
    ],
)
def test_mistyped_bodies_are_refused(body: dict[str, Any]) -> None:
    with pytest.raises(CommittableDecodeError):
        CODEC.from_json({"kind": "test.upload", "version": 1, "body": body})


@pytest.mark.parametrize("payload", [None, [], {"kind": "test.upload"}, {"version": 1, "body": {}}])
def test_not_a_payload_is_refused(payload: Any) -> None:
    with pytest.raises(CommittableDecodeError, match="not a committable payload"):
        CODEC.from_json(payload)


def test_not_json_is_refused() -> None:
    with pytest.raises(CommittableDecodeError, match="not JSON"):
        CODEC.loads("{pickle?")


def test_only_frozen_dataclasses_and_plain_fields() -> None:
    @dataclass
    class Mutable:
        x: int

    with pytest.raises(TypeError, match="frozen dataclass"):
        CommittableCodec(Mutable, "m")
    with pytest.raises(ValueError):
        CommittableCodec(Upload, "u", version=0)

    @dataclass(frozen=True)
    class HasObject:
        x: Any

    with pytest.raises(TypeError, match="cannot encode"):
        CommittableCodec(HasObject, "o").to_json(HasObject(object()))
    with pytest.raises(TypeError, match="expected Upload"):
        CODEC.to_json(Part(1, "e"))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Chain:
    name: str
    next: Chain | None = None


def test_a_committable_may_nest_its_own_type() -> None:
    # decoders are built once per type; a field naming its own type is resolved at the first value
    codec = CommittableCodec(Chain, "test.chain")
    value = Chain("a", Chain("b", Chain("c")))
    assert codec.loads(codec.dumps(value)) == value
    with pytest.raises(CommittableDecodeError, match="expected str"):
        codec.from_json({"kind": "test.chain", "version": 1, "body": {"name": "a", "next": {"name": 1}}})


def test_any_mapping_decodes_like_a_dict() -> None:
    # payloads are parsed JSON (dicts), but any Mapping is accepted as before
    from types import MappingProxyType

    body = CODEC.to_json(Upload("b", "k", "u", (Part(1, "e"),), 3, 0.5))["body"]
    frozen = MappingProxyType({**body, "parts": [MappingProxyType(p) for p in body["parts"]]})
    assert CODEC.from_json({"kind": "test.upload", "version": 1, "body": frozen}).parts == (Part(1, "e"),)
