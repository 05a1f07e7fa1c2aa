"""The Flink side of the comparison (issue #44 item 1): the Java job of ``java/`` built with Maven
into the cache, its class path resolved from Maven Central, the S3 plugin laid out, and one
:class:`FlinkJob` per writer and round: a JVM that plans the job, has its EXPLAIN checked for
Python operators (:func:`benchmarks.flink.analysis.check_plan`), runs it in a local MiniCluster
and is cancelled through Flink's REST API when the harness has measured it.

Flink's jars come from Maven Central (``pom.xml`` beside this module: Flink 2.2.0, the Kafka SQL
connector 5.0.0-2.2, ``flink-parquet`` with Hadoop's client 3.4.1) and ``pom-s3-plugin.xml``
(``flink-s3-fs-hadoop`` 2.2.0, loaded as a plugin from ``FLINK_PLUGINS_DIR``). Nothing built is
kept in the repository: the jar goes to ``<cache>/flink-bench-<digest>``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.flink.analysis import check_plan

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
PLUGIN_POM = HERE / "pom-s3-plugin.xml"
MAIN_CLASS = "twophase.bench.FlightsFlink"
REPLY_PREFIX = "FLINKBENCH "
FLINK_VERSION = "2.2.0"
KAFKA_CONNECTOR_VERSION = "5.0.0-2.2"
LOG4J = """\
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:twophase.flink.log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{HH:mm:ss,SSS} %-5p %c{1} - %m%n
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
"""
"""Flink's log (one file per job): INFO, so that checkpoints and deployments can be read back."""


@dataclass(frozen=True)
class FlinkBuild:
    """The built job: the class path (the job's jar first) and the plugins folder."""

    classpath: tuple[Path, ...]
    plugins_dir: Path


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def build() -> FlinkBuild:
    """Build the Java job once per source digest and resolve its class path and the S3 plugin.

    Raises:
        ServiceUnavailableError: Maven is missing or cannot resolve an artifact.
        subprocess.CalledProcessError: the Java sources do not compile.
    """
    from twophase.integration.services.cache import cache_dir
    from twophase.integration.services.maven import SETTINGS, pom_digest, resolve_jars

    sources = sorted((HERE / "java").rglob("*.java"))
    target = cache_dir() / f"flink-bench-{_digest(POM, *sources)}"
    jar = target / "flink-flights-1.jar"
    if not jar.is_file():
        mvn = shutil.which("mvn") or "mvn"
        subprocess.run(
            [mvn, "-q", "-B", "-gs", str(SETTINGS), "-f", str(POM), f"-Dtwophase.build={target}", "package"],
            check=True,
        )
    jars = resolve_jars(POM, cache_dir() / f"flink-bench-jars-{pom_digest(POM)[:12]}")
    plugin_jars = resolve_jars(PLUGIN_POM, cache_dir() / f"flink-bench-s3-{pom_digest(PLUGIN_POM)[:12]}")
    plugins = cache_dir() / "flink-bench-plugins"
    folder = plugins / "s3-fs-hadoop"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for j in plugin_jars:
        (folder / j.name).symlink_to(j)
    return FlinkBuild((jar, *jars), plugins)


