"""A Spark Connect server on loopback, started natively from pyspark's own jars (issue #18 §4).

:class:`SparkConnectServer` runs ``bin/spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer spark-internal`` from the pyspark package
(its ``jars/`` hold ``spark-connect_2.13``), in its own process group, on a free port. Python data
sources run on the server: its Python workers (``spark.pyspark.python``) must import twophase,
either installed or shipped with ``--py-files`` (:mod:`twophase.integration.spark_shipping`).
Clients connect with ``SparkSession.builder.remote(server.url)``; they need pyspark's Connect
client libraries (the ``connect`` extra: grpcio, grpcio-status, googleapis-common-protos,
zstandard). ``TWOPHASE_SPARK_CONNECT`` (``sc://host:port``) names an existing server instead.
``twophase services up --spark-connect`` starts one detached
(:mod:`twophase.integration.services.connect_service`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from twophase.integration.services.process import HOST, ManagedProcess, free_port, tcp_refusal, wait_ready
from twophase.integration.services.spark_cluster import spark_home
from twophase.integration.services.state import SPARK_CONNECT_CLASS
from twophase.sinks.errors import ServiceUnavailableError

ENV_CONNECT = "TWOPHASE_SPARK_CONNECT"
SERVER_CLASS = SPARK_CONNECT_CLASS


def spark_connect_from_env() -> str | None:
    """``TWOPHASE_SPARK_CONNECT`` (``sc://host:port``), or ``None`` when unset."""
    return os.environ.get(ENV_CONNECT) or None


class SparkConnectServer:
    """One Spark Connect server; stop with :meth:`stop` (also at interpreter exit).

    Args:
        root: a folder for its log and working directory.
        python: the Python of its workers (``spark.pyspark.python``), where data sources run.
        py_files: files put on those workers' ``sys.path``: ``--py-files`` (the query's tasks) and
            ``PYTHONPATH`` (the server's data source lookup, which sees only the environment's path).
        master: the server's Spark master (``local[2]``, or ``spark://…``).
        conf: further Spark conf.
        env: extra environment of the server (e.g. ``AWS_*`` for the sinks it runs).
        timeout_s: bound of the readiness wait, seconds.
        detach: the server outlives this Python process (``services up``): no stop at exit.

    Attributes:
        url: ``sc://127.0.0.1:<port>``, for ``SparkSession.builder.remote``.
        root: the folder of its log (``connect.log``) and working directory.

    Raises:
        ServiceUnavailableError: the server did not listen within ``timeout_s`` (with its log tail).
    """

    def __init__(
        self,
        root: Path,
        python: str,
        py_files: Sequence[Path] = (),
        master: str = "local[2]",
        conf: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
        detach: bool = False,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"sc://{HOST}:{self.port}"
        home = spark_home()
        settings = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.pyspark.python": python,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            **(conf or {}),
        }
        argv = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", master]
        if py_files:
            argv += ["--py-files", ",".join(str(p) for p in py_files)]
        for key, value in settings.items():
            argv += ["--conf", f"{key}={value}"]
        argv.append("spark-internal")
        child_env = {**os.environ, **(env or {}), "SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST}
        child_env["PYSPARK_PYTHON"] = python  # the workers' Python comes from here (see spark_shipping)
        if py_files:  # the lookup of pyspark_* modules runs in a worker that --py-files does not reach
            path = [str(p) for p in py_files] + [v for v in [os.environ.get("PYTHONPATH")] if v]
            child_env["PYTHONPATH"] = os.pathsep.join(path)
        self.process = ManagedProcess(
            "spark-connect", argv, root / "connect.log", child_env, root, detach=detach
        )
        try:
            self._wait(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait(self, timeout_s: float) -> None:
        def listening() -> str | None:
            if not self.process.running():
                raise ServiceUnavailableError(
                    f"Spark Connect server on {self.url} exited during start-up: {self.process.log_tail()}"
                )
            return tcp_refusal([(HOST, self.port)], 1.0)

        if wait_ready(listening, timeout_s, 0.5) is not None:
            raise ServiceUnavailableError(
                f"Spark Connect server on {self.url} not listening after {timeout_s:.0f} s: "
                f"{self.process.log_tail()}"
            )

    def stop(self) -> None:
        """Stop the server (and its Python workers); idempotent."""
        self.process.stop()
