"""Local SparkSessions with Delta, the Kafka source and s3a, from jars resolved once by Maven.

The jars of ``services/jvm/spark/pom.xml`` for the installed pyspark (its Scala and Hadoop versions,
and :func:`~twophase.integration.services.versions.spark_jar_set` for its release) are copied
into ``<cache>/spark-jars-<digest>`` on first use and handed to Spark with ``spark.jars``, so
starting a session never touches the network (no ``spark.jars.packages``). Jars whose artifact
pyspark already ships (Spark, Scala, Hadoop client, Jackson, logging, ...) are left out, so
pyspark's own versions win.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from twophase.integration.services.cache import cache_dir
from twophase.integration.services.maven import JVM_DIR, pom_digest, resolve_jars
from twophase.integration.services.s3 import S3Endpoint
from twophase.integration.services.versions import SPARK_JARS, SparkJarSet, spark_jar_set
from twophase.sinks.errors import ConfigError, UnsupportedSparkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_POM = JVM_DIR / "spark" / "pom.xml"
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d+\.\d+[\w.\-]*)\.jar$")


def _artifact(jar: Path) -> str:
    match = _JAR_NAME.match(jar.name)
    return match.group("artifact") if match else jar.stem


def pyspark_jars_dir() -> Path:
    """The ``jars`` folder of the installed pyspark."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def jar_set() -> SparkJarSet:
    """The extra jars' versions for the installed pyspark's release (:func:`spark_jar_set`).

    Raises:
        UnsupportedSparkError: a Spark minor version the project has no jar set for.
    """
    from twophase.coordinator.spark.compat import spark_release

    release = spark_release()
    jars = spark_jar_set(release)
    if jars is None:
        known = ", ".join(".".join(map(str, v)) for v in SPARK_JARS)
        raise UnsupportedSparkError(f"no jar set for Spark {'.'.join(map(str, release))}; tested: {known}")
    return jars


def has_delta_jars() -> bool:
    """Whether Delta publishes Spark jars for the installed Spark (else tables are read with delta-rs)."""
    return jar_set().delta_artifact is not None


def _shipped_version(prefix: str) -> str:
    """The version of pyspark's own ``<prefix>-<version>.jar`` (e.g. ``scala-library``)."""
    for jar in pyspark_jars_dir().glob(f"{prefix}-*.jar"):
        match = _JAR_NAME.match(jar.name)
        if match and match.group("artifact") == prefix:
            return match.group("version")
    raise UnsupportedSparkError(f"pyspark ships no {prefix} jar in {pyspark_jars_dir()}")


def maven_properties() -> dict[str, str]:
    """The ``-D`` properties of the Spark POM for the installed pyspark."""
    jars = jar_set()
    scala = ".".join(_shipped_version("scala-library").split(".")[:2])
    props = {
        "scala.binary.version": scala,
        "hadoop.version": _shipped_version("hadoop-client-api"),
        "token.provider.version": jars.token_provider,
    }
    if jars.delta_artifact is None or jars.delta_version is None:
        props["no.delta"] = "true"
    else:
        props.update({"delta.artifact": jars.delta_artifact, "delta.version": jars.delta_version})
    if jars.kafka_source is None:
        props["no.kafka.source"] = "true"
    else:
        props["kafka.source.version"] = jars.kafka_source
    if jars.hadoop_cloud is None:
        props["no.hadoop.cloud"] = "true"
    else:
        props["hadoop.cloud.version"] = jars.hadoop_cloud
    return props


def spark_jars() -> list[str]:
    """Absolute paths of the extra jars (Delta, spark-sql-kafka, hadoop-aws + its AWS SDK) for the
    installed pyspark.

    Resolved by Maven on the first call (then cached per jar set); jars of artifacts pyspark
    already ships are dropped.

    Raises:
        ServiceUnavailableError: Maven is missing or cannot resolve the POM.
        UnsupportedSparkError: a Spark minor version without a jar set.
    """
    props = maven_properties()
    out_dir = cache_dir() / f"spark-jars-{pom_digest(SPARK_POM, props)[:12]}"
    shipped = {_artifact(jar) for jar in pyspark_jars_dir().glob("*.jar")}
    return [str(jar) for jar in resolve_jars(SPARK_POM, out_dir, props) if _artifact(jar) not in shipped]


def twophase_jars() -> list[str]:
    """twophase's own jars, those built (``make jars`` in a checkout; a wheel carries them): the S3
    sink's committer and the Kafka sink's writer for their Spark-staged writes. Without them every
    other write runs."""
    from twophase.connectors.kafka import jvm_jar as kafka_jar
    from twophase.connectors.s3 import jvm_jar as s3_jar

    found = []
    for jar in (s3_jar.staging_jar, kafka_jar.staging_jar):
        with contextlib.suppress(ConfigError):  # not built: its staged writes say so by name
            found.append(jar())
    return found


