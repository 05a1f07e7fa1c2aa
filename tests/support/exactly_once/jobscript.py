"""A small twophase job run as its own process by the exactly-once suites, so crashes are real exits.

Input: a folder of Parquet files with one ``id`` column. Output: one JSON-lines file sink per name
in ``--sinks``. Exit status 0 when the job ended as asked, 137 when a fault point fired.

    python -m support.exactly_once.jobscript --root R --job J --mode stream [--sinks a,b]
        [--action finish|stop|savepoint|drain|cancel] [--after-batches N] [--from-savepoint LOC]
        [--write-delay-s S] [--act-after-s S] [--report-imports]

It also runs as ``spark-submit [--py-files twophase.zip] .../jobscript.py ...`` (the cluster test).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from pyspark import cloudpickle

import support.file_sink
from support.file_sink import JsonLinesFileSink, _OpenFile
from twophase.coordinator.spark.job import Job

# On a cluster the executors have the shipped wheel, not the test support: the file sink's class
# travels with the plan, by value
cloudpickle.register_pickle_by_value(support.file_sink)  # type: ignore[no-untyped-call]


class SlowJsonLinesFileSink(JsonLinesFileSink):
    """A file sink whose every write sleeps ``delay_s`` seconds, a batch long enough to interrupt;
    each write first leaves ``writing-c<checkpoint>`` in ``root`` so the driver can act mid-write."""

    def __init__(self, name: str, root: str | Path, delay_s: float) -> None:
        super().__init__(name, root)
        self.delay_s = delay_s

    def write(self, txn: _OpenFile, batch: pa.RecordBatch) -> None:
        (Path(self.root) / f"writing-c{txn.ctx.checkpoint_id}").touch()
        time.sleep(self.delay_s)
        super().write(txn, batch)


def _spark(master: str):  # type: ignore[no-untyped-def]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("twophase-jobscript")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    if master.startswith("spark://"):
        # executors of a standalone cluster do not inherit this process's environment; PySpark takes
        # the executors' Python from PYSPARK_PYTHON (spark-submit sets it from spark.pyspark.python)
        python = os.environ["PYSPARK_PYTHON"]
        builder = builder.config("spark.executor.cores", "1").config("spark.pyspark.python", python)
        for key, value in os.environ.items():
            if key.startswith("TWOPHASE_FAULT"):
                builder = builder.config(f"spark.executorEnv.{key}", value)
    return builder.getOrCreate()


def _where_twophase(_: object) -> tuple[str, str]:
    """On an executor: the file ``twophase`` is imported from and the Python running the task."""
    import twophase

    return os.path.abspath(twophase.__file__ or "?"), sys.executable


def _imports(spark) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Where the driver and the executors (8 small tasks) import ``twophase`` from."""
    import twophase

    found = spark.sparkContext.parallelize(range(8), 8).map(_where_twophase).collect()
    return {"driver": twophase.__file__, "executors": sorted(set(map(tuple, found)))}


def main(argv: list[str] | None = None) -> int:
    """Run the job; print one JSON line with the outcome on success."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", required=True)
    p.add_argument("--job", default="eo")
    p.add_argument("--mode", choices=["batch", "stream"], default="stream")
    p.add_argument("--sinks", default="a")
    p.add_argument("--files-per-trigger", type=int, default=1)
    p.add_argument("--action", choices=["finish", "stop", "savepoint", "drain", "cancel"], default="finish")
    p.add_argument("--after-batches", type=int, default=2)
    p.add_argument("--from-savepoint")
    p.add_argument("--write-delay-s", type=float, default=0.0, help="each sink write sleeps this long")
    p.add_argument("--act-mid-write", action="store_true", help="act once the next batch's slow write began")
    p.add_argument("--master", default="local[2,4]")
    p.add_argument("--report-imports", action="store_true", help="add where twophase is imported from")
    p.add_argument(
        "--checkpoint-dir", help="the job's checkpoints (default <root>/chk): abfss://, gs://, ..."
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    root = Path(args.root)
    spark = _spark(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    extra = {"imports": _imports(spark)} if args.report_imports else {}

    def emit(outcome: Mapping[str, object]) -> None:
        print(json.dumps({**outcome, **extra}), flush=True)

    job = Job(spark, args.job, args.checkpoint_dir or str(root / "chk"), from_savepoint=args.from_savepoint)
    for name in args.sinks.split(","):
        if args.write_delay_s:
            job.sink(SlowJsonLinesFileSink(name, root / "out", args.write_delay_s))
        else:
            job.sink(JsonLinesFileSink(name, root / "out"))
    if args.mode == "batch":
        df = spark.read.parquet(str(root / "input"))
        result = job.write(df)
        emit({"state": result.state.value, "epochs": len(result.epochs)})
        return 0
    df = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", args.files_per_trigger)
        .parquet(str(root / "input"))
    )
    if args.action == "finish":
        handle = job.start(df, spark_checkpoint_location=str(root / "spark"), trigger={"availableNow": True})
        handle.await_termination()
        emit({"state": handle.status.value, "epochs": len(handle.metrics)})
        return 0
    handle = job.start(
        df, spark_checkpoint_location=str(root / "spark"), trigger={"processingTime": "200 milliseconds"}
    )
    while len(handle.metrics) < args.after_batches and not handle.await_termination(0.2):
        pass
    if args.act_mid_write:  # checkpoint ids of a fresh run are the batch numbers, from 1
        while not (root / "out" / f"writing-c{args.after_batches + 1}").exists():
            time.sleep(0.1)
    if args.action == "cancel":
        handle.cancel()
        emit({"state": handle.status.value, "epochs": len(handle.metrics)})
        return 0
    ref = handle.stop(savepoint=args.action in ("savepoint", "drain"), drain=args.action == "drain")
    out = {"state": handle.status.value, "epochs": len(handle.metrics), "location": ref.location}
    emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
