"""A job runtime's metrics for Prometheus: an opt-in HTTP endpoint (``prometheus_client``) that
reads the runtime's own counters at every scrape (``RuntimeConfig(metrics_port=...)``).

Exposed families, each labelled ``job`` (and ``sink`` where per sink):

- ``twophase_sink_transactions_total{outcome}``: transactions ``committed``, found
  ``already_committed``, ``aborted`` (pre-committed, then aborted) and ``lingering_aborted``;
- ``twophase_sink_records_committed_total``, ``twophase_sink_bytes_committed_total`` (sinks that
  report byte counts), ``twophase_sink_commit_seconds_total`` (summed over commit lanes);
- ``twophase_checkpoints_completed_total{kind}``: checkpoint, savepoint, final;
- ``twophase_last_checkpoint_id``, ``twophase_last_checkpoint_persist_seconds``,
  ``twophase_last_checkpoint_commit_seconds``, ``twophase_last_checkpoint_records``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.state.metrics import CheckpointMetrics, SinkMetricsRecorder
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeCollector(Collector):
    """Reads one runtime's metrics at scrape time (nothing is copied between scrapes).

    Attributes:
        job_id: the ``job`` label.
        sink_metrics: the runtime's per-sink recorder.
        checkpoints_completed: returns how many checkpoints the runtime completed, by kind.
        checkpoint_metrics: returns the runtime's kept checkpoint metrics, oldest first.
    """

    job_id: str
    sink_metrics: SinkMetricsRecorder
    checkpoints_completed: Callable[[], Mapping[CheckpointKind, int]]
    checkpoint_metrics: Callable[[], list[CheckpointMetrics]]

    def collect(self) -> Iterator[Metric]:
        """The families of the module docstring."""
        job = self.job_id
        tx = CounterMetricFamily(
            "twophase_sink_transactions", "Transactions by outcome", labels=["job", "sink", "outcome"]
        )
        records = CounterMetricFamily(
            "twophase_sink_records_committed", "Records committed", labels=["job", "sink"]
        )
        size = CounterMetricFamily("twophase_sink_bytes_committed", "Bytes committed", labels=["job", "sink"])
        seconds = CounterMetricFamily(
            "twophase_sink_commit_seconds", "Time in commit calls", labels=["job", "sink"]
        )
        for sink, m in sorted(self.sink_metrics.totals().items()):
            tx.add_metric([job, sink, "committed"], m.transactions_committed)
            tx.add_metric([job, sink, "already_committed"], m.transactions_already_committed)
            tx.add_metric([job, sink, "aborted"], m.transactions_aborted)
            tx.add_metric([job, sink, "lingering_aborted"], m.lingering_aborted)
            records.add_metric([job, sink], m.records_committed)
            if m.bytes_committed is not None:
                size.add_metric([job, sink], m.bytes_committed)
            seconds.add_metric([job, sink], m.commit_ms / 1000.0)
        yield from (tx, records, size, seconds)
        checkpoints = self.checkpoint_metrics()
        completed = CounterMetricFamily(
            "twophase_checkpoints_completed", "Checkpoints completed", labels=["job", "kind"]
        )
        for kind, n in sorted((k.value, n) for k, n in self.checkpoints_completed().items()):
            completed.add_metric([job, kind], n)
        yield completed
        if checkpoints:
            last = checkpoints[-1]
            for name, doc, value in (
                ("twophase_last_checkpoint_id", "The latest completed checkpoint", last.checkpoint_id),
                ("twophase_last_checkpoint_persist_seconds", "Its persist time", last.persist_ms / 1000.0),
                ("twophase_last_checkpoint_commit_seconds", "Its commit time", last.commit_ms / 1000.0),
                ("twophase_last_checkpoint_records", "Records in its epoch", last.records or 0),
            ):
                yield _gauge(name, doc, job, value)


def _gauge(name: str, doc: str, job: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["job"])
    g.add_metric([job], value)
    return g


class MetricsEndpoint:
    """An HTTP server answering ``GET /metrics`` with one collector's families, on its own
    registry (two jobs in one process never clash). Close it to free the port.

    Raises:
        OSError: the port cannot be bound.
    """

    def __init__(self, collector: Collector, port: int, address: str = "127.0.0.1") -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        self._server, self._thread = start_http_server(port, addr=address, registry=registry)
        self.address = address
        self.port = int(self._server.server_port)
        log_event(log, logging.INFO, "metrics served", url=self.url)

    @property
    def url(self) -> str:
        """``http://<address>:<port>/metrics``."""
        return f"http://{self.address}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port. Idempotent."""
        self._server.shutdown()
        self._server.server_close()
