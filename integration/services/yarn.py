"""A YARN cluster on loopback, run natively from Hadoop's jars (issue #45 item 2).

:class:`YarnCluster` runs one ResourceManager and ``nodemanagers`` NodeManagers as the daemons a
Hadoop distribution runs (``org.apache.hadoop.yarn.server.resourcemanager.ResourceManager`` and
``...nodemanager.NodeManager`` with ``java -cp <conf>:<jars>``), each JVM with a configuration
folder of its own written here (``yarn-site.xml``, ``core-site.xml``, ``log4j.properties``). The
jars are Hadoop's shaded minicluster jar (both daemons), hadoop-aws and the logging Hadoop ships,
resolved by Maven (``jvm/yarn/pom.xml``) at the Hadoop release of the installed pyspark's own
``hadoop-client-api`` jar, so the daemons speak the protocol Spark's YARN client was built for.

The daemons run under one ``bash`` parent in one process group: stopping the group stops them
all, and when one daemon exits the others are stopped too (a cluster is whole or gone). The
NodeManagers run containers with the ``DefaultContainerExecutor`` (each container in a session of
its own, as the user running the cluster), the FIFO scheduler places them, physical and virtual
memory checks are off (a container's Python workers are its children), and the disk health check
accepts a full disk up to 99 %.

S3 is the file system of the applications: spark-submit stages its files on ``s3a://``
(``spark.yarn.stagingDir``) and each NodeManager localizes them from there, so ``core-site.xml``
carries the S3 endpoint and its keys (mode 0600; a production cluster's hosts have a role).
:attr:`YarnEndpoint.conf_dir` is what a client gives spark-submit as ``HADOOP_CONF_DIR`` and
``YARN_CONF_DIR``.

Resolution order, as for the other services (:mod:`twophase.integration.services.launcher`):
``TWOPHASE_YARN_CONF_DIR`` (the Hadoop configuration folder of a running cluster), else a cluster
recorded by ``twophase services up --yarn`` (entry ``yarn``), else a native one for the block.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import tempfile
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twophase.integration.services.cache import cache_dir
from twophase.integration.services.kafka import java_binary
from twophase.integration.services.maven import JVM_DIR, resolve_jars
from twophase.integration.services.native_service import wait_started
from twophase.integration.services.process import HOST, ManagedProcess, free_port, tcp_refusal, wait_ready
from twophase.integration.services.s3 import S3Endpoint
from twophase.integration.services.state import (
    YARN_RM_CLASS,
    ServiceStatus,
    connect_timeout_s,
    recorded_alive,
    start_timeout_s,
)
from twophase.sinks.errors import ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

YARN_POM = JVM_DIR / "yarn" / "pom.xml"
CONF_DIR_ENV = "TWOPHASE_YARN_CONF_DIR"
NM_CLASS = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
FIFO_SCHEDULER = "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler"
NODEMANAGERS = 1
NM_MEMORY_MB = 6144
"""Memory a NodeManager offers: an application master (driver, 1 GiB + 384 MiB overhead) and two
one-core executors of the same size fit on one node, with room for a second attempt's master."""
NM_VCORES = 4
"""Virtual cores a NodeManager offers (YARN counts them; they are not the machine's cores)."""
DAEMON_HEAP = "384m"
LOG4J = """\
log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.yarn.event.AsyncDispatcher=WARN
"""


def hadoop_version() -> str:
    """The Hadoop release of the installed pyspark (its ``hadoop-client-api`` jar), e.g. ``3.5.0``."""
    from twophase.integration.spark import maven_properties

    return maven_properties()["hadoop.version"]


def yarn_libs() -> Path:
    """The daemons' jar folder in the cache (``<cache>/yarn-<hadoop version>/libs``), resolved by
    Maven on first use.

    Raises:
        ServiceUnavailableError: Maven is missing or cannot resolve the POM.
    """
    version = hadoop_version()
    libs = cache_dir() / f"yarn-{version}" / "libs"
    resolve_jars(YARN_POM, libs, {"hadoop.version": version})
    return libs


