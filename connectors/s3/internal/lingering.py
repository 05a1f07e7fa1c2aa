"""Lingering cleanup of the S3 sink: abort uploads and delete tails that no checkpoint holds.

What this job and sink opened is recognised by its key: data files carry :func:`naming.job_token`
(and the checkpoint that opened them) in their name, tails live under
``<prefix>/_twophase/<token>/tails/``. Other jobs' and sinks' objects are never touched.

- An upload is aborted iff its key is one of ours, the checkpoint that opened it is
  ``<= scope.up_to_checkpoint``, and no held committable or held in-progress state names its
  upload id (retained checkpoints and savepoints are never broken).
- A tail object is deleted iff it is ours, the checkpoint that wrote it is
  ``<= scope.up_to_checkpoint`` and no held in-progress state names it.

- A Spark-staged write (``write_path="spark"``) names its files as Spark does, so its uploads are
  known by the records in its magic folder (``<prefix>/__magic_job-twophase-<token>-<checkpoint>-
  <nonce>/``: the ``.pendingset`` of each committed task, the ``.pending`` of each attempt that
  never committed): each is aborted iff the folder's checkpoint is ``<= scope.up_to_checkpoint``
  and no held committable names it, and the folder is deleted once nothing in it failed. An
  attempt killed before it closed a file leaves no record of that file's upload (WIP: not yet
  found here).

MinIO matches ListMultipartUploads' ``Prefix`` only as an exact key, so the whole bucket's
uploads are listed and filtered here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from twophase.connectors.s3.internal import naming, staged_write
from twophase.connectors.s3.internal.committable import IN_PROGRESS_CODEC, S3Committable
from twophase.connectors.s3.internal.uploads import ListedUpload, S3Ops
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConfigError, LingeringCleanupError, S3AccessDeniedError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeldObjects:
    """What retained checkpoints and savepoints reference: never aborted nor deleted."""

    upload_ids: frozenset[str]
    tail_keys: frozenset[str]


NOTHING_HELD = HeldObjects(upload_ids=frozenset(), tail_keys=frozenset())
"""No upload and no tail held: the filters' candidates before what is held is read."""


def held_objects(scope: LingeringScope[S3Committable]) -> HeldObjects:
    """Collect the upload ids and tail keys referenced by ``scope.held`` and ``scope.held_in_progress``.

    Raises:
        CommittableDecodeError: a held in-progress state cannot be decoded; nothing may be aborted
            when it is unknown what is held.
    """
    uploads: set[str] = set()
    tails: set[str] = set()
    for committable in scope.held:
        uploads.update(f.upload_id for f in committable.files)
    for payload in scope.held_in_progress:
        for f in IN_PROGRESS_CODEC.from_json(payload).files:
            uploads.add(f.upload_id)
            if f.tail_key is not None:
                tails.add(f.tail_key)
    return HeldObjects(upload_ids=frozenset(uploads), tail_keys=frozenset(tails))


def uploads_to_abort(
    uploads: Iterable[ListedUpload], prefix: str, token: str, held: HeldObjects, up_to_checkpoint: int
) -> list[ListedUpload]:
    """The listed uploads that are this job's and sink's, in scope, and held by no checkpoint."""
    out = []
    for u in uploads:
        parsed = naming.parse_data_key(prefix, u.key)
        if parsed is None or parsed.token != token or parsed.checkpoint_id > up_to_checkpoint:
            continue
        if u.upload_id not in held.upload_ids:
            out.append(u)
    return out


def tails_to_delete(
    keys: Iterable[str], prefix: str, token: str, held: HeldObjects, up_to_checkpoint: int
) -> list[str]:
    """The listed tail keys that are this job's and sink's, in scope, and held by no checkpoint."""
    out = []
    for key in keys:
        parsed = naming.parse_tail_key(prefix, token, key)
        if parsed is None or parsed.checkpoint_id > up_to_checkpoint:
            continue
        if key not in held.tail_keys:
            out.append(key)
    return out


