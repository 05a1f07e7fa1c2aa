"""The chaos suite's cluster configuration (issue #17): a standalone cluster that loses workers and
gets them back, and what Spark's event log says happened in a trial.

- :func:`chaos_cluster`: ``TWOPHASE_SPARK_MASTER``, or a native cluster of two one-core workers
  for the run, with a :class:`WorkerReturn` that starts a killed worker again (a worker that
  comes back); a given master gets no such help, so its worker-loss trials end on one worker.
- :func:`spark_events`: from the event logs of a trial's job runs, the executors lost, the tasks
  that failed on a fetch failure or an executor loss, and the stage attempts after the first
  (stage retries), so that each cluster trial shows the fault did what it was planned to do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from twophase.integration.services.spark_cluster import SparkCluster, spark_master_from_env

log = logging.getLogger(__name__)

WORKERS = 2
"""Workers of the chaos cluster: one core each, so a lost one leaves the job a single core."""
EVENT_COUNTS = ("executors_lost", "executor_lost_tasks", "fetch_failures", "stage_retries", "zombie_tasks")
"""The keys of :func:`spark_events`."""
RETURN_AFTER_S = 5.0
"""Seconds a killed worker stays away before it is started again."""


class WorkerReturn:
    """A daemon thread that starts every dead worker of ``cluster`` again ``return_after_s``
    seconds after it saw it dead (each return is logged by the cluster). Stop with :meth:`stop`.
    """

    def __init__(
        self, cluster: SparkCluster, return_after_s: float = RETURN_AFTER_S, poll_s: float = 0.5
    ) -> None:
        self._cluster = cluster
        self._return_after_s = return_after_s
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-worker-return", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            if all(w.running() for w in self._cluster.workers):
                continue
            if self._stop.wait(self._return_after_s):  # away for a while, as a rebooted host is
                return
            self._cluster.revive_workers()

    def stop(self) -> None:
        """Stop watching (the workers keep running)."""
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def chaos_cluster(root: Path, executors_per_worker: int = 1) -> Iterator[str]:
    """The master URL of the run's cluster: ``TWOPHASE_SPARK_MASTER``'s, or a native one under
    ``root`` (two workers with ``executors_per_worker`` one-core, 1 GiB executors each; killed
    workers come back; finished applications' work directories deleted after a minute, or 40
    trials would leave some 40 GB) that stops afterwards.

    Raises:
        ServiceUnavailableError: the native cluster did not come up.
    """
    given = spark_master_from_env()
    if given is not None:
        yield given
        return
    n = executors_per_worker
    cluster = SparkCluster(root, workers=WORKERS, cores=n, memory=f"{n}g", clean_after_s=60)
    watcher = WorkerReturn(cluster)
    try:
        yield cluster.master_url
    finally:
        watcher.stop()
        cluster.stop()


def spark_events(event_log_dir: Path) -> dict[str, int]:
    """Counts from every Spark event log in ``event_log_dir`` (one per job run, ``.inprogress``
    for a run that was killed): ``executors_lost``, ``fetch_failures`` and ``executor_lost_tasks``
    (failed task attempts by reason), ``stage_retries`` (stage attempts after the first) and
    ``zombie_tasks``: task attempts that ended after a fetch failure had failed their stage attempt
    (Spark keeps them running beside the stage retry and takes their results). An empty or
    missing folder counts nothing."""
    counts: Counter[str] = Counter()
    failed: set[tuple[str, int, int]] = set()  # (log, stage id, attempt) with a fetch failure
    logs = sorted(p for p in event_log_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
    for path in logs:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the last line of a log whose writer was killed
                if not isinstance(event, dict):
                    continue  # not an event log (a compressed one, say)
                kind = event.get("Event")
                if kind == "SparkListenerExecutorRemoved":
                    counts["executors_lost"] += 1
                elif kind == "SparkListenerTaskEnd":
                    attempt_key = (path.name, event.get("Stage ID", -1), event.get("Stage Attempt ID", 0))
                    reason = (event.get("Task End Reason") or {}).get("Reason")
                    if reason == "FetchFailed":
                        counts["fetch_failures"] += 1
                        failed.add(attempt_key)
                    elif attempt_key in failed:
                        counts["zombie_tasks"] += 1
                    if reason == "ExecutorLostFailure":
                        counts["executor_lost_tasks"] += 1
                elif kind == "SparkListenerStageSubmitted":
                    attempt = (event.get("Stage Info") or {}).get("Stage Attempt ID", 0)
                    counts["stage_retries"] += attempt > 0
    return {k: counts[k] for k in EVENT_COUNTS}
