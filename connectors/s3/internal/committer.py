"""Driver side of the S3 sink: complete (commit) or abort the multipart uploads of a committable.

Commit of one file is CompleteMultipartUpload with the recorded parts and ETags (retried on
transient errors, including a 200 response carrying an error, see ``uploads``). Idempotence and
recovery follow Flink's ``S3Committer.commitAfterRecovery``:

| CompleteMultipartUpload says                    | outcome            |
|-------------------------------------------------|--------------------|
| OK                                              | COMMITTED          |
| NoSuchUpload, object exists with the byte count | ALREADY_COMMITTED  |
| NoSuchUpload, object missing or of another size | LOST (named)       |
| InvalidPart / InvalidPartOrder / EntityTooSmall | LOST (parts gone)  |
| transient error after every retry               | RETRY              |
| anything else (access denied...)                | FATAL              |

A completed upload leaves no upload record: a re-commit answers NoSuchUpload at once, and the
object at the file's unique key is the evidence, for as long as the object stays (later
checkpoints, lifecycle rules aborting incomplete uploads and upload listings do not touch it).
A restore of a checkpoint whose ``_committed`` marker is missing decides from it alone (#43).

After a successful (or earlier) commit, the file's temporary tail objects are deleted (best
effort: leftovers are removed by ``abort_lingering``). A committable's outcome is the worst of
its files' (FATAL > LOST > RETRY > COMMITTED > ALREADY_COMMITTED), and re-committing after RETRY
only touches files not yet complete. A checkpoint's batch (:func:`commit_batch`, issue #42 item 3)
completes every file of every committable from one bounded thread pool over the process's one
client (boto3 clients are thread-safe): the files of a checkpoint are independent objects, so a
batch costs about ``files / threads`` round trips instead of ``files``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from botocore.exceptions import BotoCoreError, ClientError

from twophase.connectors.objectstore.internal.outcomes import combine_outcomes
from twophase.connectors.s3.internal.committable import PendingFile, S3Committable
from twophase.connectors.s3.internal.uploads import S3Ops, error_code, is_transient
from twophase.sinks.errors import S3AccessDeniedError
from twophase.sinks.internal.s3_access import access_denied
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome

log = logging.getLogger(__name__)

_PARTS_GONE = frozenset({"InvalidPart", "InvalidPartOrder", "EntityTooSmall"})


def _verify_after_no_such_upload(ops: S3Ops, f: PendingFile) -> CommitOutcome:
    """Decide from the object at the file's key, the only trace a completed upload leaves (#43).

    The key is unique to this file (its checkpoint, partition and a uuid), so an object of the
    recorded size there is this upload's completion, however long ago and whatever happened to the
    upload records since. No object, or one of another size, means the checkpoint's data is not
    there: LOST, with one ERROR line naming the key and what may have happened, for S3 keeps no
    other record that could tell an abort before the commit from a delete after it.
    """
    size = ops.object_size(f.key)
    if size is None:
        log_event(
            log,
            logging.ERROR,
            "commit lost: the upload is gone and no object is at its key: aborted before its commit "
            "(lingering cleanup, or a lifecycle rule AbortIncompleteMultipartUpload while the job was "
            "down) or deleted after its commit",
            exc_info=False,
            bucket=f.bucket,
            key=f.key,
            records=f.record_count,
        )
        return CommitOutcome.LOST
    if size != f.byte_count:
        log_event(
            log,
            logging.ERROR,
            "commit lost: the upload is gone and the object at its key holds other bytes: "
            "overwritten after its commit",
            exc_info=False,
            bucket=f.bucket,
            key=f.key,
            size=size,
            expected=f.byte_count,
            records=f.record_count,
        )
        return CommitOutcome.LOST
    return CommitOutcome.ALREADY_COMMITTED


def commit_file(ops: S3Ops, f: PendingFile) -> CommitOutcome:
    """Complete one file's multipart upload; see the module table for outcomes. Never raises."""
    try:
        ops.complete_upload(f.key, f.upload_id, f.parts)
        outcome = CommitOutcome.COMMITTED
    except ClientError as e:
        code = error_code(e)
        if code == "NoSuchUpload":
            try:
                outcome = _verify_after_no_such_upload(ops, f)
            except Exception as head_error:
                log.warning("commit: cannot check %s after NoSuchUpload: %s", f.key, head_error)
                return CommitOutcome.RETRY if is_transient(head_error) else CommitOutcome.FATAL
        elif code in _PARTS_GONE:
            log.error("commit lost: parts no longer match (%s): bucket=%s key=%s", code, f.bucket, f.key)
            return CommitOutcome.LOST
        elif is_transient(e):
            log.warning("commit: transient error after retries (%s): key=%s", code, f.key)
            return CommitOutcome.RETRY
        else:
            denied = access_denied(e, f.bucket, f.key)
            if denied is not None:
                log_event(log, logging.ERROR, "commit failed", error=str(denied))
            else:
                log.error("commit failed (%s): bucket=%s key=%s", code, f.bucket, f.key)
            return CommitOutcome.FATAL
    except Exception as e:
        if is_transient(e):
            log.warning("commit: transient error after retries (%s): key=%s", type(e).__name__, f.key)
            return CommitOutcome.RETRY
        log_event(log, logging.ERROR, "commit failed", exc_info=True, bucket=f.bucket, key=f.key)
        return CommitOutcome.FATAL
    if outcome.is_success and f.tail_prefix:
        delete_tails(ops, f.tail_prefix)
    return outcome