def abort_lingering(ops: S3Ops, scope: LingeringScope[S3Committable]) -> int:
    """Abort this job's and sink's lingering uploads and delete its orphaned tails.

    Returns:
        How many multipart uploads were aborted (deleted tails are logged, not counted).

    What is held (``scope.held``, ``scope.held_in_progress``) is read only when the listings found
    an upload or a tail of the job's in scope: a cleanup with nothing to abort decodes nothing.

    Raises:
        CommittableDecodeError: a held in-progress state is unreadable while something of the
            job's could be aborted (nothing is aborted).
        LingeringCleanupError: some uploads could not be aborted; every other one was, and the
            orphaned tails were deleted.
        S3AccessDeniedError: the same, when every failure was a refused permission (it names the
            action and the first key, and lists every upload left open).
        ServiceUnavailableError / ConfigError: listing or deleting tails keeps failing or is denied.
    """
    token = naming.job_token(scope.job_id, scope.sink_name)
    prefix = ops.config.prefix
    up_to = scope.up_to_checkpoint
    uploads = ops.list_uploads()
    tail_keys = ops.list_keys(naming.tails_root(prefix, token))
    victims = uploads_to_abort(uploads, prefix, token, NOTHING_HELD, up_to)
    tails = tails_to_delete(tail_keys, prefix, token, NOTHING_HELD, up_to)
    folders = [
        f
        for f in staged_write.staged_folders(
            prefix, token, ops.list_keys(staged_write.magic_folder(prefix, f"twophase-{token}")[:-1])
        )
        if f.checkpoint_id <= up_to
    ]
    markers = [
        m
        for m in staged_write.staged_markers(
            prefix, token, ops.list_keys(staged_write.markers_root(prefix, token))
        )
        if m.checkpoint_id <= up_to
    ]
    if folders:  # Spark-staged writes: their uploads are known by the records in their folders
        recorded = {s.upload_id for f in folders for s in staged_write.staged_uploads(f, ops.read_object)}
        victims.extend(u for u in uploads if u.upload_id in recorded)
    if markers:  # and by their files' names: a file being written when its attempt died has no record
        ids = [i for i in (staged_write.file_job_id(ops.read_object(m.key)) for m in markers) if i]
        named = {k for i in ids for k in staged_write.files_of_write(prefix, i, (u.key for u in uploads))}
        seen = {u.upload_id for u in victims}
        victims.extend(u for u in uploads if u.key in named and u.upload_id not in seen)
    if victims or tails:  # what is held is read only when something could go (issue #42: decodes)
        held = held_objects(scope)
        victims = [u for u in victims if u.upload_id not in held.upload_ids]
        tails = [k for k in tails if k not in held.tail_keys]
    aborted = 0
    failed: list[tuple[ListedUpload, Exception]] = []
    for u in victims:
        try:
            aborted += ops.abort_upload(u.key, u.upload_id)
        except Exception as e:  # go on: the other uploads must not stay open for this one
            failed.append((u, e))
    if tails:
        ops.delete_keys(tails)
    if (folders or markers) and not failed:  # what a retained checkpoint holds needs no record here
        ops.delete_keys([k for f in folders for k in f.keys] + [m.key for m in markers])
    log_event(
        log,
        logging.INFO,
        "lingering uploads aborted",
        job=scope.job_id,
        sink=scope.sink_name,
        up_to_checkpoint=scope.up_to_checkpoint,
        aborted_uploads=aborted,
        deleted_tails=len(tails),
        failed_uploads=len(failed),
    )
    first = failed[0][1] if failed else None
    if isinstance(first, S3AccessDeniedError) and all(isinstance(e, S3AccessDeniedError) for _, e in failed):
        # one fix (the IAM policy) for all, named by the first; the uploads left are listed
        left = tuple(f"s3://{ops.bucket}/{u.key} (upload {u.upload_id})" for u, _ in failed)
        raise first.leaving(left) from first
    if failed and all(isinstance(e, ConfigError) for _, e in failed):
        raise failed[0][1]
    if failed:
        raise LingeringCleanupError(
            f"sink {scope.sink_name!r}: {len(failed)} of {len(victims)} lingering uploads could not be "
            "aborted (the others were): " + "; ".join(f"{u.key} ({u.upload_id}): {e}" for u, e in failed)
        ) from failed[0][1]
    return aborted
