"""Prepared-transaction ages for Prometheus: a collector that reads ``pg_prepared_xacts`` at every scrape.

A prepared transaction holds its locks and holds back VACUUM's horizon until COMMIT PREPARED or
ROLLBACK PREPARED, and PostgreSQL never ends one by itself, so how many of a job's are pending and
how old the oldest is are worth watching (the runtime also warns at 80% of
``prepared_age_warning_ms``, as it does for Kafka's ``transaction.timeout.ms``).

Families, labelled ``job`` and ``sink``:

- ``twophase_postgres_prepared_transactions``: this job's sink's prepared transactions now;
- ``twophase_postgres_oldest_prepared_transaction_age_seconds``: the age of the oldest (0 if none).

Register it where the job's metrics are served, e.g.
``prometheus_client.REGISTRY.register(PreparedTransactionCollector(sink, job_id))``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from twophase.connectors.postgres.sink import PostgresSink
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


class PreparedTransactionCollector(Collector):
    """Counts and ages of one job's sink's prepared transactions, read at scrape time.

    Args:
        sink: the PostgreSQL sink (its config says where the server is).
        job_id: the job whose gids are counted.

    A scrape while the server is unreachable yields no sample (and logs a warning) rather than
    failing the whole scrape.
    """

    def __init__(self, sink: PostgresSink, job_id: str) -> None:
        self.sink = sink
        self.job_id = job_id

    def collect(self) -> Iterator[Metric]:
        """The two gauge families of the module docstring."""
        try:
            prepared = self.sink.prepared_transactions(self.job_id)
        except ServiceUnavailableError as e:
            log_event(log, logging.WARNING, "prepared transactions not scraped", sink=self.sink.name, error=e)
            return
        labels = [self.job_id, self.sink.name]
        count = GaugeMetricFamily(
            "twophase_postgres_prepared_transactions",
            "Prepared transactions of this job's sink awaiting COMMIT/ROLLBACK PREPARED",
            labels=["job", "sink"],
        )
        count.add_metric(labels, len(prepared))
        oldest = GaugeMetricFamily(
            "twophase_postgres_oldest_prepared_transaction_age_seconds",
            "Age of the oldest of them (locks held, vacuum held back)",
            labels=["job", "sink"],
        )
        oldest.add_metric(labels, max((p.age_ms for p in prepared), default=0.0) / 1000.0)
        yield count
        yield oldest
