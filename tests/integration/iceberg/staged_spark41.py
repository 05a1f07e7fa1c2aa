"""Run by ``test_staged_write_spark.py`` inside the Spark 4.1.4 environment (Iceberg's Spark runtime
exists for it, not for the development Spark): the Iceberg sink's staged writes against one SQL
catalog on PostgreSQL that pyiceberg and Iceberg's ``JdbcCatalog`` share. Prints one JSON object.

``python staged_spark41.py <out.json>``; the catalog database, warehouse and jars come in the
environment (``TWOPHASE_TEST_*``).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from twophase.connectors.iceberg import IcebergSink, IcebergSinkConfig, staging_jar
from twophase.connectors.iceberg.internal import naming
from twophase.coordinator.spark.job import Job
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConfigError

ROWS = 30_000
CATALOG = "lake"


def main(out: str) -> None:
    env = os.environ
    uri, password, warehouse = (
        env["TWOPHASE_TEST_CATALOG_URI"],
        env["TWOPHASE_TEST_PASSWORD"],
        env["TWOPHASE_TEST_WAREHOUSE"],
    )
    jdbc, user = env["TWOPHASE_TEST_JDBC_URI"], env["TWOPHASE_TEST_USER"]
    builder = SparkSession.builder.master("local[2]").appName("twophase-iceberg-staged")
    conf = {
        "spark.jars": ",".join([*env["TWOPHASE_TEST_JARS"].split(","), staging_jar()]),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    # two Spark catalogs on the one database: `lake` is the sink's, `other` another catalog's name
    for name in (CATALOG, "other"):
        conf |= {
            f"spark.sql.catalog.{name}": "org.apache.iceberg.spark.SparkCatalog",
            f"spark.sql.catalog.{name}.type": "jdbc",
            f"spark.sql.catalog.{name}.uri": jdbc,
            f"spark.sql.catalog.{name}.jdbc.user": user,
            f"spark.sql.catalog.{name}.jdbc.password": password,
            f"spark.sql.catalog.{name}.warehouse": warehouse,
        }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(0, ROWS, 1, 3).selectExpr(
        "id",
        "cast(id % 7 as string) as k",
        "case when id % 5 = 0 then null else cast(id as double) / 3 end as v",
        "timestamp_millis(1700000000000 + id * 60000) as at",
    )
    result: dict[str, Any] = {"written": {}}

    def config(
        table: str, partition_by: tuple[str, ...], path: str, catalog: str = CATALOG
    ) -> IcebergSinkConfig:
        return IcebergSinkConfig(
            table=table,
            catalog_uri=uri,
            catalog_name=CATALOG,
            catalog_password=password,
            warehouse=warehouse,
            create_table=True,
            partition_by=partition_by,
            write_path=path,
            spark_catalog=catalog if path == "spark" else None,
            lingering_grace_ms=0,
        )

    ns = f"ns_{uuid.uuid4().hex[:8]}"
    pyiceberg = SqlCatalog(CATALOG, uri=uri.replace("@", f":{password}@", 1), warehouse=warehouse)
    specs: dict[str, tuple[str, ...]] = {"none": (), "k": ("k",), "day": ("day(at)",)}
    for label, partition_by in specs.items():
        tables = {}
        for path in ("spark", "python"):
            table = f"{ns}.t_{path}_{label}"
            job = Job(spark, f"staged-{table}", env["TWOPHASE_TEST_CHECKPOINTS"])
            run = job.sink(IcebergSink("ice", config(table, partition_by, path))).write(df)
            assert run.state is JobState.FINISHED, run.state
            tables[path] = table
        read = {}
        for path, table in tables.items():
            t = pyiceberg.load_table(table)
            rows = sorted(tuple(r.values()) for r in t.scan().to_arrow().to_pylist())
            read[path] = rows
            files = t.inspect.files().column("file_path").to_pylist()
            result["written"][f"{path}:{','.join(partition_by)}"] = {
                "rows": len(rows),
                "distinct_ids": len({r[0] for r in rows}),
                "files_under_job_prefix": all(
                    "/data/twophase-" in f and naming.parse_data_file_path(f) is not None for f in files
                ),
                "spark_reads": spark.table(f"{CATALOG}.{table}").count(),
                "snapshots": [
                    s.summary.additional_properties.get("twophase.checkpoint-id") if s.summary else None
                    for s in t.snapshots()
                ],
            }
        result["written"][f"equal:{','.join(partition_by)}"] = read["spark"] == read["python"]
        result["expected_rows"] = ROWS

    # a staged write no checkpoint holds (its driver died after it): the lingering cleanup's
    table = f"{ns}.lingering"
    sink = IcebergSink("ice", config(table, ("k",), "spark"))
    sink.validate(_arrow_schema(df))
    staged = sink.stage_with_spark(df, "job-lingering", 5)
    staged_files = [f.path for task in staged.values() for f in task.committable.files]
    deleted = sink.abort_lingering(LingeringScope("job-lingering", "ice", held=(), up_to_checkpoint=5))
    t = pyiceberg.load_table(table)
    result["lingering"] = {
        "staged_tasks": sorted(staged),
        "staged_files": len(staged_files),
        "staged_records": sum(task.records or 0 for task in staged.values()),
        "deleted": deleted,
        "left": sum(1 for f in staged_files if os.path.exists(f.removeprefix("file://"))),
        "visible_rows": t.scan().to_arrow().num_rows,
    }

    # a Spark catalog whose table of that name is another table: refused before any task writes
    other = SqlCatalog("other", uri=uri.replace("@", f":{password}@", 1), warehouse=warehouse)
    other.create_namespace(ns)
    other.create_table(f"{ns}.lingering", pyiceberg.load_table(table).schema())
    wrong = IcebergSink("ice", config(table, ("k",), "spark", catalog="other"))
    try:
        wrong.stage_with_spark(df, "job-wrong", 1)
        result["wrong_catalog"] = "written"
    except ConfigError as e:
        result["wrong_catalog"] = str(e)
    prefix = naming.job_data_prefix(t.location(), naming.job_token("job-wrong", "ice")).removeprefix(
        "file://"
    )
    result["wrong_catalog_files"] = sum(len(files) for _, _, files in os.walk(prefix))
    spark.stop()
    with open(out, "w") as f:
        json.dump(result, f)


def _arrow_schema(df: Any) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema)


if __name__ == "__main__":
    main(sys.argv[1])
