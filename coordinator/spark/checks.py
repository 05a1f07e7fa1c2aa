"""What a job refuses before it writes anything on Spark (DESIGN.md §6 "Requirements")."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import ConfigError, JobError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SUPPORTED_OUTPUT_MODES = frozenset({"append", "update"})
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]{0,99}$")


def job_id_from_name(name: str) -> str:
    """A stable job id from a job name: lower case, runs of other characters as ``_``.

    The id is part of every transaction name and checkpoint path, so it is restricted to
    ``[a-z0-9_.]`` (no ``-``: Kafka transactional ids use it as a separator).

    Raises:
        ConfigError: the name has no usable character.
    """
    job_id = re.sub(r"[^a-z0-9_.]+", "_", name.strip().lower()).strip("_.")
    if not job_id:
        raise ConfigError(f"job name {name!r} yields an empty job id; give job_id explicitly")
    return job_id[:100]


def check_job_id(job_id: str) -> str:
    """Validate an explicit job id (``[A-Za-z0-9][A-Za-z0-9_.]*``, at most 100 characters).

    Raises:
        ConfigError: the id has other characters.
    """
    if not _JOB_ID.match(job_id):
        raise ConfigError(
            f"job id {job_id!r} must match {_JOB_ID.pattern}: it is part of transaction names and paths"
        )
    return job_id


def check_stream_options(output_mode: str, options: Mapping[str, str]) -> None:
    """Refuse stream settings under which exactly-once cannot hold.

    Raises:
        ConfigError: ``asyncProgressTrackingEnabled`` is on (Spark would commit offsets before the
            batch's checkpoint is durable), or the output mode is not append/update (complete
            mode rewrites the whole result every batch, which a 2PC append sink cannot take).
    """
    for key, value in options.items():
        if key.lower() == "asyncprogresstrackingenabled" and str(value).strip().lower() == "true":
            raise ConfigError(
                "asyncProgressTrackingEnabled must be off: Spark would mark batches done before "
                "their checkpoint is durable, breaking exactly-once"
            )
        if key.lower() == "checkpointlocation":
            raise ConfigError("pass the Spark checkpoint location as spark_checkpoint_location=")
    if output_mode.lower() not in SUPPORTED_OUTPUT_MODES:
        raise ConfigError(
            f"output mode {output_mode!r} is not supported; use one of {sorted(SUPPORTED_OUTPUT_MODES)}"
        )


def check_speculation(speculation: str | None, sinks: Sequence[TwoPhaseCommitSink[Any, Any]]) -> None:
    """Refuse Spark speculation when a sink cannot take two concurrent attempts of one subtask.

    Args:
        speculation: the value of ``spark.speculation`` (``"true"``/``"false"``/``None``).
        sinks: the job's sinks.

    Raises:
        ConfigError: speculation is on and a sink is not ``speculation_safe``.
    """
    unsafe = [s.name for s in sinks if not s.speculation_safe]
    if str(speculation).strip().lower() == "true" and unsafe:
        raise ConfigError(
            f"spark.speculation is on, but sinks {unsafe} cannot run two attempts of one task at once "
            "(e.g. a speculative Kafka attempt would fence the first attempt's transaction); "
            "turn speculation off for this job"
        )


def read_spark_query_id(spark: SparkSession, location: str) -> str | None:
    """The query id stored in a Spark checkpoint location's ``metadata`` file, or ``None`` if new.

    Read through Hadoop's FileSystem, so local, ``file:`` and ``s3a:`` locations all work.

    Raises:
        JobError: the file exists but cannot be parsed.
    """
    # classic PySpark only: Hadoop's FileSystem through py4j
    jvm: Any = spark._jvm
    hconf = spark._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(location.rstrip("/") + "/metadata")
    fs = path.getFileSystem(hconf)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
        line = reader.readLine()
    finally:
        stream.close()
    try:
        return str(json.loads(line)["id"])
    except (TypeError, ValueError, KeyError) as e:
        raise JobError(f"unreadable Spark checkpoint metadata at {location}/metadata: {e!r}") from e


def read_spark_last_committed_batch(spark: SparkSession, location: str) -> int | None:
    """The highest batch id in a Spark checkpoint location's commit log (``commits/<n>``), or ``None``."""
    jvm: Any = spark._jvm
    hconf = spark._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(location.rstrip("/") + "/commits")
    fs = path.getFileSystem(hconf)
    if not fs.exists(path):
        return None
    batches = [int(n) for s in fs.listStatus(path) if (n := str(s.getPath().getName())).isdigit()]
    return max(batches, default=None)