def free_port() -> int:
    """A TCP port free on the loopback now (for the MiniCluster's REST endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class FlinkJob:
    """One Flink job in its own JVM: planned, checked, submitted, then cancelled by :meth:`cancel`.

    Attributes:
        plan_s: JVM start to the plan explained (table environment, DDL, planning), s.
        submit_s: ``execute()``: the MiniCluster's start and the job's submission, s.
        go_at / submitted_at: ``time.time()`` when the submission was asked for, and returned.
        job_id: Flink's job id.
    """

    build: FlinkBuild
    request: Mapping[str, str]
    work_dir: Path
    env: Mapping[str, str]
    heap: str = "2g"
    plan_s: float = 0.0
    submit_s: float = 0.0
    go_at: float = 0.0
    submitted_at: float = 0.0
    job_id: str = ""
    port: int = field(default_factory=free_port)
    _proc: subprocess.Popen[str] | None = None
    _stderr: IO[str] | None = None

    @property
    def pid(self) -> int:
        """The JVM's process id."""
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> None:
        """Start the JVM, check its plan, submit the job.

        Raises:
            PythonOnFlinkPathError: the plan has a Python operator (the JVM is ended first).
            RuntimeError: the JVM ended before it planned or submitted.
        """
        self.work_dir.mkdir(parents=True, exist_ok=True)
        plan_file = self.work_dir / "plan.txt"
        request = {
            **self.request,
            "plan.file": str(plan_file),
            "flink.rest.port": str(self.port),
            "flink.rest.address": "127.0.0.1",
            "flink.rest.bind-address": "127.0.0.1",
        }
        props = self.work_dir / "request.properties"
        props.write_text("".join(f"{k}={_escape(v)}\n" for k, v in sorted(request.items())))
        (self.work_dir / "log4j2.properties").write_text(LOG4J)
        self._stderr = (self.work_dir / "stderr.log").open("w")
        self._proc = subprocess.Popen(
            [
                "java",
                f"-Xmx{self.heap}",
                f"-Xms{self.heap}",
                f"-Dlog4j.configurationFile={self.work_dir / 'log4j2.properties'}",
                f"-Dtwophase.flink.log={self.work_dir / 'flink.log'}",
                "--add-opens=java.base/java.util=ALL-UNNAMED",
                "--add-opens=java.base/java.lang=ALL-UNNAMED",
                "-cp",
                os.pathsep.join(str(p) for p in self.build.classpath),
                MAIN_CLASS,
                str(props),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, **self.env, "FLINK_PLUGINS_DIR": str(self.build.plugins_dir)},
        )
        try:
            planned = self._reply("planned")
            self.plan_s = round(planned["plan_ms"] / 1000, 3)
            check_plan(plan_file.read_text())
            assert self._proc.stdin is not None
            self.go_at = time.time()
            self._proc.stdin.write("go\n")
            self._proc.stdin.flush()
            submitted = self._reply("submitted")
        except BaseException:
            self._end(10)  # no JVM outlives a failed start
            raise
        self.submitted_at = time.time()
        self.submit_s = round(submitted["submit_ms"] / 1000, 3)
        self.job_id = submitted["job_id"]

    def _reply(self, event: str, timeout_s: float = 300.0) -> dict[str, Any]:
        """The Java main's next reply ``event`` on its standard output. A JVM that says nothing
        for ``timeout_s`` (a failed statement whose threads keep it alive) is killed, which ends
        the read.

        Raises:
            RuntimeError: the JVM ended (or was killed) before replying.
        """
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        watchdog = threading.Timer(timeout_s, proc.kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            for line in proc.stdout:
                if line.startswith(REPLY_PREFIX):
                    reply: dict[str, Any] = json.loads(line[len(REPLY_PREFIX) :])
                    if reply.get("event") == event:
                        return reply
        finally:
            watchdog.cancel()
        raise RuntimeError(
            f"the Flink JVM ended (exit {proc.wait()}) before '{event}' (or said nothing for "
            f"{timeout_s} s and was killed); see {self.work_dir}"
        )

    def alive(self) -> bool:
        """Whether the JVM still runs."""
        return self._proc is not None and self._proc.poll() is None

    def rest(self, path: str, method: str = "GET") -> Any:
        """A call to the MiniCluster's REST API; the decoded JSON answer."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method)
        with urllib.request.urlopen(req, timeout=10) as answer:
            body = answer.read()
        return json.loads(body) if body else None

    def running_at(self, timeout_s: float = 300.0) -> float:
        """``time.time()`` when every vertex of the job was first seen RUNNING (polled).

        Raises:
            TimeoutError: not all running within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            vertices = self.rest(f"/jobs/{self.job_id}")["vertices"]
            if vertices and all(v["status"] == "RUNNING" for v in vertices):
                return time.time()
            time.sleep(0.05)
        raise TimeoutError(f"Flink job {self.job_id} not running after {timeout_s} s")

    def checkpoints(self) -> dict[str, Any]:
        """Completed and failed checkpoints, their median duration, and the completion times
        (``time.time()``) of the completed ones in the history (REST ``/checkpoints``; the request
        sets ``web.checkpoints.history`` so that it holds them all)."""
        stats = self.rest(f"/jobs/{self.job_id}/checkpoints")
        summary = stats.get("summary", {})
        return {
            "completed": stats["counts"]["completed"],
            "failed": stats["counts"]["failed"],
            "duration_ms_p50": summary.get("end_to_end_duration", {}).get("p50"),
            "completed_at": sorted(
                c["latest_ack_timestamp"] / 1000
                for c in stats.get("history", [])
                if c.get("status") == "COMPLETED"
            ),
        }

    def cancel(self, timeout_s: float = 60.0) -> None:
        """Cancel the job (its sinks abort their open transactions) and wait for the JVM."""
        try:
            self.rest(f"/jobs/{self.job_id}?mode=cancel", method="PATCH")
        except OSError as e:
            log.warning("Flink cancel failed (%s): ending the JVM", e)
        self._end(timeout_s)

    def _end(self, timeout_s: float = 60.0) -> None:
        if self._proc is None:
            return
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._stderr is not None:
            self._stderr.close()


def _escape(value: str) -> str:
    """A value for a Java properties file (backslashes, and ``:``/``=`` are safe in values)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")
