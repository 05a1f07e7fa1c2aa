"""A Spark standalone cluster on loopback, started natively from the pyspark package (issue #17).

:class:`SparkCluster` runs one master and ``workers`` workers with ``bin/spark-class`` from
pyspark's own installation (``org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker``), each in its own process group, on 127.0.0.1 with free ports, each
worker with its own work directory, cores and memory. Executors are other JVMs (children of the
workers) with their own Python workers: what ``local[n]`` hides (pickling to executors, executor
loss) is real here. ``TWOPHASE_SPARK_MASTER`` names an existing cluster instead
(:func:`spark_master_from_env`). ``twophase services up --spark-cluster`` starts one detached
(:mod:`twophase.integration.services.spark_service`).
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from pathlib import Path

from twophase.coordinator.state.faults import EXECUTOR_BACKEND
from twophase.integration.services.process import HOST, ManagedProcess, free_port, wait_ready
from twophase.sinks.errors import ServiceUnavailableError

log = logging.getLogger(__name__)

ENV_MASTER = "TWOPHASE_SPARK_MASTER"
CLEAN_AFTER_S = 600
"""Workers delete a finished application's work directories this long after its last write."""
CLEAN_INTERVAL_S = 60
"""How often the workers look (at most; ``clean_after_s`` when shorter)."""


def spark_home() -> Path:
    """The pyspark installation, which holds ``bin/spark-class`` and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_master_from_env() -> str | None:
    """``TWOPHASE_SPARK_MASTER`` (``spark://host:port``), or ``None`` when unset."""
    return os.environ.get(ENV_MASTER) or None


class SparkCluster:
    """One standalone master and its workers; stop with :meth:`stop` (also at interpreter exit).

    Args:
        root: a folder for the logs and the workers' work directories.
        workers: how many workers (≥ 1).
        cores: cores per worker.
        memory: memory per worker, Spark's notation (``"1g"``).
        timeout_s: bound of the readiness wait, seconds.
        detach: the processes outlive this Python process (``services up``): no stop at exit.
        clean_after_s: the workers delete a finished application's work directories this many
            seconds after its last write (Spark's ``spark.worker.cleanup.enabled``,
            ``.appDataTtl``; ``.interval`` is the shorter of this and :data:`CLEAN_INTERVAL_S`).
            Each executor's folder holds what it fetched: ``spark.jars`` (~700 MB for the
            flights job, unless they are on the class path) and the unpacked ``--archives``
            environment (~580 MB); without the clean-up every start or restart of a job leaves
            them on the workers' disks for good. ``None``: kept (Spark's default).

    Attributes:
        master_url: ``spark://127.0.0.1:<port>``.
        ui_url: the master's web UI (its ``/json`` lists the alive workers).

    Raises:
        ServiceUnavailableError: the cluster did not come up within ``timeout_s`` (with the log tail).
    """

    def __init__(
        self,
        root: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        timeout_s: float = 120.0,
        detach: bool = False,
        clean_after_s: int | None = CLEAN_AFTER_S,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        port, ui_port = free_port(), free_port()
        self.master_url = f"spark://{HOST}:{port}"
        self.ui_url = f"http://{HOST}:{ui_port}"
        home = spark_home()
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_NO_DAEMONIZE": "1",
            # executors' local dirs (each with the jars it fetched, ~700 MB) under root, not /tmp:
            # those of killed workers stay where the cluster's folder takes them away
            "SPARK_LOCAL_DIRS": str(root / "local"),
        }
        if clean_after_s is not None:
            env["SPARK_WORKER_OPTS"] = worker_cleanup_opts(clean_after_s)
        spark_class = str(home / "bin" / "spark-class")
        self.master = ManagedProcess(
            "spark-master",
            [
                *(spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST),
                *("--port", str(port), "--webui-port", str(ui_port)),
            ],
            root / "master.log",
            env,
            root,
            detach=detach,
        )
        self._env = env
        self._worker_args = [
            (root / f"worker-{i}", ("--cores", str(cores), "--memory", memory)) for i in range(workers)
        ]
        self._detach = detach
        self.workers: list[ManagedProcess] = []
        try:
            for i in range(workers):
                self.workers.append(self._start_worker(i))
            self.wait_workers(workers, timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start_worker(self, i: int) -> ManagedProcess:
        work, sizing = self._worker_args[i]
        work.mkdir(exist_ok=True)
        spark_class = str(Path(self._env["SPARK_HOME"]) / "bin" / "spark-class")
        return ManagedProcess(
            f"spark-worker-{i}",
            [
                *(spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url),
                *("--host", HOST, *sizing),
                *("--work-dir", str(work), "--webui-port", str(free_port())),
            ],
            self.root / f"worker-{i}.log",
            self._env,
            self.root,
            detach=self._detach,
        )

    def revive_workers(self) -> list[int]:
        """Start again every worker whose process ended (killed, say), with its work directory:
        a worker that comes back. Returns the indexes of the workers started."""
        revived = [i for i, w in enumerate(self.workers) if not w.running()]
        for i in revived:
            self.workers[i] = self._start_worker(i)
            log.info("spark worker revived worker=%d master=%s", i, self.master_url)
        return revived

    def alive_workers(self) -> int:
        """How many workers the master counts alive (0 while its UI does not answer)."""
        return alive_workers(self.ui_url)

    def wait_workers(self, n: int, timeout_s: float) -> None:
        """Wait until ``n`` workers are alive.

        Raises:
            ServiceUnavailableError: not within ``timeout_s`` seconds.
        """

        def alive() -> str | None:
            if not self.master.running():
                raise ServiceUnavailableError(
                    f"Spark standalone master at {self.master_url} exited: {self.master.log_tail()}"
                )
            count = self.alive_workers()
            return None if count >= n else f"{count} of {n} workers alive"

        reason = wait_ready(alive, timeout_s, 0.5)
        if reason is not None:
            raise ServiceUnavailableError(
                f"Spark standalone cluster at {self.master_url}: {reason} after {timeout_s:.0f} s; "
                f"master log: {self.master.log_tail()}"
            )
        log.info("spark cluster ready master=%s workers=%d", self.master_url, n)

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master; idempotent."""
        for w in self.workers:
            w.stop()
        self.master.stop()


def worker_cleanup_opts(clean_after_s: int) -> str:
    """``SPARK_WORKER_OPTS`` that make a worker delete finished applications' work directories
    ``clean_after_s`` seconds after their last write (checked every
    ``min(clean_after_s, CLEAN_INTERVAL_S)`` seconds). Running applications are never touched."""
    interval = max(1, min(clean_after_s, CLEAN_INTERVAL_S))
    return (
        f"-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval={interval} "
        f"-Dspark.worker.cleanup.appDataTtl={clean_after_s}"
    )


def alive_workers(ui_url: str, timeout_s: float = 2.0) -> int:
    """How many workers the master whose web UI is ``ui_url`` counts alive (its ``/json/``); 0
    while the UI does not answer within ``timeout_s`` seconds."""
    try:
        with urllib.request.urlopen(ui_url + "/json/", timeout=timeout_s) as resp:
            return int(json.load(resp).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def executor_pids() -> list[int]:
    """Process ids of every executor JVM on this machine (by Spark's executor backend in
    ``/proc``, the name the executor-kill fault looks for too)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if EXECUTOR_BACKEND in cmdline:
            pids.append(int(entry.name))
    return pids
