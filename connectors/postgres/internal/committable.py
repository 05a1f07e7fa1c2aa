"""The PostgreSQL sink's committable: a prepared transaction's gid and its record count."""

from __future__ import annotations

from dataclasses import dataclass

from twophase.connectors.postgres.internal import naming
from twophase.sinks.codec import CommittableCodec


@dataclass(frozen=True)
class PostgresCommittable:
    """One subtask's prepared transaction (``PREPARE TRANSACTION '<gid>'``).

    Holds no secret and no connection setting: the committer reaches the server with the sink's
    config. The checkpoint, partition and attempt are read from the gid (:mod:`.naming`).

    Attributes:
        gid: the prepared transaction's global identifier (< 200 bytes).
        record_count: rows the transaction wrote into the staging or target table (≥ 1).
    """

    gid: str
    record_count: int

    def parts(self) -> naming.GidParts:
        """The gid's parts.

        Raises:
            ValueError: the gid was not made by :func:`naming.make_gid`.
        """
        parts = naming.parse_gid(self.gid)
        if parts is None:
            raise ValueError(f"not a twophase gid: {self.gid!r}")
        return parts


CODEC: CommittableCodec[PostgresCommittable] = CommittableCodec(
    PostgresCommittable, kind="postgres.prepared_transaction", version=1
)
"""Versioned JSON codec of :class:`PostgresCommittable` (``postgres.prepared_transaction``, v1)."""
