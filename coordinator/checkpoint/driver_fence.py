"""One driver at a time: driver epochs kept with conditional creates in checkpoint storage (issue #43).

Two drivers of one job are ordinary: YARN retries an application master while the old one still
runs, Kubernetes replaces a driver pod while the old one terminates, schedulers retry. Flink keeps
one JobManager in charge by leader election; the only arbiter twophase has in every checkpoint
store is the conditional create (a link that never overwrites, ``If-None-Match: *``). So each
driver claims the next driver epoch, ``_drivers/driver-<e>``, before its restore reads anything,
and the newest claim owns the job. Before it publishes a checkpoint, commits one, or aborts
lingering transactions, a driver lists the epochs: one newer than its own fences it
(:class:`~twophase.sinks.errors.DriverFencedError`), for good, and it is not restarted.

A check and the write after it are two steps, so a stale driver may still publish once between
them. That publish is harmless: the conditional create lets one ``_metadata`` per id win (the
newer driver's publish of that id is then refused and it fails over onto the stale checkpoint,
whose transactions are real), a stale commit is idempotent, and the kind inside ``_metadata``
decides a checkpoint's kind whatever ``_final`` marker the loser left (DESIGN.md §12).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading

import tenacity

from twophase.coordinator.state.clock import Clock
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.errors import CheckpointStorageError, DriverFencedError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

KEEP_CLAIMS = 8
"""Claims kept below the newest, for diagnosis (a fenced driver reads the newest one only)."""

CLAIM_ATTEMPTS = 20
"""Epochs tried when other drivers claim at the same time (each loss means a newer driver exists)."""


class _Taken(Exception):
    """Another driver created the epoch first; list again and take the next."""


class DriverFence:
    """This driver's epoch of one job, and the check that no newer driver claimed the job.

    Thread-safe. :meth:`claim` once per driver (a restore in the same process keeps its epoch);
    :meth:`check` before every publish, commit and lingering cleanup.

    Args:
        job_id: for messages and log fields.
        storage: the job's checkpoint storage (``driver_epochs``, ``create_driver_epoch``,
            ``read_driver_epoch``, ``prune_driver_epochs``).
        clock: ms clock, for the claim's record.
    """

    def __init__(self, job_id: str, storage: CheckpointStorage, clock: Clock) -> None:
        self._job_id = job_id
        self._storage = storage
        self._clock = clock
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._fenced: DriverFencedError | None = None

    @property
    def epoch(self) -> int | None:
        """This driver's epoch (``None`` before :meth:`claim`)."""
        return self._epoch

    def claim(self) -> int:
        """Claim the next driver epoch (first call), or check the one claimed (later calls).

        Returns:
            this driver's epoch.

        Raises:
            DriverFencedError: a newer driver claimed the job (now or earlier).
            CheckpointStorageError: storage cannot be listed or written, or other drivers took
                every epoch this one tried.
        """
        with self._lock:
            if self._epoch is None:
                retrying = tenacity.Retrying(
                    retry=tenacity.retry_if_exception_type(_Taken),
                    stop=tenacity.stop_after_attempt(CLAIM_ATTEMPTS),
                    reraise=True,
                )
                try:
                    self._epoch = retrying(self._claim_next)
                except _Taken as e:
                    raise CheckpointStorageError(
                        f"no driver epoch claimed for job {self._job_id!r}: {CLAIM_ATTEMPTS} other "
                        f"drivers claimed first (the last epoch tried was {e}); start fewer drivers at once"
                    ) from None
                log_event(
                    log, logging.INFO, "driver epoch claimed", job=self._job_id, driver_epoch=self._epoch
                )
                try:  # older claims are only history; the newest (ours) always stays
                    self._storage.prune_driver_epochs(self._epoch - KEEP_CLAIMS)
                except Exception as e:
                    log_event(log, logging.WARNING, "old driver epochs not pruned", job=self._job_id, error=e)
                return self._epoch
        self.check("restore")
        return self._epoch

    def _claim_next(self) -> int:
        epochs = self._storage.driver_epochs()
        epoch = (epochs[-1] if epochs else 0) + 1
        record = {
            "job_id": self._job_id,
            "epoch": epoch,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_ms": self._clock(),
            "nonce": secrets.token_hex(8),  # two drivers' records never compare equal
        }
        if not self._storage.create_driver_epoch(epoch, json.dumps(record, sort_keys=True).encode()):
            raise _Taken(epoch)
        return epoch

    def check(self, action: str) -> None:
        """Raise if a newer driver claimed the job; ``action`` names what was about to happen.

        Raises:
            DriverFencedError: fenced (once fenced, always: the job belongs to the newer driver).
            CheckpointStorageError: storage cannot be listed.
        """
        with self._lock:
            if self._fenced is not None:
                raise self._fenced
            mine = self._epoch
        if mine is None:
            return  # a runtime driven without a restore (unit tests of parts) has nothing to fence
        epochs = self._storage.driver_epochs()
        newest = epochs[-1] if epochs else mine
        if newest <= mine:
            return
        raw = self._storage.read_driver_epoch(newest)
        where = _describe(raw)
        error = DriverFencedError(
            f"driver epoch {mine} of job {self._job_id!r} is fenced by a newer driver (epoch {newest}"
            f"{where}); this driver stops before {action} and leaves the job to it"
        )
        with self._lock:
            self._fenced = error
        log_event(
            log,
            logging.ERROR,
            "driver fenced",
            job=self._job_id,
            driver_epoch=mine,
            newer=newest,
            action=action,
        )
        raise error


def _describe(raw: bytes | None) -> str:
    """`` on <host>, pid <pid>, started at <ms>`` from a claim's record, or nothing if unreadable."""
    if raw is None:
        return ""
    try:
        record = json.loads(raw)
        return f" on {record['host']}, pid {record['pid']}, started at {record['started_ms']} ms"
    except (ValueError, KeyError, TypeError):
        return ""