def check_query_id(
    stored: JsonObject | None,
    spark_query_id: str | None,
    location: str,
    *,
    committed_batch: int | None = None,
) -> None:
    """Refuse to resume a job against another Spark checkpoint than the one it was checkpointed with.

    Args:
        stored: the restored checkpoint's source position (``{"engine": "spark", "query_id", ...}``),
            ``None`` when the job has no checkpoint.
        spark_query_id: the id in the Spark checkpoint location, ``None`` if it is new.
        location: the Spark checkpoint location (for the message).
        committed_batch: the highest batch in the Spark checkpoint's commit log, ``None`` if none.

    Raises:
        JobError: the job's checkpoint names a Spark query and the location holds another one or
            none (a new location would replay the stream from the start: duplicates); or the job
            has no checkpoint while Spark has committed batches (Spark would not replay them, and
            what the job's lost checkpoints held — commits still pending, files in progress —
            would be gone silently).
    """
    if stored is None:
        if committed_batch is not None:
            raise JobError(
                f"the job has no checkpoint, but the Spark checkpoint location {location} holds query "
                f"{spark_query_id!r} with committed batch {committed_batch}: Spark would resume after it "
                "and what the job's missing checkpoints held would be lost; restore the job's "
                "checkpoint directory, or start with a new Spark checkpoint location"
            )
        return
    if stored.get("engine") != "spark":
        return
    if stored.get("query_id") != spark_query_id:
        raise JobError(
            f"the job's checkpoint belongs to Spark query {stored.get('query_id')!r}, but the Spark "
            f"checkpoint location {location} holds {spark_query_id or 'no query'}: resuming against a "
            "different Spark checkpoint is refused (it would replay or skip data); use the original "
            "location, or a new job name"
        )


FINGERPRINT_SCHEME = "2:"  # scheme 1 hashed semanticHash(), which differs in every JVM


def input_fingerprint(df: DataFrame) -> str:
    """A fingerprint of a batch write's input: the plan's canonical text and its input files.

    The same DataFrame built the same way in another process gives the same fingerprint (a
    resumed write must be recognised); other files or another plan give another. Files rewritten in
    place under the same names are not told apart.

    The plan part is the text of the canonicalized analyzed plan (Spark numbers its expression
    ids from 0 there), not ``semanticHash()``: that hash mixes in identity hash codes (a file
    format's class) and so differs in every JVM. A Spark Connect DataFrame has no JVM plan in the
    client; its plan part is the schema, so two plans over the same files with one schema are not
    told apart there.

    Returns:
        ``"2:"`` followed by 32 hex digits.
    """
    material = json.dumps([_plan_text(df), sorted(df.inputFiles())])
    return FINGERPRINT_SCHEME + hashlib.sha256(material.encode("utf-8")).hexdigest()[:32]


def _plan_text(df: DataFrame) -> str:
    jdf = getattr(df, "_jdf", None)
    if jdf is None:  # Spark Connect
        return str(df.schema.json())
    return str(jdf.queryExecution().analyzed().canonicalized().toString())


def batch_position(job_id: str, stored: JsonObject | None, fingerprint: str) -> JsonObject:
    """The source position of a batch write (one epoch) with input ``fingerprint``, checked against
    the job's latest checkpoint: a re-run of the same write is a replay (commit what is pending,
    write nothing twice); a re-run with other input is refused.

    Checkpoints written before fingerprints were recorded, or with scheme 1 (which no other process
    could reproduce), count as the same input.

    Raises:
        JobError: the job already wrote other input under this job id.
    """
    position: JsonObject = {"engine": "spark-batch", "job": job_id, "input": fingerprint}
    if stored is None or stored.get("engine") != "spark-batch" or stored.get("job") != job_id:
        return position
    if "input" not in stored:
        return stored  # older checkpoints: the write's identity was its job id alone
    if not str(stored["input"]).startswith(FINGERPRINT_SCHEME):
        return position  # scheme 1 cannot be compared across processes
    if stored["input"] != fingerprint:
        raise JobError(
            f"job {job_id!r} already wrote other input (fingerprint {stored['input']}, now "
            f"{fingerprint}); a batch job id names one write: use a new job name for new data"
        )
    return position
