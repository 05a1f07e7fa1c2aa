"""A ``twophase-jsonl`` streaming query over a folder of Parquet files, in-process or as its own process.

Layout under ``root``: ``input/`` (Parquet files, one ``id`` column), ``out/`` (the sink's root),
``chk/`` (the job's checkpoints), ``spark/`` (Spark's checkpoint location). Run as a process by the
crash tests, so that ``TWOPHASE_FAULT`` exits are real::

    python -m support.datasource.streamscript --root R [--job J]
        [--files-per-trigger N] [--master M]

Exit status 0 and one JSON line (``{"batches": n}``) when the query ended; 1 when it failed (e.g. the
commit worker was killed by a fault point); the JSON line then names the error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from support.datasource.jsonl_format import FORMAT, JsonLinesTwoPhase

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

SINK = "jsonl"


def start_query(
    spark: SparkSession,
    root: Path,
    job: str,
    *,
    files_per_trigger: int = 1,
    options: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Start the ``availableNow`` query writing ``root/input`` through the facade (format registered)."""
    df = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(str(root / "input"))
    )
    writer = (
        df.writeStream.format(FORMAT)
        .option("job", job)
        .option("twophaseCheckpointDir", str(root / "chk"))
        .option("outputDir", str(root / "out"))
        .option("sinkName", SINK)
        .option("checkpointLocation", str(root / "spark"))
        .trigger(availableNow=True)
    )
    for key, value in (options or {}).items():
        writer = writer.option(key, value)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    """Run the query once to the end of the available input; print the outcome as JSON."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", required=True)
    p.add_argument("--job", default="ds")
    p.add_argument("--files-per-trigger", type=int, default=1)
    p.add_argument("--master", default="local[2]", help="local[2,4] lets a failed task retry once")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName("twophase-datasource-streamscript")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(JsonLinesTwoPhase)
    query = start_query(spark, Path(args.root), args.job, files_per_trigger=args.files_per_trigger)
    try:
        query.awaitTermination()
    except StreamingQueryException as e:
        print(json.dumps({"error": str(e)[:2000]}), flush=True)
        return 1
    print(json.dumps({"batches": len(query.recentProgress)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
