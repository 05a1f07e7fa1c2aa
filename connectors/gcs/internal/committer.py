"""Driver side of the GCS file sink: finalize (commit) or cancel the resumable upload sessions of
a committable, deciding a repeated commit from the sink's own durable evidence.

The name is unique to the file (checkpoint, subtask, job token and a uuid) and the committable
records the file's size, CRC32C and MD5, so the live object at that name with those digests is
the evidence of a commit however long ago it happened. Commit of one file:

1. ``objects.get`` of the name: the file there means ALREADY_COMMITTED; another object there means
   LOST (finalizing would answer 412 anyway: the session's ``ifGenerationMatch=0``).
2. Otherwise the finalizing ``PUT`` of the tail with the total size (GCS "Perform resumable
   uploads"), then, on 200/201, ``objects.get`` again: GCS answers a session finalized earlier with
   that earlier object's metadata even after the object was deleted, so only a live object of the
   answered generation is COMMITTED.

The session's status query (``Content-Range: bytes */*``) is not used: it would tell an open
session from a finalized one with one request less on GCS, but fake-gcs-server finalizes the
upload when asked its status (fsouza/fake-gcs-server#1362, #2354), and the object at the name
decides every case without it.

| objects.get of the name  | finalizing PUT answers                     | outcome                 |
|--------------------------|--------------------------------------------|-------------------------|
| the file                 | (not sent)                                 | ALREADY_COMMITTED       |
| another object           | (not sent)                                 | LOST (named)            |
| none                     | 200/201, the file, live at that generation | COMMITTED               |
| none                     | 200/201, the file, no live object          | LOST (deleted since)    |
| none                     | 200/201 with other digests                 | FATAL                   |
| none                     | 412, 404, 410, 499                         | decided from the object |
| none                     | 308 (the session holds fewer bytes)        | LOST (named)            |
| 408, 429, 5xx, no answer | or the same from the PUT                   | RETRY                   |
| 401, 403, anything else  |                                            | FATAL                   |

*Decided from the object*: the file there is ALREADY_COMMITTED (a concurrent commit won), anything
else is LOST, logged with the reason: the session was cancelled or expired (seven days after it
was opened) before its commit, or the object was deleted or replaced after it. A committable's
outcome is the worst of its files'
(:func:`~twophase.connectors.objectstore.internal.outcomes.combine_outcomes`).
"""

from __future__ import annotations

import logging

from twophase.connectors.gcs.internal.committable import PendingUpload
from twophase.connectors.gcs.internal.sessions import SESSION_GONE, TRANSIENT_STATUS, ObjectFacts, SessionOps
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome

log = logging.getLogger(__name__)


class _Transient(Exception):
    """A request answered 408, 429 or 5xx."""


def _matches(facts: ObjectFacts, f: PendingUpload, generation: int | None) -> bool:
    return (
        facts.size == f.byte_count
        and facts.crc32c == f.crc32c
        and facts.md5 == f.md5
        and (generation is None or facts.generation == generation)
    )


_UNREAD = ObjectFacts(-1, "", "", -1)


def _decide_from_object(
    ops: SessionOps,
    f: PendingUpload,
    answer: str,
    generation: int | None,
    facts: ObjectFacts | None = _UNREAD,
) -> CommitOutcome:
    """ALREADY_COMMITTED iff the live object at the file's name is the file (of ``generation``,
    when given), else LOST (logged). ``facts``: the object as just read (default: read it)."""
    if facts is _UNREAD:
        facts = ops.object_facts(f.name)
    if facts is not None and _matches(facts, f, generation):
        return CommitOutcome.ALREADY_COMMITTED
    what = (
        "no object is at its name: its session ended unfinalized (cancelled by a lingering cleanup or "
        "an abort, or seven days passed since it was opened) or the object was deleted after its commit"
        if facts is None
        else "the object at its name is not the file (other size, digests or generation): "
        "replaced after its commit"
    )
    log_event(
        log,
        logging.ERROR,
        f"commit lost ({answer}): {what}",
        exc_info=False,
        bucket=f.bucket,
        object=f.name,
        session=f.session,
        records=f.record_count,
    )
    return CommitOutcome.LOST


def _check(status: int) -> None:
    if status in TRANSIENT_STATUS:
        raise _Transient(f"HTTP {status}")


def _commit_file(ops: SessionOps, f: PendingUpload) -> CommitOutcome:
    found = ops.object_facts(f.name)
    if found is not None:
        return _decide_from_object(ops, f, "an object is at the name already", None, found)
    done = ops.finalize(f.session_uri, f.persisted_bytes, f.tail)
    _check(done.status)
    if done.status in (200, 201) and done.facts is not None:
        if not _matches(done.facts, f, None):
            log_event(
                log,
                logging.ERROR,
                "commit: the finalized object's digests differ from the file's",
                exc_info=False,
                object=f.name,
                size=done.facts.size,
                expected_size=f.byte_count,
            )
            return CommitOutcome.FATAL
        live = ops.object_facts(f.name)
        if live is not None and _matches(live, f, done.facts.generation):
            return CommitOutcome.COMMITTED
        return _decide_from_object(ops, f, "session finalized earlier", done.facts.generation, live)
    if done.status == 412 or done.status in SESSION_GONE:
        return _decide_from_object(ops, f, f"finalize answered HTTP {done.status}", None)
    if done.status == 308:
        log_event(
            log,
            logging.ERROR,
            "commit lost: the session holds fewer bytes than the task uploaded",
            exc_info=False,
            object=f.name,
            session=f.session,
            persisted=done.persisted,
            expected=f.persisted_bytes,
        )
        return CommitOutcome.LOST
    raise PermissionError(f"HTTP {done.status}")


def commit_file(ops: SessionOps, f: PendingUpload) -> CommitOutcome:
    """Commit one file; see the module table for outcomes. Never raises."""
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    try:
        return _commit_file(ops, f)
    except (_Transient, requests.RequestException, auth.TransportError) as e:
        log.warning("commit: transient error (%s): object=%s", e or type(e).__name__, f.name)
        return CommitOutcome.RETRY
    except api.GoogleAPICallError as e:
        if int(e.code or 0) in TRANSIENT_STATUS:
            log.warning("commit: transient error (HTTP %s) reading object=%s", e.code, f.name)
            return CommitOutcome.RETRY
        log_event(log, logging.ERROR, "commit failed", exc_info=False, object=f.name, error=f"HTTP {e.code}")
        return CommitOutcome.FATAL
    except Exception as e:  # refused (401/403/400), unreadable answers: not ours to retry
        log_event(
            log,
            logging.ERROR,
            "commit failed",
            exc_info=False,
            object=f.name,
            session=f.session,
            error=str(e),
        )
        return CommitOutcome.FATAL
