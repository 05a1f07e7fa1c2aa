"""Read-only listing of what a job's sinks left behind: the state ``abort_lingering`` would clean up.

For each connector the listing uses the same rules as the connector's own ``abort_lingering``
(its ``lingering`` module), without changing anything:

- Kafka: ongoing transactions under ``<prefix>-<sink>-`` (ListTransactions, else probing the id
  pool: :func:`twophase.connectors.kafka.internal.lingering.list_ongoing`);
- S3: pending multipart uploads of this job's and sink's data keys under the sink's prefix, and
  tail objects under ``<prefix>/_twophase/<token>/tails/``;
- Delta: this job's and sink's data files under the table root that no commit references
  (:class:`twophase.connectors.delta.internal.lingering.ReferenceIndex`);
- PostgreSQL: this job's and sink's prepared transactions in ``pg_prepared_xacts`` (gids under
  :func:`twophase.connectors.postgres.internal.naming.gid_prefix`, the configured database's only);
- Iceberg: this job's and sink's data files under its data prefix of the table's location that
  no snapshot references (:mod:`twophase.connectors.iceberg.internal.lingering`).

Every item gets a status: ``lingering`` (no retained checkpoint or savepoint holds it: the sink's
``abort_lingering`` aborts or deletes it), ``held`` (a retained checkpoint or savepoint holds it:
it must be committed, never aborted) or ``undecidable`` (kept: a Delta file whose commit cannot be
found in a truncated history; an Iceberg file younger than the sink's ``lingering_grace_ms``,
which may belong to an attempt still writing). Sinks of other types cannot be listed; their own
``abort_lingering`` still works. No listing shows a password.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import LingeringScope

AnySink = TwoPhaseCommitSink[Any, Any]


class ItemStatus(enum.Enum):
    """What a listed item is (see the module docstring)."""

    LINGERING = "lingering"
    HELD = "held"
    UNDECIDABLE = "undecidable"


@dataclass(frozen=True)
class LingeringItem:
    """One open transaction, pending upload, tail object or data file.

    Attributes:
        id: the transactional id, the S3 key, or the Delta file's path relative to the table root.
        status: lingering, held or undecidable.
        detail: e.g. the S3 upload id, ``tail object``, the checkpoint a Delta file was written for.
    """

    id: str
    status: ItemStatus
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        """``{"id", "status", "detail"}``."""
        return {"id": self.id, "status": self.status.value, "detail": self.detail}


@dataclass(frozen=True)
class SinkLingering:
    """What one sink left behind.

    Attributes:
        sink: the sink's name.
        kind: ``kafka``, ``s3``, ``delta``, or the class name of a sink that cannot be listed.
        what: what the items are (``open transactions``, ...).
        items: the items, sorted by id.
        listable: False for sink types this module cannot list.
        detail: extra facts (the Delta table's version and data files of the job).
    """

    sink: str
    kind: str
    what: str
    items: tuple[LingeringItem, ...] = ()
    listable: bool = True
    detail: str = ""

    def ids(self, status: ItemStatus) -> list[str]:
        """The ids of the items with ``status``."""
        return [i.id for i in self.items if i.status is status]

    def count(self, status: ItemStatus) -> int:
        """How many items have ``status``."""
        return sum(1 for i in self.items if i.status is status)

    def to_json(self) -> dict[str, Any]:
        """``{"sink", "type", "what", "listable", "detail", "items": [...]}``."""
        return {
            "sink": self.sink,
            "type": self.kind,
            "what": self.what,
            "listable": self.listable,
            "detail": self.detail,
            "items": [i.to_json() for i in self.items],
        }


def list_lingering(sink: AnySink, scope: LingeringScope[Any]) -> SinkLingering:
    """List what ``sink`` left behind for ``scope``'s job, classified against ``scope``'s held state.

    Args:
        sink: the job's sink, configured as the job configures it.
        scope: the job id and sink name, and what retained checkpoints hold (decoded committables
            and in-progress states). An empty scope lists everything as lingering.

    Raises:
        ServiceUnavailableError: the external system cannot be reached.
        CommittableDecodeError: a held in-progress state cannot be decoded.
    """
    from twophase.connectors.delta import DeltaSink
    from twophase.connectors.kafka import KafkaSink
    from twophase.connectors.s3 import S3Sink

    if isinstance(sink, KafkaSink):
        return list_kafka(sink, scope)
    if isinstance(sink, S3Sink):
        return list_s3(sink, scope)
    if isinstance(sink, DeltaSink):
        return list_delta(sink, scope)
    # the optional connectors are looked at only when loaded (a sink of theirs was built): their
    # extras (psycopg, pyiceberg) may be missing
    postgres = sys.modules.get("twophase.connectors.postgres")
    if postgres is not None and isinstance(sink, postgres.PostgresSink):
        return list_postgres(sink, scope)
    iceberg = sys.modules.get("twophase.connectors.iceberg")
    if iceberg is not None and isinstance(sink, iceberg.IcebergSink):
        return list_iceberg(sink, scope)
    return SinkLingering(sink.name, type(sink).__name__, "(cannot be listed)", listable=False)


def _item(item_id: str, held: bool, detail: str = "") -> LingeringItem:
    return LingeringItem(item_id, ItemStatus.HELD if held else ItemStatus.LINGERING, detail)


def _sorted(items: Iterable[LingeringItem]) -> tuple[LingeringItem, ...]:
    return tuple(sorted(items, key=lambda i: (i.id, i.detail)))


def list_kafka(sink: Any, scope: LingeringScope[Any]) -> SinkLingering:
    """Ongoing transactions of the job's Kafka sink (``sink``: a KafkaSink).

    Raises:
        ServiceUnavailableError: the brokers cannot be reached.
    """
    from twophase.connectors.kafka.internal import lingering, naming
    from twophase.connectors.kafka.internal.admin import KafkaAdmin

    prefix = sink.config.prefix(scope.job_id)
    admin = KafkaAdmin.connect(sink.config)
    try:
        ongoing = lingering.list_ongoing(admin, sink.config, scope)
    finally:
        admin.close()
    held = {c.transactional_id for c in scope.held}
    ours = sorted({t for t in ongoing if naming.parse_transactional_id(t, prefix, scope.sink_name)})
    return SinkLingering(
        scope.sink_name,
        "kafka",
        "open transactions",
        _sorted(_item(t, t in held) for t in ours),
        detail=f"transactional ids {prefix}-{scope.sink_name}-*",
    )


def list_s3(sink: Any, scope: LingeringScope[Any]) -> SinkLingering:
    """Pending uploads and tail objects of the job's S3 sink (``sink``: an S3Sink).

    Raises:
        ServiceUnavailableError / ConfigError: S3 keeps failing or access is denied.
        CommittableDecodeError: a held in-progress state cannot be decoded.
    """
    from twophase.connectors.s3.internal import lingering, naming
    from twophase.connectors.s3.internal.uploads import S3Ops, cached_client

    ops = S3Ops(cached_client(sink.config), sink.config)
    held = lingering.held_objects(scope)
    token = naming.job_token(scope.job_id, scope.sink_name)
    prefix = ops.config.prefix
    items: list[LingeringItem] = []
    for upload in ops.list_uploads():
        parsed = naming.parse_data_key(prefix, upload.key)
        if parsed is not None and parsed.token == token:
            items.append(_item(upload.key, upload.upload_id in held.upload_ids, f"upload {upload.upload_id}"))
    for key in ops.list_keys(naming.tails_root(prefix, token)):
        if naming.parse_tail_key(prefix, token, key) is not None:
            items.append(_item(key, key in held.tail_keys, "tail object"))
    where = f"s3://{ops.bucket}/{prefix}" if prefix else f"s3://{ops.bucket}"
    return SinkLingering(
        scope.sink_name, "s3", "pending uploads and tails", _sorted(items), detail=f"under {where}"
    )


def list_delta(sink: Any, scope: LingeringScope[Any]) -> SinkLingering:
    """The job's Delta data files no commit references (``sink``: a DeltaSink).

    Raises:
        OSError / pyarrow errors: the table root cannot be listed.
    """
    from twophase.connectors.delta.internal import naming
    from twophase.connectors.delta.internal.filesystem import open_location
    from twophase.connectors.delta.internal.lingering import ReferenceIndex, load_table, own_files

    location = open_location(sink.config)
    token = naming.job_token(scope.job_id, scope.sink_name)
    held = {naming.decode_add_path(a.path) for c in scope.held for a in c.adds}
    table = load_table(sink.config)
    index = ReferenceIndex(location, table, naming.app_id(scope.job_id, scope.sink_name))
    files = own_files(location, token)
    items: list[LingeringItem] = []
    for rel, parsed in files:
        detail = f"checkpoint {parsed.checkpoint_id}"
        if rel in held:
            items.append(_item(rel, True, detail))
            continue
        referenced = index.is_referenced(rel, parsed.checkpoint_id)
        if referenced is None:
            items.append(LingeringItem(rel, ItemStatus.UNDECIDABLE, detail))
        elif not referenced:
            items.append(_item(rel, False, detail))
    version = table.version() if table is not None else -1
    return SinkLingering(
        scope.sink_name,
        "delta",
        "unreferenced data files",
        _sorted(items),
        detail=f"version {version}, {len(files)} data files of the job",
    )


def list_postgres(sink: Any, scope: LingeringScope[Any]) -> SinkLingering:
    """The job's prepared transactions of its PostgreSQL sink (``sink``: a PostgresSink), oldest
    first by gid; a gid of a checkpoint after ``scope.up_to_checkpoint`` is ``undecidable`` (work
    that may still run: ``abort_lingering`` keeps it).

    Raises:
        ServiceUnavailableError: the server cannot be reached (the message holds no password).
    """
    from twophase.connectors.postgres.internal import naming
    from twophase.connectors.postgres.internal.connection import connect
    from twophase.connectors.postgres.internal.lingering import prepared_transactions

    prefix = naming.gid_prefix(scope.job_id, scope.sink_name)
    with connect(sink.config, autocommit=True) as conn:
        prepared = prepared_transactions(conn, prefix)
    held = {c.gid for c in scope.held}
    items = []
    for p in prepared:
        detail = f"checkpoint {p.parts.checkpoint_id}, prepared {p.age_ms / 1000:.0f} s ago by {p.owner}"
        if p.gid not in held and p.parts.checkpoint_id > scope.up_to_checkpoint:
            items.append(LingeringItem(p.gid, ItemStatus.UNDECIDABLE, detail))
        else:
            items.append(_item(p.gid, p.gid in held, detail))
    return SinkLingering(
        scope.sink_name,
        "postgres",
        "prepared transactions",
        _sorted(items),
        detail=f"gids {prefix}* in {sink.config.where}",
    )


def list_iceberg(sink: Any, scope: LingeringScope[Any], now_ms: int | None = None) -> SinkLingering:
    """The job's data files of its Iceberg sink (``sink``: an IcebergSink) that no snapshot
    references, by path relative to the table's location. One younger than the sink's
    ``lingering_grace_ms`` (at ``now_ms``, default now) or of a checkpoint after
    ``scope.up_to_checkpoint`` is ``undecidable``: ``abort_lingering`` keeps it.

    Raises:
        ServiceUnavailableError: the catalog cannot be reached (the message is redacted).
        OSError: the table's location cannot be listed.
    """
    import time

    from twophase.connectors.iceberg.internal import naming
    from twophase.connectors.iceberg.internal.catalog import load_table, open_catalog
    from twophase.connectors.iceberg.internal.committer import referenced_paths
    from twophase.connectors.iceberg.internal.lingering import own_files

    config = sink.config
    now = int(time.time() * 1000) if now_ms is None else now_ms
    with open_catalog(config) as catalog:
        table = load_table(catalog, config)
        if table is None:
            return SinkLingering(
                scope.sink_name, "iceberg", "unreferenced data files", detail=f"no table {config.table}"
            )
        location = table.location().rstrip("/")
        prefix = naming.job_data_prefix(location, naming.job_token(scope.job_id, scope.sink_name))
        files = own_files(table.io, prefix)
        referenced = referenced_paths(table)
        snapshot = table.current_snapshot()
    held = {f.path for c in scope.held for f in c.files}
    items = []
    for f in files:
        if f.path in referenced:
            continue
        rel = f.path[len(location) + 1 :] if f.path.startswith(location + "/") else f.path
        detail = f"checkpoint {f.name.checkpoint_id}"
        young = f.modified_ms is None or now - f.modified_ms < config.lingering_grace_ms
        if f.path not in held and (young or f.name.checkpoint_id > scope.up_to_checkpoint):
            why = "younger than the grace" if young else "a later checkpoint"
            items.append(LingeringItem(rel, ItemStatus.UNDECIDABLE, f"{detail}, {why}: kept"))
        else:
            items.append(_item(rel, f.path in held, detail))
    current = snapshot.snapshot_id if snapshot is not None else "none"
    return SinkLingering(
        scope.sink_name,
        "iceberg",
        "unreferenced data files",
        _sorted(items),
        detail=f"table {config.table} at {location}, snapshot {current}, {len(files)} data files of the job",
    )
