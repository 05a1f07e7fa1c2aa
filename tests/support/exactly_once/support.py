"""Running the job script in subprocesses and checking exactly-once from the outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from support.file_sink import read_committed, staging_files
from twophase.integration.services.spark_cluster import spark_home

REPO = Path(__file__).resolve().parents[3]
JOBSCRIPT = Path(__file__).resolve().with_name("jobscript.py")
FAULT_EXIT = 137


def make_input(root: Path, files: int = 4, rows_per_file: int = 50, start: int = 0) -> list[int]:
    """Write ``files`` Parquet files of consecutive ids under ``root/input``; return the ids.

    Each file gets a modification time one second after the previous one: Spark's file source
    takes files in modification-time order, and files written within one second would otherwise
    reach batches in any order."""
    d = root / "input"
    d.mkdir(parents=True, exist_ok=True)
    ids: list[int] = []
    existing = len(list(d.glob("*.parquet")))
    for i in range(files):
        chunk = list(range(start + i * rows_per_file, start + (i + 1) * rows_per_file))
        tmp = d / f".f{existing + i:04d}.tmp"
        pq.write_table(pa.table({"id": pa.array(chunk, pa.int64())}), tmp)
        final = d / f"f{existing + i:04d}.parquet"
        tmp.rename(final)
        mtime = 1_700_000_000 + existing + i
        os.utime(final, (mtime, mtime))
        ids.extend(chunk)
    return ids


@dataclass(frozen=True)
class Run:
    """One process run of the job script."""

    returncode: int
    outcome: dict[str, object] | None
    log: str


def run_job(
    root: Path,
    *args: str,
    fault: str | None = None,
    kill: str | None = None,
    timeout: float = 300,
    submit_conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Run:
    """Run the job script once; ``fault`` sets ``TWOPHASE_FAULT`` (counted across processes),
    ``kill`` sets ``TWOPHASE_FAULT_KILL`` (``"executor"``: the fault kills the executor JVM).

    ``submit_conf`` runs it as users submit a job, ``spark-submit --conf k=v … jobscript.py``
    with this Spark conf (the driver's Python is this one, ``spark.pyspark.driver.python``),
    instead of ``python -m``. ``env`` adds variables (e.g. a checkpoint store's credentials)."""
    given = env
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPHASE_FAULT")}
    env.update(given or {})
    env["PYSPARK_PYTHON"] = sys.executable
    cmd = [sys.executable, "-m", "support.exactly_once.jobscript"]
    if submit_conf is not None:
        del env["PYSPARK_PYTHON"]  # spark-submit sets it from spark.pyspark.python
        conf = {"spark.pyspark.driver.python": sys.executable, **submit_conf}
        cmd = [str(spark_home() / "bin" / "spark-submit")]
        cmd += [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
        cmd.append(str(JOBSCRIPT))
    if fault:
        env["TWOPHASE_FAULT"] = fault
        env["TWOPHASE_FAULT_STATE"] = str(root / "fault-state" / fault.replace(":", "_"))
    if kill:
        env["TWOPHASE_FAULT_KILL"] = kill
    proc = subprocess.run(
        [*cmd, "--root", str(root), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    outcome = None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            outcome = json.loads(line)
            break
    return Run(proc.returncode, outcome, proc.stdout[-4000:] + proc.stderr[-8000:])


def committed_ids(root: Path, sink: str) -> Counter[int]:
    """The multiset of ids a downstream reader sees in ``sink``."""
    return Counter(int(r["id"]) for r in read_committed(root / "out", sink))


def assert_exactly_once(root: Path, sinks: list[str], expected: list[int], job: str = "eo") -> None:
    """Every sink holds exactly the expected ids once, and no staging (lingering) file is left."""
    want = Counter(expected)
    for sink in sinks:
        got = committed_ids(root, sink)
        missing = want - got
        dupes = got - want
        assert not missing and not dupes, (
            f"sink {sink}: {sum(missing.values())} missing, {sum(dupes.values())} duplicated "
            f"(e.g. missing {sorted(missing)[:5]}, duplicated {sorted(dupes)[:5]})"
        )
        assert staging_files(root / "out", job, sink) == [], f"sink {sink}: lingering staging files"
