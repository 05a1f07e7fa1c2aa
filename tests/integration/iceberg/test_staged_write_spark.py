"""The Iceberg sink's Spark-staged writes (#44 item 4) on a real Spark with Iceberg's Spark runtime,
a SQL catalog on a real PostgreSQL shared by pyiceberg and Iceberg's ``JdbcCatalog``, and local
warehouse files: for an unpartitioned table, an identity and a day partition, a staged job's table
holds exactly the rows the Python path's holds, read back by pyiceberg and by Spark (neither wrote
it), every data file under the job's data prefix with the Python path's names and one snapshot per
checkpoint; a staged write no checkpoint holds is deleted by the lingering cleanup, nothing of it
visible; a Spark catalog naming another table under that name is refused before any task writes.

Iceberg publishes no Spark runtime for the development Spark (4.2), so the job runs in the Spark
4.1.4 environment :mod:`benchmarks.bench_iceberg` keeps (made on first use), from the wheel of the
current sources, driven by ``staged_spark41.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.bench_modules import ROOT, load_benchmark

from twophase.integration.services.postgres import PostgresServer

pytestmark = pytest.mark.slow
bench_iceberg = load_benchmark("bench_iceberg", ROOT / "benchmarks" / "bench_iceberg.py")
SCRIPT = Path(__file__).with_name("staged_spark41.py")


@pytest.fixture(scope="module")
def outcome(postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    python = bench_iceberg.ensure_env()
    coordinates = [bench_iceberg.ICEBERG_RUNTIME, bench_iceberg.JDBC_DRIVER]
    jars = bench_iceberg.common.maven_jars("iceberg-spark-4.1", coordinates)
    work = tmp_path_factory.mktemp("iceberg-staged")
    e = postgres.endpoint
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "SPARK_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env |= {
        "PYSPARK_PYTHON": str(python),
        "TWOPHASE_TEST_CATALOG_URI": f"postgresql+psycopg://{e.user}@{e.host}:{e.port}/{e.dbname}",
        "TWOPHASE_TEST_JDBC_URI": f"jdbc:postgresql://{e.host}:{e.port}/{e.dbname}",
        "TWOPHASE_TEST_USER": e.user,
        "TWOPHASE_TEST_PASSWORD": e.password,
        "TWOPHASE_TEST_WAREHOUSE": f"file://{work / 'warehouse'}",
        "TWOPHASE_TEST_CHECKPOINTS": str(work / f"chk-{uuid.uuid4().hex[:6]}"),
        "TWOPHASE_TEST_JARS": ",".join(jars),
    }
    out = work / "outcome.json"
    subprocess.run([str(python), str(SCRIPT), str(out)], check=True, env=env, cwd=work, timeout=900)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.parametrize("partition_by", ["", "k", "day(at)"])
def test_a_staged_job_writes_what_the_python_path_writes_exactly_once(
    outcome: dict[str, Any], partition_by: str
) -> None:
    rows = outcome["expected_rows"]
    for path in ("spark", "python"):
        written = outcome["written"][f"{path}:{partition_by}"]
        assert (written["rows"], written["distinct_ids"], written["spark_reads"]) == (rows, rows, rows), path
        assert written["files_under_job_prefix"], path
        assert written["snapshots"] == ["1"], path  # one append, of checkpoint 1
    assert outcome["written"][f"equal:{partition_by}"]


def test_a_staged_write_no_checkpoint_holds_is_the_lingering_cleanup_s(outcome: dict[str, Any]) -> None:
    lingering = outcome["lingering"]
    assert lingering["staged_tasks"] == [0, 1, 2]
    assert lingering["staged_records"] == outcome["expected_rows"]
    assert lingering["deleted"] == lingering["staged_files"] > 0
    assert (lingering["left"], lingering["visible_rows"]) == (0, 0)


def test_a_spark_catalog_naming_another_table_is_refused_before_writing(outcome: dict[str, Any]) -> None:
    assert "point both at the same catalog" in outcome["wrong_catalog"]
    assert outcome["wrong_catalog_files"] == 0
