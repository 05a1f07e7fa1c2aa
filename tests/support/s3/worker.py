"""A separate process that runs one S3 sink epoch, for tests that need a NEW process.

Usage: ``python -m support.s3.worker REQUEST.json``; the endpoint and credentials come from
the standard AWS chain (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), as on an executor; never
from argv, which other users can read.

Request (JSON)::

    {"mode": "epoch" | "crash", "config": {S3SinkConfig fields, "rolling": {RollingPolicy fields}},
     "job_id": "...", "sink": "...", "checkpoint_id": 2, "partition": 0, "attempt": 0,
     "restored_state": {...} | null, "rows": [first_id, count], "out": "/path/result.json"}

- ``epoch``: begin (resuming ``restored_state``) → write rows ``{"v": "{\\"id\\": i}"}`` →
  pre_commit → snapshot_in_progress; writes ``{"committable": ..., "state": ...}`` to ``out``.
- ``crash``: the same, then exits with status 137 right after the snapshot, before anything could
  be acknowledged: what it opened is lingering.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pyarrow as pa

from twophase.connectors.s3 import RollingPolicy, S3Sink, S3SinkConfig
from twophase.sinks.context import WriterContext


def rows(first: int, count: int) -> pa.RecordBatch:
    """The test rows ``first .. first+count-1`` as pre-encoded JSON lines (column ``v``)."""
    return pa.record_batch({"v": [json.dumps({"id": i}) for i in range(first, first + count)]})


def config_from_env(fields: dict[str, Any]) -> S3SinkConfig:
    """An S3SinkConfig from request fields; S3 is reached through the environment's AWS chain."""
    fields = dict(fields)
    rolling = RollingPolicy(**fields.pop("rolling", {}))
    return S3SinkConfig(rolling=rolling, **fields)  # storage_options: the AWS chain alone


def main(path: str) -> int:
    with open(path) as f:
        req = json.load(f)
    sink = S3Sink(req["sink"], config_from_env(req["config"]))
    ctx = WriterContext(
        job_id=req["job_id"],
        sink_name=req["sink"],
        checkpoint_id=req["checkpoint_id"],
        partition=req["partition"],
        attempt=req.get("attempt", 0),
        num_partitions=req.get("num_partitions", 1),
        restored_state=req["restored_state"],
    )
    txn = sink.begin_transaction(ctx)
    sink.write(txn, rows(*req["rows"]))
    committable = sink.pre_commit(txn)
    state = sink.snapshot_in_progress(txn)
    if req["mode"] == "crash":
        os._exit(137)  # no abort, no acknowledgement: like kill -9 before the checkpoint completes
    result = {"committable": None if committable is None else sink.encode(committable), "state": state}
    with open(req["out"], "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
