"""Driver side of the Azure file sink: commit (Put Block List) or discard the staged files of a
committable, deciding a repeated commit from the blob itself.

Commit of one file is Put Block List of its recorded block ids with ``If-None-Match: *`` (Azure
"Put Block List"; conditional headers per "Specifying conditional headers for Blob service
operations"): the blob is created once, made of exactly those blocks, and never replaced. The
blob's name is unique to the file (checkpoint, subtask, job token and a uuid), so the committed
blob at that name, with the committable's block list, is the durable evidence of a commit however
long ago it happened and whatever became of the checkpoint's ``_committed`` marker (#43):

| Put Block List answers                        | then: the blob at the name      | outcome           |
|-----------------------------------------------|---------------------------------|-------------------|
| 201 Created                                   |                                 | COMMITTED         |
| 409 BlobAlreadyExists / 412 ConditionNotMet   | has the committable's blocks    | ALREADY_COMMITTED |
| 409 / 412                                     | has other blocks or size        | LOST (named)      |
| 400 InvalidBlockList (staged blocks gone)     | has the committable's blocks    | ALREADY_COMMITTED |
| 400 InvalidBlockList                          | is missing, or another blob     | LOST (named)      |
| 408, 429, 5xx, no answer (after SDK retries)  |                                 | RETRY             |
| anything else (403, missing container, ...)   |                                 | FATAL             |

Block ids carry a nonce of the attempt that staged them, so a blob committed from another
attempt's blocks never matches. A committable's outcome is the worst of its files'
(:func:`~twophase.connectors.objectstore.internal.outcomes.combine_outcomes`); re-committing after RETRY
answers ALREADY_COMMITTED for the files already done.
"""

from __future__ import annotations

import logging

from twophase.connectors.azure.internal.blobs import BlobOps, classify, error_code, status_of
from twophase.connectors.azure.internal.committable import StagedFile
from twophase.coordinator.storage.object_store import TransientStoreError
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome

log = logging.getLogger(__name__)

_EXISTS = frozenset({"BlobAlreadyExists", "ConditionNotMet"})


def _decide_from_blob(ops: BlobOps, f: StagedFile, answer: str) -> CommitOutcome:
    """After a Put Block List that did not create the blob: ALREADY_COMMITTED iff the committed
    blob at the file's name is made of exactly the committable's blocks, else LOST (logged)."""
    found = ops.committed_blocks(f.blob)
    if found is not None and tuple(found[0]) == f.block_ids and found[1] == f.byte_count:
        return CommitOutcome.ALREADY_COMMITTED
    what = (
        "no blob is at its name: its staged blocks were discarded (lingering cleanup, or seven days "
        "passed since they were staged) or the blob was deleted after its commit"
        if found is None
        else "the blob at its name is made of other blocks: overwritten after its commit"
    )
    log_event(
        log,
        logging.ERROR,
        f"commit lost ({answer}): {what}",
        exc_info=False,
        container=f.container,
        blob=f.blob,
        records=f.record_count,
    )
    return CommitOutcome.LOST


def commit_file(ops: BlobOps, f: StagedFile) -> CommitOutcome:
    """Commit one file; see the module table for outcomes. Never raises."""
    try:
        try:
            ops.commit_new(f.blob, f.block_ids, f.content_type)
            return CommitOutcome.COMMITTED
        except Exception as e:
            code, status = error_code(e), status_of(e)
            if code in _EXISTS or status == 412:
                return _decide_from_blob(ops, f, code or f"HTTP {status}")
            if code == "InvalidBlockList":
                return _decide_from_blob(ops, f, code)
            raise
    except Exception as e:
        kind = classify(e)
        if kind is None or isinstance(kind, TransientStoreError):
            log.warning(
                "commit: transient error after retries (%s): blob=%s", kind or type(e).__name__, f.blob
            )
            return CommitOutcome.RETRY
        log_event(log, logging.ERROR, "commit failed", exc_info=False, blob=f.blob, error=str(kind))
        return CommitOutcome.FATAL