def delete_tails(ops: S3Ops, tail_prefix: str) -> int:
    """Delete every tail object of one file (best effort); returns how many were deleted."""
    try:
        return ops.delete_keys(ops.list_keys(tail_prefix))
    except (ClientError, BotoCoreError, RuntimeError, OSError, S3AccessDeniedError) as e:
        log.warning("could not delete tails under %s (left for abort_lingering): %s", tail_prefix, e)
        return 0


def commit(ops: S3Ops, committable: S3Committable, sink: str = "") -> CommitOutcome:
    """Commit every file of ``committable``; the combined outcome (see :func:`combine_outcomes`)."""
    outcomes = [commit_file(ops, f) for f in committable.files]
    result = combine_outcomes(outcomes)
    log_event(
        log,
        logging.INFO,
        "commit done",
        sink=sink,
        bucket=ops.bucket,
        files=len(committable.files),
        outcome=result.name,
        records=sum(f.record_count for f in committable.files),
        bytes=sum(f.byte_count for f in committable.files),
    )
    return result


def commit_batch(
    ops: S3Ops, committables: Sequence[S3Committable], *, threads: int, sink: str = ""
) -> list[CommitOutcome]:
    """Commit every file of every committable of one checkpoint, up to ``threads`` files at once;
    one outcome per committable (the worst of its files', as :func:`commit`), in input order.

    Raises:
        ValueError: a committable without files (as :func:`commit`).
    """
    files = [(i, f) for i, c in enumerate(committables) for f in c.files]
    if threads <= 1 or len(files) <= 1:
        answers = [commit_file(ops, f) for _, f in files]
    else:
        with ThreadPoolExecutor(min(threads, len(files)), thread_name_prefix=f"s3-commit-{sink}") as pool:
            answers = list(pool.map(lambda item: commit_file(ops, item[1]), files))
    per_committable: list[list[CommitOutcome]] = [[] for _ in committables]
    for (i, _), answer in zip(files, answers, strict=True):
        per_committable[i].append(answer)
    outcomes = [combine_outcomes(o) for o in per_committable]
    counts = Counter(o.name for o in outcomes)
    log_event(
        log,
        logging.INFO,
        "commit batch done",
        sink=sink,
        bucket=ops.bucket,
        committables=len(committables),
        files=len(files),
        threads=threads,
        outcomes=dict(sorted(counts.items())),
        records=sum(f.record_count for _, f in files),
        bytes=sum(f.byte_count for _, f in files),
    )
    return outcomes


def abort(ops: S3Ops, committable: S3Committable) -> None:
    """Abort every file's multipart upload and delete its tails. Idempotent.

    A resumed file (``PendingFile.resumed``) is left alone: its upload and tails are what the
    in-progress state of an earlier, durable checkpoint holds, and a retry of the epoch resumes them.

    Raises:
        ServiceUnavailableError / ConfigError: S3 keeps failing or access is denied.
    """
    for f in committable.files:
        if f.resumed:
            continue
        ops.abort_upload(f.key, f.upload_id)
        if f.tail_prefix:
            delete_tails(ops, f.tail_prefix)
