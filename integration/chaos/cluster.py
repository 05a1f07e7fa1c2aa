"""The chaos suite's cluster configuration (issue #17): a standalone cluster that loses workers and
gets them back, and what Spark's event log says happened in a trial.

- :func:`chaos_cluster`: ``TWOPHASE_SPARK_MASTER``, or a native cluster of two one-core workers
  for the run, with a :class:`WorkerReturn` that starts a killed worker again (a worker that
  comes back); a given master gets no such help, so its worker-loss trials end on one worker.
- :func:`spark_events`: from the event logs of a trial's job runs, the executors lost, the tasks
  that failed on a fetch failure or an executor loss, the stage attempts after the first (stage
  retries), speculative copies and the zombie attempts (beside a stage retry, or beside the
  attempt of the same task that won), so that each cluster trial shows the fault did what it was
  planned to do.
- :class:`HostsCluster`: the same cluster with each worker on its own loopback address
  (127.0.0.1, 127.0.0.2, ...), so that Spark sees two hosts: it never starts a speculative copy
  on a host where an attempt of the task runs, and with one host it would start none.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twophase.integration.services.process import ManagedProcess, free_port
from twophase.integration.services.spark_cluster import SparkCluster, spark_master_from_env

log = logging.getLogger(__name__)

WORKERS = 2
"""Workers of the chaos cluster: one core each, so a lost one leaves the job a single core."""
EVENT_COUNTS = (
    "executors_lost",
    "executor_lost_tasks",
    "fetch_failures",
    "stage_retries",
    "speculative_tasks",
    "superseded_tasks",
    "zombie_tasks",
    "sink_zombie_tasks",
)
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


class HostsCluster(SparkCluster):
    """A :class:`SparkCluster` whose worker ``i`` runs on loopback address ``127.0.0.<i+1>`` (its
    executors take the worker's host): two hosts for Spark's scheduler on one machine. Spark starts
    a speculative copy only on a host where no attempt of the task runs (``TaskSetManager``'s
    ``hasAttemptOnHost``), so on one host speculation never starts a copy. Linux routes all of
    127.0.0.0/8 to loopback; the master stays on 127.0.0.1."""

    def _start_worker(self, i: int) -> ManagedProcess:
        host = f"127.0.0.{i + 1}"
        work, sizing = self._worker_args[i]
        work.mkdir(exist_ok=True)
        spark_class = str(Path(self._env["SPARK_HOME"]) / "bin" / "spark-class")
        return ManagedProcess(
            f"spark-worker-{i}",
            [
                *(spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url),
                *("--host", host, *sizing),
                *("--work-dir", str(work), "--webui-port", str(free_port())),
            ],
            self.root / f"worker-{i}.log",
            {**self._env, "SPARK_LOCAL_IP": host},  # the executors bind where they are advertised
            self.root,
            detach=self._detach,
        )


@contextlib.contextmanager
def chaos_cluster(root: Path, executors_per_worker: int = 1, hosts: bool = False) -> Iterator[str]:
    """The master URL of the run's cluster: ``TWOPHASE_SPARK_MASTER``'s, or a native one under
    ``root`` (two workers with ``executors_per_worker`` one-core, 1 GiB executors each; killed
    workers come back; finished applications' work directories deleted after a minute, or 40
    trials would leave some 40 GB) that stops afterwards. ``hosts``: each worker on its own
    loopback address (:class:`HostsCluster`), for speculation.

    Raises:
        ServiceUnavailableError: the native cluster did not come up.
    """
    given = spark_master_from_env()
    if given is not None:
        yield given
        return
    n = executors_per_worker
    kind = HostsCluster if hosts else SparkCluster
    cluster = kind(root, workers=WORKERS, cores=n, memory=f"{n}g", clean_after_s=60)
    watcher = WorkerReturn(cluster)
    try:
        yield cluster.master_url
    finally:
        watcher.stop()
        cluster.stop()


def spark_events(event_log_dir: Path) -> dict[str, int]:
    """Counts from every Spark event log in ``event_log_dir`` (one per job run, ``.inprogress``
    for a run that was killed). An empty or missing folder counts nothing.

    - ``executors_lost``: ``SparkListenerExecutorRemoved`` events.
    - ``fetch_failures``, ``executor_lost_tasks``: task attempts that ended ``FetchFailed`` or
      ``ExecutorLostFailure``.
    - ``stage_retries``: stage attempts after the first.
    - ``speculative_tasks``: task attempts Spark launched as speculative copies (``Task Info``'s
      ``Speculative``).
    - ``superseded_tasks``: task attempts that ended after another attempt of the same task (same
      log, stage, stage attempt and task index) had ended successfully: killed by Spark ("another
      attempt succeeded", or "Stage cancelled" once the stage was done), or ending with results
      Spark ignores. The speculative copy and the attempt it raced, whichever lost.
    - ``zombie_tasks``: task attempts that ran on beside the attempt Spark took, counted once
      each: the superseded ones, and those that ended after a fetch failure had failed their stage
      attempt (Spark keeps them running beside the stage retry and takes their results).
    - ``sink_zombie_tasks``: the zombie attempts of result stages that read a shuffle (whose
      ``Parent IDs`` are not empty): in the shuffled flights job, the sinks' stage, whose tasks
      write, so these zombies held open sink transactions.
    """
    tally = _Tally()
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
                    tally.counts["executors_lost"] += 1
                elif kind == "SparkListenerTaskEnd":
                    tally.task_end(path.name, event)
                elif kind == "SparkListenerStageSubmitted":
                    info = event.get("Stage Info") or {}
                    tally.counts["stage_retries"] += info.get("Stage Attempt ID", 0) > 0
                    if info.get("Parent IDs"):
                        tally.shuffled.add((path.name, info.get("Stage ID", -1)))
    tally.counts["zombie_tasks"] = len(tally.zombies)
    tally.counts["sink_zombie_tasks"] = len(tally.sink_zombies)
    return {k: tally.counts[k] for k in EVENT_COUNTS}


@dataclass
class _Tally:
    """What :func:`spark_events` has seen so far."""

    counts: Counter[str] = field(default_factory=Counter)
    failed: set[tuple[str, int, int]] = field(default_factory=set)  # (log, stage, attempt): fetch failed
    won: dict[tuple[str, int, int, int], int] = field(default_factory=dict)  # (log, stage, attempt, index)
    shuffled: set[tuple[str, int]] = field(default_factory=set)  # (log, stage) with parent stages
    zombies: set[tuple[str, int]] = field(default_factory=set)  # (log, task id)
    sink_zombies: set[tuple[str, int]] = field(default_factory=set)
    ends: int = 0

    def task_end(self, log_name: str, event: dict[str, Any]) -> None:
        """Count one ``SparkListenerTaskEnd``. Spark posts a task's end as the driver learns of
        it, so the log's order is the order the driver saw the ends in."""
        stage, stage_attempt = event.get("Stage ID", -1), event.get("Stage Attempt ID", 0)
        info = event.get("Task Info") or {}
        task_id = info.get("Task ID")
        reason = (event.get("Task End Reason") or {}).get("Reason")
        self.ends += 1
        this = (log_name, task_id if task_id is not None else -self.ends)  # a log without task ids
        zombie = False
        if reason == "FetchFailed":
            self.counts["fetch_failures"] += 1
            self.failed.add((log_name, stage, stage_attempt))
        elif (log_name, stage, stage_attempt) in self.failed:
            zombie = True
        if reason == "ExecutorLostFailure":
            self.counts["executor_lost_tasks"] += 1
        if info.get("Speculative"):
            self.counts["speculative_tasks"] += 1
        index = info.get("Index")
        if index is not None and task_id is not None:
            key = (log_name, stage, stage_attempt, index)
            if key in self.won and self.won[key] != task_id:
                self.counts["superseded_tasks"] += 1
                zombie = True
            elif reason == "Success":
                self.won.setdefault(key, task_id)
        if zombie:
            self.zombies.add(this)
            if event.get("Task Type") == "ResultTask" and (log_name, stage) in self.shuffled:
                self.sink_zombies.add(this)