def site_xml(properties: Mapping[str, str]) -> str:
    """A Hadoop ``*-site.xml`` holding ``properties`` (name → value), values escaped."""
    root = ET.Element("configuration")
    for name, value in properties.items():
        prop = ET.SubElement(root, "property")
        ET.SubElement(prop, "name").text = name
        ET.SubElement(prop, "value").text = value
    ET.indent(root)
    return '<?xml version="1.0"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def read_site(path: Path) -> dict[str, str]:
    """The properties of a Hadoop ``*-site.xml`` (name → value); ``{}`` when it does not exist.

    Raises:
        ConfigError: the file is not such XML.
    """
    if not path.is_file():
        return {}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise ConfigError(f"{path} is not a Hadoop configuration file: {e}") from None
    out = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name:
            out[name.strip()] = (value or "").strip()
    return out


def s3_site(s3: S3Endpoint) -> dict[str, str]:
    """``core-site.xml``'s s3a settings for ``s3``, keys included (what the NodeManagers'
    localizers and every client of the cluster read)."""
    from twophase.integration.spark import s3a_conf

    return s3a_conf(s3, keys=True)


@dataclass(frozen=True)
class YarnEndpoint:
    """How clients reach a YARN cluster.

    Attributes:
        conf_dir: its Hadoop configuration folder: spark-submit's ``HADOOP_CONF_DIR`` and
            ``YARN_CONF_DIR`` (``yarn-site.xml`` with the ResourceManager's addresses).
        web_url: the ResourceManager's web address (``http://host:port``; its REST API under
            ``/ws/v1/cluster``).
    """

    conf_dir: Path
    web_url: str

    def client_env(self) -> dict[str, str]:
        """``HADOOP_CONF_DIR`` and ``YARN_CONF_DIR`` for spark-submit."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir), "YARN_CONF_DIR": str(self.conf_dir)}

    @classmethod
    def of_conf_dir(cls, conf_dir: Path) -> YarnEndpoint:
        """The endpoint a configuration folder names (``yarn.resourcemanager.webapp.address``,
        else ``yarn.resourcemanager.hostname`` with YARN's default web port 8088).

        Raises:
            ConfigError: no ``yarn-site.xml`` there, or it names no ResourceManager.
        """
        site = read_site(conf_dir / "yarn-site.xml")
        web = site.get("yarn.resourcemanager.webapp.address")
        if not web and site.get("yarn.resourcemanager.hostname"):
            web = f"{site['yarn.resourcemanager.hostname']}:8088"
        if not web:
            raise ConfigError(
                f"{conf_dir}/yarn-site.xml names no ResourceManager "
                "(yarn.resourcemanager.hostname or yarn.resourcemanager.webapp.address)"
            )
        return cls(conf_dir, f"http://{web}")

    def cluster_info(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """``GET /ws/v1/cluster/metrics``'s ``clusterMetrics`` (``activeNodes``, ``appsRunning``, ...).

        Raises:
            OSError, ValueError: it does not answer with JSON.
        """
        with urllib.request.urlopen(f"{self.web_url}/ws/v1/cluster/metrics", timeout=timeout_s) as resp:
            metrics: dict[str, Any] = json.load(resp)["clusterMetrics"]
        return metrics

    def app(self, app_id: str, timeout_s: float = 5.0) -> dict[str, Any]:
        """``GET /ws/v1/cluster/apps/<app_id>``'s ``app``: ``state``, ``finalStatus``,
        ``runningContainers``, ...

        Raises:
            OSError, ValueError: it does not answer with JSON (an unknown id: HTTP 404).
        """
        with urllib.request.urlopen(f"{self.web_url}/ws/v1/cluster/apps/{app_id}", timeout=timeout_s) as resp:
            found: dict[str, Any] = json.load(resp)["app"]
        return found

    def attempts(self, app_id: str, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        """``GET /ws/v1/cluster/apps/<app_id>/appattempts``: each attempt's ``id``,
        ``containerId``, ``appAttemptState``, ...

        Raises:
            OSError, ValueError: it does not answer with JSON.
        """
        url = f"{self.web_url}/ws/v1/cluster/apps/{app_id}/appattempts"
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            found: list[dict[str, Any]] = json.load(resp)["appAttempts"]["appAttempt"]
        return found


def active_nodes(endpoint: YarnEndpoint, timeout_s: float = 2.0) -> int:
    """How many NodeManagers the ResourceManager counts active (0 while it does not answer)."""
    try:
        return int(endpoint.cluster_info(timeout_s).get("activeNodes", 0))
    except (OSError, ValueError, KeyError):
        return 0


def wait_yarn_ready(
    endpoint: YarnEndpoint, nodes: int, timeout_s: float, process: ManagedProcess | None = None
) -> None:
    """Block until the ResourceManager counts ``nodes`` active NodeManagers.

    Raises:
        ServiceUnavailableError: not within ``timeout_s`` seconds, or ``process`` exited.
    """

    def check() -> str | None:
        count = active_nodes(endpoint, min(timeout_s, 5.0))
        return None if count >= nodes else f"{count} of {nodes} NodeManagers active"

    wait_started("YARN", endpoint.web_url, check, timeout_s, process)
    log_event(log, logging.INFO, "yarn ready", web=endpoint.web_url, nodes=nodes)


class YarnCluster:
    """One ResourceManager and its NodeManagers under ``root``; stop with :meth:`stop`.

    Args:
        root: a folder for the configuration, the logs, the NodeManagers' local and log dirs.
        s3: the S3 endpoint applications stage on (written to ``core-site.xml``).
        nodemanagers: how many NodeManagers (≥ 1), each offering ``memory_mb`` and ``vcores``.
        memory_mb: memory per NodeManager, MiB.
        vcores: virtual cores per NodeManager.

    Attributes:
        endpoint: where clients reach it (:attr:`YarnEndpoint.conf_dir` is ``root/conf``).
        process: the daemons' parent, once :meth:`start` ran.
    """

    def __init__(
        self,
        root: Path,
        s3: S3Endpoint,
        nodemanagers: int = NODEMANAGERS,
        memory_mb: int = NM_MEMORY_MB,
        vcores: int = NM_VCORES,
    ) -> None:
        if nodemanagers < 1:
            raise ConfigError(f"a YARN cluster needs at least one NodeManager, not {nodemanagers}")
        self.root = root
        self.s3 = s3
        self.nodemanagers = nodemanagers
        self.memory_mb = memory_mb
        self.vcores = vcores
        web_port = free_port()
        self._rm = {
            "yarn.resourcemanager.hostname": HOST,
            "yarn.resourcemanager.address": f"{HOST}:{free_port()}",
            "yarn.resourcemanager.scheduler.address": f"{HOST}:{free_port()}",
            "yarn.resourcemanager.resource-tracker.address": f"{HOST}:{free_port()}",
            "yarn.resourcemanager.admin.address": f"{HOST}:{free_port()}",
            "yarn.resourcemanager.webapp.address": f"{HOST}:{web_port}",
        }
        self.endpoint = YarnEndpoint(root / "conf", f"http://{HOST}:{web_port}")
        self.process: ManagedProcess | None = None

    def cluster_site(self) -> dict[str, str]:
        """``yarn-site.xml`` of every daemon and client: the ResourceManager's addresses, the FIFO
        scheduler, small allocations, application attempts up to 2
        (``yarn.resourcemanager.am.max-attempts``)."""
        return {
            **self._rm,
            "yarn.resourcemanager.scheduler.class": FIFO_SCHEDULER,
            "yarn.scheduler.minimum-allocation-mb": "128",
            "yarn.scheduler.maximum-allocation-mb": str(self.memory_mb),
            "yarn.scheduler.maximum-allocation-vcores": str(self.vcores),
            "yarn.resourcemanager.am.max-attempts": "2",
            "yarn.resourcemanager.nodemanager-connect-retries": "10",
            "yarn.log-aggregation-enable": "false",
            "yarn.timeline-service.enabled": "false",
        }

    def node_site(self, i: int) -> dict[str, str]:
        """``yarn-site.xml`` of NodeManager ``i``: its ports, folders and resources."""
        node = self.root / f"nm-{i}"
        return {
            **self.cluster_site(),
            "yarn.nodemanager.hostname": HOST,
            "yarn.nodemanager.address": f"{HOST}:{free_port()}",
            "yarn.nodemanager.localizer.address": f"{HOST}:{free_port()}",
            "yarn.nodemanager.webapp.address": f"{HOST}:{free_port()}",
            "yarn.nodemanager.collector-service.address": f"{HOST}:{free_port()}",
            "yarn.nodemanager.local-dirs": str(node / "local"),
            "yarn.nodemanager.log-dirs": str(node / "logs"),
            "yarn.nodemanager.resource.memory-mb": str(self.memory_mb),
            "yarn.nodemanager.resource.cpu-vcores": str(self.vcores),
            "yarn.nodemanager.pmem-check-enabled": "false",
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99",
            "yarn.nodemanager.delete.debug-delay-sec": "0",
            "yarn.nodemanager.recovery.enabled": "false",
        }

    def _write_conf(self, conf: Path, yarn_site: Mapping[str, str]) -> None:
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "yarn-site.xml").write_text(site_xml(yarn_site))
        core = conf / "core-site.xml"
        fd = os.open(core, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the S3 keys
        with os.fdopen(fd, "w") as out:
            out.write(site_xml(s3_site(self.s3)))
        (conf / "log4j.properties").write_text(LOG4J)

    def _daemon(self, java: str, libs: Path, conf: Path, main: str, log_name: str) -> str:
        tmp = conf.parent / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        argv = [
            java,
            f"-Xmx{DAEMON_HEAP}",
            "-XX:+UseSerialGC",
            f"-Djava.io.tmpdir={tmp}",
            f"-Dhadoop.log.dir={conf.parent}",
            "-cp",
            f"{conf}:{libs}/*",
            main,
        ]
        return f"{shlex.join(argv)} >{shlex.quote(str(self.root / log_name))} 2>&1 &"

    def start(self, detach: bool = False) -> None:
        """Write the configuration, start the daemons and wait until every NodeManager is active;
        a cluster that does not come up is stopped.

        Raises:
            ServiceUnavailableError: Java or Maven is missing, the jars cannot be resolved, or the
                cluster is not up within ``TWOPHASE_START_TIMEOUT_S`` (the logs' last lines).
        """
        libs = yarn_libs()
        java = java_binary()
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_conf(self.endpoint.conf_dir, self.cluster_site())
        lines = [self._daemon(java, libs, self.endpoint.conf_dir, YARN_RM_CLASS, "resourcemanager.log")]
        for i in range(self.nodemanagers):
            conf = self.root / f"nm-{i}" / "conf"
            self._write_conf(conf, self.node_site(i))
            lines.append(self._daemon(java, libs, conf, NM_CLASS, f"nodemanager-{i}.log"))
        # one daemon gone: stop the others (TERM to the group, which this shell ignores) and exit
        script = "\n".join([*lines, "wait -n; status=$?", "trap '' TERM; kill -TERM 0; wait; exit $status"])
        self.process = ManagedProcess(
            "yarn", ["bash", "-c", script], self.root / "yarn.out", dict(os.environ), self.root, detach
        )
        try:
            wait_yarn_ready(self.endpoint, self.nodemanagers, start_timeout_s(), self.process)
        except ServiceUnavailableError as e:
            self.stop()
            raise ServiceUnavailableError(f"{e}; {self.log_tail()}") from None
        except BaseException:
            self.stop()
            raise

    def log_tail(self, lines: int = 3) -> str:
        """The last ``lines`` lines of each daemon's log, for one-line errors."""
        tails = []
        for path in sorted(self.root.glob("*.log")):
            kept = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
            tails.append(f"{path.name}: {' | '.join(kept[-lines:])}")
        return "; ".join(tails)

    def stop(self) -> None:
        """Stop the daemons (a NodeManager stops its containers as it shuts down); idempotent."""
        if self.process is not None:
            self.process.stop()

    def state(self) -> dict[str, Any]:
        """The ``services.json`` entry: ``pid`` (the daemons' parent), ``conf_dir``, ``web_url``,
        ``nodemanagers`` and ``data_dir``."""
        assert self.process is not None
        return {
            "pid": self.process.pid,
            "conf_dir": str(self.endpoint.conf_dir),
            "web_url": self.endpoint.web_url,
            "nodemanagers": self.nodemanagers,
            "data_dir": str(self.root),
        }


def env_yarn_endpoint() -> YarnEndpoint | None:
    """The cluster of ``TWOPHASE_YARN_CONF_DIR`` (a Hadoop configuration folder), or None when unset.

    Raises:
        ConfigError: the folder holds no ``yarn-site.xml`` naming a ResourceManager.
    """
    conf_dir = os.environ.get(CONF_DIR_ENV)
    return YarnEndpoint.of_conf_dir(Path(conf_dir)) if conf_dir else None


def check_yarn(endpoint: YarnEndpoint, timeout_s: float) -> None:
    """Wait until the ResourceManager's web address accepts connections.

    Raises:
        ServiceUnavailableError: nothing answers within ``timeout_s`` seconds.
    """
    host, _, port = endpoint.web_url.removeprefix("http://").partition(":")
    reason = wait_ready(lambda: tcp_refusal([(host, int(port))], min(timeout_s, 2.0)), timeout_s, 0.3)
    if reason is not None:
        raise ServiceUnavailableError(
            f"YARN ResourceManager at {endpoint.web_url} is not reachable within {timeout_s:g} s ({reason})"
        )


def _recorded(entry: Mapping[str, Any]) -> YarnEndpoint:
    return YarnEndpoint(Path(entry["conf_dir"]), str(entry["web_url"]))


def up_yarn(
    state: dict[str, Any],
    s3: S3Endpoint,
    fresh_dir: Callable[[str], Path],
    nodemanagers: int = NODEMANAGERS,
) -> YarnCluster | None:
    """For ``services up --yarn``: nothing when ``TWOPHASE_YARN_CONF_DIR`` is given (checked) or a
    recorded cluster runs; else start one detached in ``fresh_dir("yarn")`` staging on ``s3`` and
    record it in ``state``.

    Returns:
        The cluster started, or None.

    Raises:
        ConfigError, ServiceUnavailableError: the given cluster does not answer, or one cannot start.
    """
    given = env_yarn_endpoint()
    if given is not None:
        check_yarn(given, connect_timeout_s())
        return None
    if recorded_alive("yarn") is not None:
        return None
    cluster = YarnCluster(fresh_dir("yarn"), s3, nodemanagers)
    cluster.start(detach=True)
    state["yarn"] = cluster.state()
    return cluster


@contextlib.contextmanager
def yarn_service(s3: S3Endpoint, nodemanagers: int = NODEMANAGERS) -> Iterator[YarnEndpoint]:
    """The YARN cluster of ``TWOPHASE_YARN_CONF_DIR``, else the one ``services up --yarn``
    recorded, else a native one staging on ``s3`` in a temporary folder, stopped and deleted on exit.

    Raises:
        ConfigError, ServiceUnavailableError: as :func:`up_yarn`.
    """
    given = env_yarn_endpoint()
    if given is not None:
        check_yarn(given, connect_timeout_s())
        yield given
        return
    entry = recorded_alive("yarn")
    if entry is not None:
        yield _recorded(entry)
        return
    root = Path(tempfile.mkdtemp(prefix="twophase-yarn-", dir=cache_dir()))
    cluster = YarnCluster(root, s3, nodemanagers)
    try:
        cluster.start()
        yield cluster.endpoint
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def yarn_status(timeout_s: float, entry: dict[str, Any] | None) -> ServiceStatus | None:
    """The ``services status`` row: given by the environment, recorded (``entry``), or None."""
    try:
        given = env_yarn_endpoint()
    except ConfigError as e:
        return ServiceStatus("yarn", "environment", os.environ.get(CONF_DIR_ENV, ""), None, False, str(e))
    if given is not None:
        try:
            check_yarn(given, timeout_s)
        except ServiceUnavailableError as e:
            return ServiceStatus("yarn", "environment", given.web_url, None, False, str(e))
        return ServiceStatus("yarn", "environment", given.web_url, None, True, CONF_DIR_ENV)
    if entry is None:
        return None
    alive = recorded_alive("yarn")
    if alive is None:
        return ServiceStatus("yarn", "not running", "", None, False, "recorded YARN is gone")
    endpoint = _recorded(alive)
    want = int(alive.get("nodemanagers", 1))
    nodes = active_nodes(endpoint, timeout_s)
    detail = f"{nodes} of {want} NodeManagers active, HADOOP_CONF_DIR={endpoint.conf_dir}"
    return ServiceStatus("yarn", "services up", endpoint.web_url, int(alive["pid"]), nodes >= want, detail)


SPARK_AM_CLASS = "org.apache.spark.deploy.yarn.ApplicationMaster"
"""The main class of a Spark application master (in cluster mode: the driver's container)."""


def application_masters(marker: str) -> list[int]:
    """Process ids of the Spark application masters on this machine whose command line holds
    ``marker`` (e.g. the run's work directory, which the driver's arguments name)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if SPARK_AM_CLASS in text and marker in text and "bash" not in text.split(" ", 1)[0]:
            pids.append(int(cmdline.parent.name))
    return pids


def kill_container_of(pid: int) -> None:
    """SIGKILL the container that runs ``pid``: its whole process group (the NodeManager starts
    each container in a session of its own: launch script, JVM and, for a driver, its Python),
    as a host or container crash takes it. A process already gone is no error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    log_event(log, logging.WARNING, "killed container", pid=pid)
