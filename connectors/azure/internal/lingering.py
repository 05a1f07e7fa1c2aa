"""Lingering cleanup of the Azure file sink: discard the staged blocks no checkpoint holds.

Staged blocks that are never committed stay on the service for seven days (Azure "Put Block"),
invisible to readers but billed; List Blobs with ``include=uncommittedblobs`` names the blobs that
hold them. What this job and sink staged is recognised by its name
(:func:`~twophase.connectors.objectstore.internal.naming.parse_data_key`: the job token and the checkpoint
that opened the file); other jobs' and sinks' blobs are never touched.

A blob's staged blocks are discarded iff its name is one of ours, the checkpoint that opened it is
``<= scope.up_to_checkpoint``, no committed blob is at the name and no held committable names it
(retained checkpoints and savepoints are never broken). Discarding is an empty Put Block List
created only if no blob exists, then a Delete Blob of exactly that empty blob: a reader listing
the prefix in between sees a zero-byte file for the duration of one request.
"""

from __future__ import annotations

import logging

from twophase.connectors.azure.internal.blobs import BlobOps
from twophase.connectors.azure.internal.committable import AzureCommittable
from twophase.connectors.objectstore.internal import naming
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import LingeringCleanupError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


def lingering_blobs(ops: BlobOps, scope: LingeringScope[AzureCommittable]) -> list[tuple[str, bool]]:
    """This job's and sink's blobs holding staged blocks only, in scope, each with whether a held
    committable names it.

    Raises:
        ServiceUnavailableError / ConfigError: listing keeps failing or is denied.
    """
    token = naming.job_token(scope.job_id, scope.sink_name)
    prefix = ops.config.prefix
    names = []
    for name in ops.uncommitted_names(prefix):
        parsed = naming.parse_data_key(prefix, name)
        if parsed is None or parsed.token != token or parsed.checkpoint_id > scope.up_to_checkpoint:
            continue
        names.append(name)
    if not names:  # what is held is read only when something is listed (issue #42: it decodes)
        return []
    held = {f.blob for c in scope.held for f in c.files}
    return [(name, name in held) for name in names]


def abort_lingering(ops: BlobOps, scope: LingeringScope[AzureCommittable]) -> int:
    """Discard the staged blocks of this job's and sink's files that no checkpoint holds.

    Returns:
        How many blobs' staged blocks were discarded.

    Raises:
        LingeringCleanupError: some could not be discarded; every other one was.
        ServiceUnavailableError / ConfigError: listing keeps failing or is denied.
    """
    victims = [name for name, held in lingering_blobs(ops, scope) if not held]
    discarded = 0
    failed: list[tuple[str, Exception]] = []
    for name in victims:
        try:
            discarded += ops.discard_staged(name)
        except Exception as e:  # go on: the others must not stay for this one
            failed.append((name, e))
    log_event(
        log,
        logging.INFO,
        "lingering staged blocks discarded",
        job=scope.job_id,
        sink=scope.sink_name,
        up_to_checkpoint=scope.up_to_checkpoint,
        discarded=discarded,
        failed=len(failed),
    )
    if failed:
        raise LingeringCleanupError(
            f"sink {scope.sink_name!r}: {len(failed)} of {len(victims)} lingering blobs could not be "
            "discarded (the others were): " + "; ".join(f"{name}: {e}" for name, e in failed)
        ) from failed[0][1]
    return discarded
