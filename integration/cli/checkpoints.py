"""``twophase checkpoints list|show``: any job's retained checkpoints and savepoints.

The job is given as in :mod:`twophase.integration.cli.target` (``--sinks``, ``--checkpoint-dir``
with ``--job``/``--job-id``, or the flights demo run). Reading checkpoints needs no service.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import click

from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.local import LocalCheckpointStorage
from twophase.integration.cli.errors import TwophaseGroup
from twophase.integration.cli.output import Column, emit_json, json_option, show, table
from twophase.integration.cli.target import resolve_target, target_options
from twophase.sinks.errors import ConfigError

LIST_KEYS = (
    "job_id, checkpoint_dir, checkpoints[]: {id, kind, timestamp_ms, completed_utc, end_of_input, "
    "source_position, fully_finished[], location, sinks: {<sink>: {num_partitions, committables, "
    "in_progress}}}."
)


@click.group("checkpoints", cls=TwophaseGroup)
def checkpoints() -> None:
    """Inspect a job's checkpoints: the flights run's, or any job's (--sinks, -o options of its
    .format("twophase") query, or --checkpoint-dir with --job/--job-id)."""


def utc(timestamp_ms: int) -> str:
    """``YYYY-MM-DD HH:MM:SS`` (UTC) of a timestamp in ms."""
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def position_text(meta: CheckpointMetadata) -> str:
    """``batch N`` for Spark positions, else the position as JSON (``-`` when none)."""
    position = meta.source_position
    if position is None:
        return "-"
    return f"batch {position['batch_id']}" if "batch_id" in position else json.dumps(dict(position))


def checkpoint_json(ref: CheckpointRef, meta: CheckpointMetadata) -> dict[str, Any]:
    """One entry of ``checkpoints list --json`` (see its help)."""
    return {
        "id": ref.checkpoint_id,
        "kind": ref.kind.value,
        "timestamp_ms": meta.timestamp_ms,
        "completed_utc": utc(meta.timestamp_ms),
        "end_of_input": meta.end_of_input,
        "source_position": dict(meta.source_position) if meta.source_position is not None else None,
        "fully_finished": list(meta.fully_finished),
        "location": ref.location,
        "sinks": {
            name: {
                "num_partitions": snap.num_partitions,
                "committables": len(snap.committables),
                "in_progress": len(snap.in_progress),
            }
            for name, snap in sorted(meta.sinks.items())
        },
    }


def sinks_cell(meta: CheckpointMetadata) -> str:
    """One line per sink: committables held, in-progress states, fully finished."""
    lines = []
    for name, snap in sorted(meta.sinks.items()):
        line = f"{name}: {len(snap.committables)}"
        if snap.in_progress:
            line += f" +{len(snap.in_progress)} in progress"
        if name in meta.fully_finished:
            line += " (finished)"
        lines.append(line)
    return "\n".join(lines)


def list_table(job_id: str, refs: list[CheckpointRef], metas: list[CheckpointMetadata]) -> Any:
    """Id, kind, completion time, end of input, position, and per sink what it holds."""
    columns = [
        Column("id", "number"),
        Column("kind"),
        Column("completed (UTC)"),
        Column("end"),
        Column("position", "text"),
        Column("committables per sink", "text"),
    ]
    rows = [
        [
            str(ref.checkpoint_id),
            ref.kind.value,
            utc(m.timestamp_ms),
            "yes" if m.end_of_input else "no",
            position_text(m),
            sinks_cell(m),
        ]
        for ref, m in zip(refs, metas, strict=True)
    ]
    caption = "committables to commit (+ in-progress states) per sink" if refs else "no checkpoint yet"
    return table(f"checkpoints of job {job_id}", columns, rows, caption)


def refuse_a_mistyped_location(storage: LocalCheckpointStorage) -> None:
    """A local checkpoint directory that does not exist, or holds no folder of the job, is a typo
    more often than a new job: say so (exit 1) instead of listing nothing.

    Raises:
        ConfigError: the directory or the job's folder in it does not exist (naming the jobs there).
    """
    if not storage.base_dir.is_dir():
        raise ConfigError(f"checkpoint directory {storage.base_dir} does not exist; check --checkpoint-dir")
    if not storage.job_dir.is_dir():
        jobs = sorted(p.name for p in storage.base_dir.iterdir() if p.is_dir())
        raise ConfigError(
            f"no job {storage.job_id!r} in {storage.base_dir} (jobs there: {', '.join(jobs) or 'none'}); "
            "check --job or --job-id"
        )


@checkpoints.command("list")
@target_options
@json_option(LIST_KEYS)
def checkpoints_list(
    work_dir: Path | None,
    checkpoint_dir: str | None,
    job_name: str | None,
    job_id: str | None,
    sinks_factory: str | None,
    query_options: tuple[str, ...],
    as_json: bool,
) -> None:
    """The retained checkpoints and savepoints: id, kind, time, position, committables per sink."""
    target = resolve_target(work_dir, checkpoint_dir, job_name, job_id, sinks_factory, query_options)
    storage = target.storage()
    refs = storage.list_checkpoints()
    if not refs and isinstance(storage, LocalCheckpointStorage):
        refuse_a_mistyped_location(storage)
    metas = [storage.load(ref) for ref in refs]
    if as_json:
        emit_json(
            {
                "job_id": target.job_id,
                "checkpoint_dir": target.checkpoint_dir,
                "checkpoints": [checkpoint_json(r, m) for r, m in zip(refs, metas, strict=True)],
            }
        )
        return
    show(list_table(target.job_id, refs, metas))


@checkpoints.command("show")
@click.argument("checkpoint", default="latest")
@target_options
@json_option("the checkpoint's metadata as stored (format, version, job_id, checkpoint_id, kind, ...).")
def checkpoints_show(
    checkpoint: str,
    work_dir: Path | None,
    checkpoint_dir: str | None,
    job_name: str | None,
    job_id: str | None,
    sinks_factory: str | None,
    query_options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Print one checkpoint's metadata as JSON (CHECKPOINT: an id or 'latest')."""
    target = resolve_target(work_dir, checkpoint_dir, job_name, job_id, sinks_factory, query_options)
    storage = target.storage()
    if checkpoint == "latest":
        meta = storage.latest()
        if meta is None:
            raise ConfigError(f"job {target.job_id} has no checkpoint in {target.checkpoint_dir}")
    else:
        try:
            wanted = int(checkpoint)
        except ValueError:
            raise click.BadParameter("an id or 'latest'", param_hint="CHECKPOINT") from None
        refs = [r for r in storage.list_checkpoints() if r.checkpoint_id == wanted]
        if not refs:
            raise ConfigError(f"job {target.job_id} has no retained checkpoint {wanted}")
        meta = storage.load(refs[0])
    if as_json:
        emit_json(meta.to_json())
    else:
        from twophase.integration.cli.output import console

        console.print_json(json.dumps(meta.to_json()))
