"""The committable codec's per-type caches (issue #29 item 3) change nothing a payload decodes to."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from twophase.connectors.delta.internal.committable import CODEC as DELTA_CODEC
from twophase.connectors.delta.internal.committable import DeltaAddFile, DeltaCommittable
from twophase.connectors.kafka.internal.committable import CODEC as KAFKA_CODEC
from twophase.connectors.kafka.internal.committable import KafkaCommittable
from twophase.connectors.s3.internal.committable import COMMITTABLE_CODEC as S3_CODEC
from twophase.connectors.s3.internal.committable import PendingFile, S3Committable, UploadedPart
from twophase.sinks.codec import CommittableCodec
from twophase.sinks.errors import CommittableDecodeError


@dataclass(frozen=True)
class _WithDefault:
    name: str
    count: int = 0
    note: str | None = None


def test_real_committables_round_trip_repeatedly() -> None:
    kafka = KafkaCommittable("tid-0", 7, 3, (("topic", 1),), 10, 4)
    parts = (UploadedPart(1, '"e1"', 5 * 1024 * 1024), UploadedPart(2, '"e2"', 10, "crc"))
    s3 = S3Committable((PendingFile("b", "k", "u", parts, 5 * 1024 * 1024 + 10, 3, None, True),))
    add = DeltaAddFile("p.parquet", 12, (("day", "2013-01-01"), ("h", None)), 1, "{}", 3)
    delta = DeltaCommittable("s3://b/t", "job:d", 4, 0, 0, 1, "{}", ("day", "h"), (add,))
    for _ in range(3):  # the first decode fills the caches, the next ones use them
        assert KAFKA_CODEC.from_json(KAFKA_CODEC.to_json(kafka)) == kafka
        assert S3_CODEC.from_json(S3_CODEC.to_json(s3)) == s3
        assert DELTA_CODEC.from_json(DELTA_CODEC.to_json(delta)) == delta


def test_defaults_and_refusals_survive_the_caches() -> None:
    codec = CommittableCodec(_WithDefault, "test.default")
    for _ in range(2):
        assert codec.from_json({"kind": "test.default", "version": 1, "body": {"name": "a"}}) == _WithDefault(
            "a"
        )
        with pytest.raises(CommittableDecodeError, match="name missing"):
            codec.from_json({"kind": "test.default", "version": 1, "body": {"count": 1}})
        with pytest.raises(CommittableDecodeError, match="expected int"):
            codec.from_json({"kind": "test.default", "version": 1, "body": {"name": "a", "count": True}})
        with pytest.raises(CommittableDecodeError, match="expected str"):
            codec.from_json({"kind": "test.default", "version": 1, "body": {"name": 1}})
