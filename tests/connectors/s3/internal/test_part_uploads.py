"""Background part uploads: numbering in order of writing, bounded memory, errors never lost."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import pytest

from twophase.connectors.s3.internal.committable import UploadedPart
from twophase.connectors.s3.internal.part_uploads import PartUploads
from twophase.connectors.s3.internal.uploads import S3Ops
from twophase.sinks.errors import TransactionLostError


class StubOps:
    """``upload_part`` only: records calls, tracks how many run at once, can fail or be slow, or
    finish only after another part did (``after``: part -> the part it waits for, 60 s at most)."""

    def __init__(
        self,
        delays: dict[int, float] | None = None,
        fail: set[int] | None = None,
        after: dict[int, int] | None = None,
    ) -> None:
        self.delays = delays or {}
        self.fail = fail or set()
        self.after = after or {}
        self.running = 0
        self.max_running = 0
        self.finished: list[int] = []
        self._lock = threading.Lock()
        self._finishing = threading.Condition(self._lock)

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> UploadedPart:
        with self._lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            time.sleep(self.delays.get(number, 0.0))
            if number in self.after:  # an ordering made, not hoped for from a delay (#45 item 7)
                with self._finishing:
                    self._finishing.wait_for(lambda: self.after[number] in self.finished, timeout=60)
            if number in self.fail:
                raise TransactionLostError(f"part {number} of {key} vanished")
            return UploadedPart(number=number, etag=f'"{number}"', size=len(data))
        finally:
            with self._finishing:
                self.running -= 1
                self.finished.append(number)
                self._finishing.notify_all()


def uploads(ops: StubOps, pool: ThreadPoolExecutor | None, in_flight: int = 2, **kw: object) -> PartUploads:
    return PartUploads(cast("S3Ops", ops), "k", "u", pool=pool, in_flight=in_flight, **kw)  # type: ignore[arg-type]


def test_parts_are_numbered_in_writing_order_whatever_finishes_first() -> None:
    ops = StubOps(after={1: 2})  # part 1 finishes after part 2
    with ThreadPoolExecutor(2) as pool:
        p = uploads(ops, pool)
        p.add(b"a" * 3)
        p.add(b"b" * 5)
        assert (p.last_number, p.byte_count) == (2, 8)
        parts = p.wait()
    assert [(x.number, x.size) for x in parts] == [(1, 3), (2, 5)]
    assert ops.finished == [2, 1]


def test_at_most_in_flight_parts_upload_at_once() -> None:
    ops = StubOps(delays={n: 0.05 for n in range(1, 9)})
    with ThreadPoolExecutor(4) as pool:
        p = uploads(ops, pool, in_flight=2)
        for _ in range(8):
            p.add(b"x")
            assert len(p._uploading) <= 2  # memory bound: add() waited for the oldest
        assert [x.number for x in p.wait()] == list(range(1, 9))
    assert ops.max_running <= 2


def test_a_failed_part_is_raised_by_wait_and_nothing_keeps_running() -> None:
    ops = StubOps(delays={3: 0.2}, fail={2})
    with ThreadPoolExecutor(4) as pool:
        p = uploads(ops, pool, in_flight=4)
        for _ in range(3):
            p.add(b"x")
        with pytest.raises(TransactionLostError, match="part 2"):
            p.wait()
        assert ops.running == 0  # part 3 was waited for before the error surfaced


def test_settle_waits_and_ignores_errors() -> None:
    ops = StubOps(delays={1: 0.1}, fail={1})
    with ThreadPoolExecutor(2) as pool:
        p = uploads(ops, pool)
        p.add(b"x")
        p.settle()
        assert ops.running == 0


def test_without_a_pool_parts_upload_synchronously_and_continue_restored_numbering() -> None:
    ops = StubOps(fail={3})
    restored = (UploadedPart(number=1, etag='"1"', size=10), UploadedPart(number=2, etag='"2"', size=10))
    p = uploads(ops, None, done=restored)
    assert (p.last_number, p.byte_count) == (2, 20)
    with pytest.raises(TransactionLostError):
        p.add(b"x")  # part 3, at once
    with pytest.raises(ValueError, match="in_flight"):
        uploads(ops, ThreadPoolExecutor(1), in_flight=0)


def test_parts_of_a_crc32_upload_carry_their_checksum_algorithm() -> None:
    # the floor cell (botocore 1.35) failed on MinIO: an upload created with CRC32 refuses parts
    # sent without a checksum, and botocore before 1.36 adds none unless asked
    from typing import cast

    from mypy_boto3_s3 import S3Client
    from support.s3_model import S3Model

    from twophase.connectors.s3 import S3SinkConfig
    from twophase.connectors.s3.internal.uploads import S3Ops

    model = S3Model()
    ops = S3Ops(cast("S3Client", model), S3SinkConfig(bucket="bucket", prefix="p"))
    upload_id = ops.create_upload("p/k", "application/octet-stream")
    part = ops.upload_part("p/k", upload_id, 1, b"abc")
    assert part.number == 1 and part.size == 3
