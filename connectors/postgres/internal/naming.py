"""Global transaction identifiers (gids) of the PostgreSQL sink's prepared transactions, as pure functions.

A gid names one prepared transaction (``PREPARE TRANSACTION '<gid>'``; PostgreSQL docs, "PREPARE
TRANSACTION": a string literal shorter than 200 bytes, unique among the server's prepared
transactions)::

    twophase.<job>.<sink>.<token>.<checkpoint>.<partition>.<attempt>.<nonce>

- ``job`` and ``sink``: the job id and sink name with every character outside ``[A-Za-z0-9_-]``
  replaced by ``_``, cut to 40 and 30 characters: for the eye of whoever reads
  ``pg_prepared_xacts``;
- ``token``: 16 hex digits of SHA-256 over ``job id NUL sink name`` (:func:`job_token`): what makes
  the prefix unique to one job and sink, whatever the cut names share;
- ``checkpoint``, ``partition``, ``attempt``: the subtask's (decimal);
- ``nonce``: 8 random hex digits. Spark restarts attempt numbers at 0 in a new stage attempt, so
  two attempts of one subtask may carry the same numbers; the nonce keeps their gids apart.

Everything up to and including the token's dot is the job's and sink's prefix
(:func:`gid_prefix`), which lingering cleanup filters ``pg_prepared_xacts`` on. At most 148
characters, all ASCII, none of them a quote.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

GID_MAX_BYTES = 199
"""PostgreSQL's limit: the gid must be shorter than 200 bytes (``GIDSIZE`` includes the NUL)."""
TOKEN_HEX_DIGITS = 16
JOB_PART_MAX = 40
SINK_PART_MAX = 30
NONCE_HEX_DIGITS = 8

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_GID = re.compile(
    r"^twophase\.(?P<job>[A-Za-z0-9_-]{1,40})\.(?P<sink>[A-Za-z0-9_-]{1,30})\.(?P<token>[0-9a-f]{16})"
    r"\.(?P<checkpoint>\d{1,19})\.(?P<partition>\d{1,10})\.(?P<attempt>\d{1,10})\.(?P<nonce>[0-9a-f]{8})$"
)


@dataclass(frozen=True)
class GidParts:
    """The parts of one of our gids (see the module docstring).

    Attributes:
        prefix: the job's and sink's prefix (:func:`gid_prefix`).
        checkpoint_id: the checkpoint the transaction was prepared for.
        partition: the subtask's partition index.
        attempt: Spark's task attempt number.
        nonce: 8 hex digits.
    """

    prefix: str
    checkpoint_id: int
    partition: int
    attempt: int
    nonce: str

    @property
    def token(self) -> str:
        """The job's and sink's token (:func:`job_token`), read from the prefix."""
        return self.prefix.split(".")[-2]


def job_token(job_id: str, sink_name: str) -> str:
    """16 lowercase hex digits of SHA-256 over ``job_id NUL sink_name``."""
    digest = hashlib.sha256(f"{job_id}\x00{sink_name}".encode()).hexdigest()
    return digest[:TOKEN_HEX_DIGITS]


def _part(value: str, limit: int) -> str:
    return (_UNSAFE.sub("_", value) or "_")[:limit]


def gid_prefix(job_id: str, sink_name: str) -> str:
    """``twophase.<job>.<sink>.<token>.``: every gid of this job's sink starts with it, no other's."""
    job, sink = _part(job_id, JOB_PART_MAX), _part(sink_name, SINK_PART_MAX)
    return f"twophase.{job}.{sink}.{job_token(job_id, sink_name)}."


def new_nonce() -> str:
    """8 random lowercase hex digits."""
    return secrets.token_hex(NONCE_HEX_DIGITS // 2)


def make_gid(
    job_id: str, sink_name: str, checkpoint_id: int, partition: int, attempt: int, nonce: str
) -> str:
    """The gid of one subtask's prepared transaction (see the module docstring).

    Args:
        job_id: the job's id (any string).
        sink_name: the sink's name (any string).
        checkpoint_id: the checkpoint (0 ≤ id < 10**19).
        partition: the subtask's partition index (≥ 0).
        attempt: Spark's task attempt number (≥ 0).
        nonce: 8 lowercase hex digits (:func:`new_nonce`).

    Raises:
        ValueError: a number out of range or a malformed nonce.
    """
    gid = f"{gid_prefix(job_id, sink_name)}{checkpoint_id}.{partition}.{attempt}.{nonce}"
    if min(checkpoint_id, partition, attempt) < 0 or _GID.match(gid) is None:
        raise ValueError(f"invalid gid parts: {checkpoint_id}, {partition}, {attempt}, {nonce!r}")
    assert len(gid.encode()) <= GID_MAX_BYTES
    return gid


def parse_gid(gid: str, prefix: str | None = None) -> GidParts | None:
    """The parts of a gid made by :func:`make_gid`, or ``None`` for any other gid (another tool's,
    or, when ``prefix`` is given, another job's or sink's)."""
    m = _GID.match(gid)
    if m is None:
        return None
    own = f"twophase.{m['job']}.{m['sink']}.{m['token']}."
    if prefix is not None and own != prefix:
        return None
    return GidParts(own, int(m["checkpoint"]), int(m["partition"]), int(m["attempt"]), m["nonce"])
