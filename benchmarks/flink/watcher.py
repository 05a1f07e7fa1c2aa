"""The Flink comparison's watcher, a process of its own (issue #44 item 1): it samples what a
writer has made visible and what the writer's engine has spent, so that neither engine's process
hosts the measure of the other.

Every ``--interval-s`` it appends one :class:`~benchmarks.flink.analysis.Sample` as a JSON line
to ``--out``: the sink topic's summed high watermarks and last stable offsets (Kafka's
``ListOffsets`` at ``read_uncommitted`` and ``read_committed``, KIP-98; the latter less the
commit markers, so that it counts records; ``--no-transactions`` for a producer that writes
none), the committed Parquet
objects under the S3 prefix (count, bytes and rows from each new object's footer; in-progress
multipart uploads are not objects yet) and the CPU-seconds of a process tree read from ``/proc``
(user + system of the root and its descendants, children already reaped included, minus the
``--exclude`` subtrees). A sample the broker or the store fails is skipped, and the next tick
samples again, until sampling has failed for :data:`FAILING_FOR_S`. It stops on SIGTERM or SIGINT.
Endpoints come from the environment
(``TWOPHASE_KAFKA_BOOTSTRAP``, ``TWOPHASE_S3_*``).

    python -m benchmarks.flink.watcher --out samples.jsonl --pid 1234 --topic T --partitions 3 \
        --bucket B --prefix P
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Collection
from pathlib import Path
from types import FrameType
from typing import Any

import click

from benchmarks.flink.analysis import Sample

log = logging.getLogger(__name__)

TICKS = os.sysconf("SC_CLK_TCK")
FAILING_FOR_S = 120.0
"""The watcher ends (with the error) once sampling has failed for this long; a failed sample is
skipped and the next tick samples again (a sample is a reading, not an operation to retry)."""


def _stat(pid: int) -> tuple[int, float] | None:
    """``(ppid, cpu ticks)`` of ``pid`` from ``/proc/<pid>/stat`` (None once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return int(fields[1]), float(sum(int(f) for f in fields[11:15]))  # utime stime cutime cstime


def process_table() -> dict[int, tuple[int, float]]:
    """Every process now: pid → ``(ppid, cpu ticks)``."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (s := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = s
    return stats


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from ``/proc``)."""
    return [child for child, (ppid, _) in process_table().items() if ppid == pid]


def tree_cpu_s(roots: Collection[int], exclude: Collection[int] = ()) -> float:
    """CPU-seconds of ``roots`` and their descendants (each process once), the subtrees of
    ``exclude`` left out."""
    stats = process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    total, todo = 0.0, list(roots)
    while todo:
        pid = todo.pop()
        if pid in exclude or pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return total / TICKS


class Watch:
    """What one watcher samples: the topic's offsets, the prefix's objects, the tree's CPU."""

    def __init__(
        self,
        pids: Collection[int],
        exclude: Collection[int],
        topic: str | None,
        partitions: int,
        bucket: str | None,
        prefix: str | None,
        transactional: bool = True,
    ) -> None:
        from twophase.integration.jobs.flights_endpoints import FlightsEndpoints
        from twophase.integration.services.launcher import env_kafka_bootstrap, env_s3_endpoint

        self.pids, self.exclude = tuple(pids), set(exclude)
        self.topic, self.partitions, self.bucket, self.prefix = topic, partitions, bucket, prefix
        bootstrap, s3 = env_kafka_bootstrap(), env_s3_endpoint()
        self._admin: Any = None
        if topic is not None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._s3: Any = None
        self._fs: Any = None
        if bucket is not None and s3 is not None:
            from twophase.integration.verify import s3_filesystem

            self._s3 = s3.boto3_client()
            self._fs = s3_filesystem(FlightsEndpoints(bootstrap or "", s3))
        self._objects: dict[str, tuple[int, int]] = {}  # key → (bytes, rows)
        self._lso: dict[int, int] = {}
        self._markers: dict[int, int] = {}
        self._transactional = transactional

    def _offsets(self) -> tuple[int, int]:
        """The summed high watermarks, and the records visible ``read_committed``: the summed last
        stable offsets less one commit marker per rise of a partition's LSO (a commit writes one
        marker into each partition its transaction wrote; two commits within one sample count
        one marker, an error of at most one record per partition); a producer without
        transactions writes no markers, and its LSO is its high watermark."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if self._admin is None or self.topic is None:
            return 0, 0
        spec = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in range(self.partitions)}
        ends = []
        for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
            futures = self._admin.list_offsets(spec, isolation_level=level, request_timeout=10)
            ends.append({tp.partition: f.result().offset for tp, f in futures.items()})
        hw, lso = ends
        for p, offset in lso.items():
            if self._transactional and offset > self._lso.get(p, 0):
                self._markers[p] = self._markers.get(p, 0) + 1
            self._lso[p] = offset
        return sum(hw.values()), sum(lso.values()) - sum(self._markers.values())

    def _objects_now(self) -> tuple[int, int, int]:
        import pyarrow.parquet as pq

        if self._s3 is None:
            return 0, 0, 0
        for page in self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + "/"
        ):
            for o in page.get("Contents", []):
                key = o["Key"]
                parts = key[len(self.prefix) + 1 :].split("/")
                if key in self._objects or any(p.startswith(("_", ".")) for p in parts):
                    continue
                try:
                    with self._fs.open_input_file(f"{self.bucket}/{key}") as f:
                        rows = pq.read_metadata(f).num_rows
                except (OSError, ValueError) as e:  # not Parquet: counted as a file without rows
                    log.warning("watcher: %s is no Parquet file (%s)", key, e)
                    rows = 0
                self._objects[key] = (int(o["Size"]), rows)
        values = self._objects.values()
        return sum(r for _, r in values), len(self._objects), sum(b for b, _ in values)

    def sample(self) -> Sample:
        """One sample now."""
        hw, lso = self._offsets()
        rows, files, size = self._objects_now()
        return Sample(time.time(), hw, lso, rows, files, size, round(tree_cpu_s(self.pids, self.exclude), 3))


@click.command()
@click.option("--out", type=click.Path(path_type=Path), required=True, help="samples, one JSON line each")
@click.option(
    "--pid", "pids", type=int, multiple=True, required=True, help="a root of the engine's process tree"
)
@click.option("--exclude", type=int, multiple=True, help="subtrees left out of the CPU sum")
@click.option("--topic", default=None, help="the sink topic (Kafka sink)")
@click.option("--partitions", type=int, default=3, show_default=True)
@click.option("--bucket", default=None, help="the S3 sink's bucket")
@click.option("--prefix", default=None, help="the S3 sink's prefix")
@click.option("--interval-s", type=float, default=0.1, show_default=True)
@click.option(
    "--transactional/--no-transactions",
    default=True,
    show_default=True,
    help="whether the sink topic's producer commits transactions (each commit writes a marker)",
)
def main(
    out: Path,
    pids: tuple[int, ...],
    exclude: tuple[int, ...],
    topic: str | None,
    partitions: int,
    bucket: str | None,
    prefix: str | None,
    interval_s: float,
    transactional: bool,
) -> None:
    """Sample until SIGTERM; see the module docstring."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watch = Watch(pids, {*exclude, os.getpid()}, topic, partitions, bucket, prefix, transactional)
    failing_since: float | None = None
    with out.open("a") as f:
        while not stop.is_set():
            started = time.monotonic()
            try:
                sample = watch.sample()
            except Exception as e:  # a request the broker or the store failed: the next tick samples again
                failing_since = failing_since or started
                log.warning("watcher: no sample this tick (%s)", e)
                if started - failing_since > FAILING_FOR_S:
                    raise
            else:
                failing_since = None
                f.write(json.dumps(dataclasses.asdict(sample)) + "\n")
                f.flush()
            stop.wait(max(0.0, interval_s - (time.monotonic() - started)))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