def s3a_conf(s3: S3Endpoint, keys: bool = True) -> dict[str, str]:
    """Hadoop s3a settings (without the ``spark.hadoop.`` prefix) for ``s3``: path style, and static
    keys; with ``keys=False`` none, so s3a's default chain takes them from each JVM's environment
    (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``: the driver's, executors' ``spark.executorEnv``)."""
    conf = {
        "fs.s3a.endpoint": s3.endpoint_url,
        "fs.s3a.endpoint.region": s3.region,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": str(s3.endpoint_url.startswith("https://")).lower(),
    }
    if keys:
        conf.update(
            {
                "fs.s3a.access.key": s3.access_key,
                "fs.s3a.secret.key": s3.secret_key,
                "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            }
        )
    return conf


def configure_s3a(spark: SparkSession, s3: S3Endpoint) -> None:
    """Point an existing session's s3a file system at ``s3`` (used when S3 starts after Spark)."""
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(s3).items():
        hadoop_conf.set(key, value)
        spark.conf.set(key, value)


SCRATCH_ENV = "TWOPHASE_SPARK_SCRATCH"
"""A folder for the sessions' scratch folders (default: the system's temporary folder)."""


SCRATCH_PREFIX = "twophase-spark-"
OWNER_FILE = "owner"
"""In each scratch folder: ``<pid> <start time>`` of the process that made it."""


def _process_identity(pid: int) -> str | None:
    """``pid``'s start time (Linux: ``/proc/<pid>/stat`` field 22, clock ticks since boot), so a pid
    reused by another process is not taken for the owner; ``"alive"`` where there is no ``/proc``;
    ``None``: no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # another user's live process
        return "alive"
    except OSError:
        return "alive"  # unreadable: leave its folder alone
    return stat.rsplit(")", 1)[1].split()[19]  # after "pid (comm)": field 22 is the 20th


def sweep_dead_scratch(parent: Path) -> list[Path]:
    """Remove the scratch folders in ``parent`` whose owner process is gone: a driver killed with
    ``kill -9`` runs no ``atexit`` hook and leaves its ~700 MB behind, so each restart would pile up
    another. Folders of live processes, and folders without an owner file, are left alone.

    Returns:
        the folders removed.
    """
    removed: list[Path] = []
    for folder in parent.glob(f"{SCRATCH_PREFIX}*"):
        try:
            pid_text, identity = (folder / OWNER_FILE).read_text().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if pid != os.getpid() and _process_identity(pid) != identity:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def spark_scratch() -> Path:
    """A new scratch folder for one session (its warehouse, local dir with the fetched jars,
    ~700 MB, and Derby home) under ``TWOPHASE_SPARK_SCRATCH`` when set (else the system's temporary
    folder), so that a runner that kills drivers can remove what they leave; removed at this
    interpreter's normal exit, and by the next session's start (:func:`sweep_dead_scratch`) when
    this process was killed."""
    parent = os.environ.get(SCRATCH_ENV) or None
    if parent is not None:
        Path(parent).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    (scratch / OWNER_FILE).write_text(f"{os.getpid()} {_process_identity(os.getpid())}\n")
    sweep_dead_scratch(scratch.parent)
    return scratch


def build_spark_session(
    app_name: str,
    extra_conf: dict[str, str] | None = None,
    s3: S3Endpoint | None = None,
    s3_keys: bool = True,
) -> SparkSession:
    """A ``local[2]`` SparkSession with Delta's SQL extension and catalog, Kafka source and s3a.

    Args:
        app_name: Spark application name.
        extra_conf: further Spark settings, applied last (they win; ``spark.master`` picks a
            cluster, to whose executors Spark ships the jars).
        s3: when given, s3a is configured for this endpoint (path-style, static credentials).
        s3_keys: put ``s3``'s keys into the s3a settings; ``False``: each JVM's environment.

    Returns the session from ``getOrCreate()``: settings only take effect if no session exists yet.

    Raises:
        ServiceUnavailableError: the jars cannot be resolved.
    """
    from pyspark.sql import SparkSession

    scratch = spark_scratch()
    conf: dict[str, str] = {"spark.jars": ",".join([*spark_jars(), *twophase_jars()])}
    if has_delta_jars():
        conf["spark.sql.extensions"] = "io.delta.sql.DeltaSparkSessionExtension"
        conf["spark.sql.catalog.spark_catalog"] = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    conf |= {
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        "spark.local.dir": str(scratch / "local"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={scratch / 'derby'}",
    }
    if s3 is not None:
        conf.update({f"spark.hadoop.{key}": value for key, value in s3a_conf(s3, s3_keys).items()})
    conf.update(extra_conf or {})
    # Python workers must run this interpreter (pyarrow, the project's packages); PySpark reads
    # PYSPARK_PYTHON when the SparkContext starts
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
