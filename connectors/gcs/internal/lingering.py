"""Lingering cleanup of the GCS file sink: what can be found is cancelled, the rest is bounded.

GCS cannot list resumable upload sessions, and a session's URI is known only to the process that
opened it and, once pre-committed, to the checkpoint holding its committable. So:

- sessions named by a committable the runtime hands to ``abort`` (a declined or abandoned
  checkpoint) are cancelled there;
- a task's own sessions are cancelled by its ``abort_open`` when the task fails in Python;
- a session whose URI died with its process (an executor killed mid-epoch, a driver dead between
  the tasks' pre-commits and the checkpoint's publication) cannot be found by anyone: it holds no
  object, is invisible to every reader and to ``objects.list``, and GCS drops it a week after it
  was opened. That week is the bound on lingering data, and the reason files roll at every
  checkpoint.

``abort_lingering`` therefore changes nothing on GCS: there is no listing to act on, and the
committables of retained checkpoints (``scope.held``) must stay committable. It logs the bound.
"""

from __future__ import annotations

import logging

from twophase.connectors.gcs.internal.committable import GcsCommittable
from twophase.sinks.context import LingeringScope
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

UNLISTABLE = (
    "GCS cannot list resumable upload sessions: sessions whose process died before a checkpoint "
    "held them are invisible, hold no object, and expire seven days after they were opened"
)
"""The limit, in one line (logs and ``twophase lingering``)."""


def abort_lingering(scope: LingeringScope[GcsCommittable]) -> int:
    """Cancel the sessions no checkpoint holds that can be found: none can be listed, so none.

    Returns:
        0 (see the module docstring for how lingering sessions are bounded).
    """
    log_event(
        log,
        logging.INFO,
        "lingering sessions cannot be listed; unfinalized ones expire after seven days",
        job=scope.job_id,
        sink=scope.sink_name,
        up_to_checkpoint=scope.up_to_checkpoint,
        held_committables=len(scope.held),  # counted by payload: nothing decoded (issue #42)
    )
    return 0
