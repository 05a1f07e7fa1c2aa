"""A batch twophase Job writing a small DataFrame into an Iceberg table on MinIO, run as its own
process by ``test_iceberg_spark.py`` so that a fault point can kill a real Python worker and Spark
retries the task (``local[2,4]``).

    python spark_job.py --catalog C --warehouse W --job J --checkpoint-dir D [--rows N]

The S3 endpoint comes from ``TWOPHASE_TEST_S3`` (a JSON object: endpoint_url, access_key_id,
secret_access_key, region; kept out of the command line). Prints one JSON line with the outcome.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the job; print ``{"state": ..., "epochs": ...}``."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--catalog", required=True)
    p.add_argument("--warehouse", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--rows", type=int, default=200)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    from twophase import IcebergSink, IcebergSinkConfig, Job, S3Options

    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("twophase-iceberg-job")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.sql(
        f"SELECT id, IF(id % 2 = 0, 'us', 'eu') AS region, "
        f"timestamp_seconds(1709280000 + (id % 3) * 86400) AS ts "
        f"FROM range({args.rows})"
    ).repartition(2, "id")
    config = IcebergSinkConfig(
        table="db.orders",
        catalog_uri=args.catalog,
        warehouse=args.warehouse,
        create_table=True,
        partition_by=("region", "day(ts)"),
        storage_options=S3Options(**json.loads(os.environ["TWOPHASE_TEST_S3"])),
        lingering_grace_ms=0,
    )
    result = Job(spark, args.job, args.checkpoint_dir).sink(IcebergSink("lake", config)).write(df)
    print(json.dumps({"state": result.state.value, "epochs": len(result.epochs)}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
