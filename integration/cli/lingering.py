"""``twophase lingering [--recommit] [--abort]``: what any job's sinks left behind, and cleaning it up.

Per sink it lists open Kafka transactions under the job's transactional-id prefix, pending
multipart uploads and tail objects under the S3 sink's prefix, Delta data files no commit
references, PostgreSQL prepared transactions under the job's gid prefix and Iceberg data files no
snapshot references (:mod:`twophase.integration.lingering`), each as ``lingering`` (no retained
checkpoint or savepoint holds it), ``held`` (one does: it waits for its commit) or
``undecidable`` (kept). The actions are :mod:`twophase.integration.operations`'s: ``--recommit``
first, then ``--abort``. A flights run's sinks are the ones it names (``--sinks`` of its demo),
optional ones included, with their services found as ``twophase verify`` finds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from twophase.integration.cli.errors import CommandFailed
from twophase.integration.cli.output import Column, emit_json, json_option, note, progress, show, table
from twophase.integration.cli.target import JobTarget, resolve_target, target_options
from twophase.integration.lingering import ItemStatus, SinkLingering, list_lingering
from twophase.integration.operations import (
    JobCheckpoints,
    RecommitReport,
    abort_lingering,
    lingering_scope,
    recommit_latest,
)

ITEMS_SHOWN = 20
"""Items per sink in the items table (``--json`` lists all)."""

KEYS = (
    "job_id, checkpoint_dir, origin, checkpoints[]: {id, kind}, recommitted: null | {checkpoint_id, "
    "sinks: {<sink>: {committed, already_committed, checkpoints[]}}, skipped[]}, aborted: null | "
    "{<sink>: count}, sinks[]: {sink, type, what, listable, detail, lingering, held, undecidable, "
    "items[]: {id, status, detail}} (before any action), after: null | the same list after the actions."
)


def _listing(target: JobTarget, sinks: list[Any], checkpoints: JobCheckpoints) -> list[SinkLingering]:
    return [list_lingering(s, lingering_scope(target.job_id, s, checkpoints.metas)) for s in sinks]


def listing_json(listing: list[SinkLingering]) -> list[dict[str, Any]]:
    """The ``sinks`` / ``after`` entries of ``--json`` (see the command's help)."""
    return [
        {
            **s.to_json(),
            "lingering": s.count(ItemStatus.LINGERING),
            "held": s.count(ItemStatus.HELD),
            "undecidable": s.count(ItemStatus.UNDECIDABLE),
        }
        for s in listing
    ]


def summary_table(
    job_id: str,
    before: list[SinkLingering],
    after: list[SinkLingering] | None,
    aborted: dict[str, int] | None,
) -> Any:
    """Per sink: what the items are and how many are lingering, held, undecidable (and aborted, left)."""
    columns = [Column("sink"), Column("what", "text")]
    columns += [Column(h, "number") for h in ("lingering", "held", "undecidable")]
    if after is not None:
        columns += [Column("aborted", "number"), Column("left", "number")]
    rows = []
    for i, s in enumerate(before):
        counts = [str(s.count(st)) if s.listable else "?" for st in ItemStatus]
        extra = []
        if after is not None:
            left = after[i]
            extra = [
                str((aborted or {}).get(s.sink, 0)),
                str(left.count(ItemStatus.LINGERING)) if left.listable else "?",
            ]
        rows.append([s.sink, f"{s.what} ({s.kind})", *counts, *extra])
    return table(f"lingering state of job {job_id}", columns, rows)


def items_table(listing: list[SinkLingering]) -> Any:
    """Every item (up to :data:`ITEMS_SHOWN` per sink): sink, status, id and detail."""
    rows = []
    for s in listing:
        for item in s.items[:ITEMS_SHOWN]:
            rows.append([s.sink, item.status.value, item.id, item.detail])
        if len(s.items) > ITEMS_SHOWN:
            rows.append([s.sink, "", f"... {len(s.items) - ITEMS_SHOWN} more (see --json)", ""])
    columns = [Column("sink"), Column("status"), Column("item", "text"), Column("detail", "text")]
    return table(None, columns, rows)


def recommit_lines(report: RecommitReport) -> list[str]:
    """One line per sink recommitted."""
    if report.checkpoint_id is None:
        return ["no checkpoint: nothing to recommit"]
    lines = [f"recommitted checkpoint {report.checkpoint_id}:"]
    for name, r in report.sinks.items():
        lines.append(
            f"  {name}: {r.committed} committed, {r.already_committed} already committed "
            f"(pre-committed for checkpoints {', '.join(map(str, r.checkpoints))})"
        )
    if not report.sinks:
        lines.append("  nothing held a committable")
    return lines


@click.command("lingering")
@target_options
@click.option("--recommit", is_flag=True, help="Commit the latest checkpoint's committables (idempotent).")
@click.option(
    "--abort", is_flag=True, help="Abort what no retained checkpoint or savepoint holds (after --recommit)."
)
@click.option("--force", is_flag=True, help="With --abort: abort even when the job has no checkpoint at all.")
@json_option(KEYS)
def lingering(
    work_dir: Path | None,
    checkpoint_dir: str | None,
    job_name: str | None,
    job_id: str | None,
    sinks_factory: str | None,
    query_options: tuple[str, ...],
    recommit: bool,
    abort: bool,
    force: bool,
    as_json: bool,
) -> None:
    """List (and with --recommit / --abort, clean up) what a job's sinks left behind.

    The job: --sinks MODULE:FUNCTION (a function returning the job's sinks, with --checkpoint-dir
    and --job/--job-id, or a twophase.Job), -o KEY=VALUE for each option of its .format("twophase")
    query (sink, the sink's fields, job, twophaseCheckpointDir), or by default the flights demo run
    (every sink it names, PostgreSQL and Iceberg included). Listed per sink: open Kafka transactions
    under the job's transactional-id prefix, pending S3 uploads and tails under the sink's prefix,
    Delta files no commit references, PostgreSQL prepared transactions under the job's gid prefix,
    Iceberg data files no snapshot references; each lingering (no retained checkpoint holds it),
    held (one does: it waits for its commit) or undecidable (kept: e.g. an Iceberg file younger than
    the sink's grace).

    --recommit commits the latest checkpoint's committables without running the job (as a restart
    would). --abort calls every sink's abort_lingering with everything the retained checkpoints and
    savepoints hold kept: nothing a durable checkpoint still needs is ever aborted. Never run them
    while the job runs: its open transactions are in no checkpoint yet. Exit status 1 when
    something still lingers after --abort.
    """
    target = resolve_target(work_dir, checkpoint_dir, job_name, job_id, sinks_factory, query_options)
    sinks = target.sinks("lingering")  # a flights run's: every sink it names, optional ones included
    checkpoints = JobCheckpoints.load(target.storage())
    try:
        with progress(f"listing what the sinks of {target.job_id} left ...", as_json):
            before = _listing(target, sinks, checkpoints)
        report = None
        aborted = None
        if recommit:
            with progress("recommitting the latest checkpoint ...", as_json):
                report = recommit_latest(target.job_id, sinks, checkpoints)
        if abort:
            with progress("aborting lingering transactions ...", as_json):
                aborted = abort_lingering(target.job_id, sinks, checkpoints, force=force)
        after = None
        if recommit or abort:
            with progress("listing again ...", as_json):
                after = _listing(target, sinks, checkpoints)
    finally:
        for s in sinks:
            s.close()
    if as_json:
        emit_json(
            {
                "job_id": target.job_id,
                "checkpoint_dir": target.checkpoint_dir,
                "origin": target.origin,
                "checkpoints": [{"id": r.checkpoint_id, "kind": r.kind.value} for r in checkpoints.refs],
                "recommitted": report.to_json() if report is not None else None,
                "aborted": aborted,
                "sinks": listing_json(before),
                "after": listing_json(after) if after is not None else None,
            }
        )
    else:
        ids = ", ".join(f"{r.checkpoint_id} ({r.kind.value})" for r in checkpoints.refs) or "none"
        show(f"job {target.job_id} ({target.origin}); retained checkpoints: {ids}")
        if report is not None:
            show(*recommit_lines(report))
        show(summary_table(target.job_id, before, after, aborted))
        final = after if after is not None else before
        if any(s.items for s in final):
            show(items_table(final))
        if any(s.count(ItemStatus.HELD) for s in final):
            note("held items wait for their commit: `--recommit` (or restarting the job) commits them")
    if abort and after is not None:
        left = sum(s.count(ItemStatus.LINGERING) for s in after)
        if left:
            raise CommandFailed(f"{left} lingering items are left after --abort")
