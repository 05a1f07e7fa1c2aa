"""A batch twophase Job writing a small DataFrame into PostgreSQL, run as its own process by
``test_postgres_spark.py`` so that a fault point can kill a real Python worker and Spark retries
the task (``local[2,4]``).

    python spark_job.py --table T --job J --checkpoint-dir D [--rows N]

The server comes from ``TWOPHASE_TEST_POSTGRES`` (a JSON object of PostgresSinkConfig connection
fields, password included: kept out of the command line). Prints one JSON line with the outcome.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the job; print ``{"state": ..., "records": ...}``."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--table", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--rows", type=int, default=200)
    p.add_argument("--mode", default="append")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    from twophase import Job, PostgresSink, PostgresSinkConfig

    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("twophase-postgres-job")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows = [(i, f"name-{i}") for i in range(args.rows)]
    df = spark.createDataFrame(rows, "id long, name string").repartition(2, "id")
    fields = json.loads(os.environ["TWOPHASE_TEST_POSTGRES"])
    config = PostgresSinkConfig(table=args.table, mode=args.mode, **fields)
    result = Job(spark, args.job, args.checkpoint_dir).sink(PostgresSink("pg", config)).write(df)
    print(json.dumps({"state": result.state.value, "epochs": len(result.epochs)}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
