"""The parts of one multipart upload, uploaded in the background while the file is still encoded.

Uploading a part is a network round trip in which the subtask's thread only waits; encoding the
next part (pyarrow, which releases the GIL) can go on meanwhile. A file keeps at most
``in_flight`` parts uploading: adding one more first waits for the oldest, so memory stays bounded
at ``in_flight`` parts per open file. Parts are numbered in the order they are added, whatever the
order in which their uploads finish, so the file's bytes stay in order.

Nothing is committed here: a file's parts are only listed in its committable (or in-progress
state) after :meth:`PartUploads.wait` has seen every one of them succeed.
"""

from __future__ import annotations

import collections
import logging
from concurrent.futures import Future, ThreadPoolExecutor, wait

from twophase.connectors.s3.internal.committable import UploadedPart
from twophase.connectors.s3.internal.uploads import S3Ops

log = logging.getLogger(__name__)


class PartUploads:
    """One file's uploaded and uploading parts.

    Args:
        ops: S3 operations with retries (``upload_part`` must be thread-safe; boto3 clients are).
        key: the object key.
        upload_id: the multipart upload.
        done: parts uploaded before (a resumed file's), ascending by number.
        pool: the subtask's upload threads; ``None`` uploads synchronously in :meth:`add`.
        in_flight: at most this many parts uploading at once (≥ 1 with a pool).
    """

    def __init__(
        self,
        ops: S3Ops,
        key: str,
        upload_id: str,
        done: tuple[UploadedPart, ...] = (),
        pool: ThreadPoolExecutor | None = None,
        in_flight: int = 1,
    ) -> None:
        if pool is not None and in_flight < 1:
            raise ValueError(f"in_flight must be >= 1 with a pool, got {in_flight}")
        self._ops = ops
        self._key = key
        self._upload_id = upload_id
        self._done: list[UploadedPart] = list(done)
        self._pool = pool
        self._in_flight = in_flight
        self._uploading: collections.deque[Future[UploadedPart]] = collections.deque()
        self._next = done[-1].number + 1 if done else 1
        self._bytes = sum(p.size for p in done)

    @property
    def last_number(self) -> int:
        """The highest part number used so far, uploading ones included (0: none)."""
        return self._next - 1

    @property
    def byte_count(self) -> int:
        """Bytes of every part added so far, uploading ones included."""
        return self._bytes

    def add(self, data: bytes) -> None:
        """Upload ``data`` as the next part (in the background with a pool).

        Raises:
            The translated S3 error of this part (synchronous) or of an older part whose upload
            failed (seen while waiting for room); see :meth:`S3Ops.upload_part`.
        """
        number = self._next
        self._next += 1
        self._bytes += len(data)
        if self._pool is None:
            self._done.append(self._ops.upload_part(self._key, self._upload_id, number, data))
            return
        while len(self._uploading) >= self._in_flight:  # room first: the bound is real
            self._done.append(self._uploading.popleft().result())
        upload = self._pool.submit(self._ops.upload_part, self._key, self._upload_id, number, data)
        self._uploading.append(upload)

    def wait(self) -> tuple[UploadedPart, ...]:
        """Wait for every part; return them all, ascending by number.

        Raises:
            The first failed part's error, after every other upload has ended (none is left running).
        """
        try:
            while self._uploading:
                self._done.append(self._uploading[0].result())
                self._uploading.popleft()
        except BaseException:
            self.settle()
            raise
        return tuple(self._done)

    def settle(self) -> None:
        """Wait for uploads still running, ignoring their errors (before aborting the upload:
        a part still uploading could outlive an abort)."""
        pending, self._uploading = list(self._uploading), collections.deque()
        wait(pending)
        failed = sum(1 for f in pending if f.exception() is not None)
        if failed:
            log.debug("settled %d part uploads of %s, %d failed", len(pending), self._key, failed)
