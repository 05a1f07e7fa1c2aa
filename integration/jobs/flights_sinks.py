"""The flights job's three sinks: each takes its own projection of the shared batch and counts its commits.

The job computes one DataFrame holding both the Kafka record columns (``flight_id`` as the key,
``value`` as JSON built by Spark's ``to_json``) and the typed columns. Each connector takes its
projection by configuration (DESIGN.md §6): the Kafka sink reads its key/value columns, the S3 and
Delta sinks their ``columns`` (an Arrow ``RecordBatch.select`` per batch, zero-copy; nothing runs
per record in Python, DESIGN.md §10). The Delta sink writes Spark's zoned timestamps (labelled
with the session time zone) as Delta ``timestamp`` itself.

The classes here only add driver-side :class:`SinkCounters` (what the ``demo`` progress display and
summary table show): transactions committed and aborted, checkpoints committed, records committed
and time spent committing. Commits run on the driver's committer, one at a time, so plain
counters suffice.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig
from twophase.connectors.kafka import KafkaCommittable, KafkaSink, KafkaSinkConfig
from twophase.connectors.s3 import S3Committable, S3Sink, S3SinkConfig
from twophase.connectors.s3 import naming as s3_naming
from twophase.sinks.context import LingeringScope
from twophase.sinks.outcome import CommitOutcome

_DONE = (CommitOutcome.COMMITTED, CommitOutcome.ALREADY_COMMITTED)


@dataclass
class SinkCounters:
    """What one sink did on the driver, in this process.

    Attributes:
        checkpoints: ids of the checkpoints whose transactions this sink committed (or found committed).
        transactions_committed: transactions committed now (``COMMITTED``).
        transactions_already_committed: transactions found committed earlier (recovery, replays).
        transactions_aborted: transactions aborted (``abort``) plus lingering ones aborted.
        records_committed: records in the transactions committed now.
        commit_seconds: wall time spent in commit calls, seconds.
    """

    checkpoints: set[int] = field(default_factory=set)
    transactions_committed: int = 0
    transactions_already_committed: int = 0
    transactions_aborted: int = 0
    records_committed: int = 0
    commit_seconds: float = 0.0

    def record_commit(
        self, outcome: CommitOutcome, checkpoint_id: int, transactions: int, records: int, seconds: float
    ) -> None:
        """Count one commit call's outcome."""
        self.commit_seconds += seconds
        if outcome is CommitOutcome.COMMITTED:
            self.transactions_committed += transactions
            self.records_committed += records
        elif outcome is CommitOutcome.ALREADY_COMMITTED:
            self.transactions_already_committed += transactions
        if outcome in _DONE:
            self.checkpoints.add(checkpoint_id)


class FlightsKafkaSink(KafkaSink):
    """:class:`KafkaSink` with :class:`SinkCounters` (it reads only its key/value columns anyway)."""

    def __init__(self, name: str, config: KafkaSinkConfig) -> None:
        super().__init__(name, config)
        self.counters = SinkCounters()

    def commit(self, committable: KafkaCommittable) -> CommitOutcome:
        started = time.perf_counter()
        outcome = super().commit(committable)
        self.counters.record_commit(
            outcome, committable.checkpoint_id, 1, committable.record_count, time.perf_counter() - started
        )
        return outcome

    def abort(self, committable: KafkaCommittable) -> None:
        super().abort(committable)
        self.counters.transactions_aborted += 1

    def abort_lingering(self, scope: LingeringScope[KafkaCommittable]) -> int:
        n = super().abort_lingering(scope)
        self.counters.transactions_aborted += n
        return n


class FlightsS3Sink(S3Sink):
    """:class:`S3Sink` with :class:`SinkCounters` (it writes ``config.columns``).

    Args:
        name: the sink's name.
        config: the S3 sink's configuration.
    """

    def __init__(self, name: str, config: S3SinkConfig) -> None:
        super().__init__(name, config)
        self.counters = SinkCounters()

    def commit(self, committable: S3Committable) -> CommitOutcome:
        started = time.perf_counter()
        outcome = super().commit(committable)
        checkpoint = _s3_checkpoint(self.config.prefix, committable)
        records = sum(f.record_count for f in committable.files)
        self.counters.record_commit(outcome, checkpoint, 1, records, time.perf_counter() - started)
        return outcome

    def abort(self, committable: S3Committable) -> None:
        super().abort(committable)
        self.counters.transactions_aborted += 1

    def abort_lingering(self, scope: LingeringScope[S3Committable]) -> int:
        n = super().abort_lingering(scope)
        self.counters.transactions_aborted += n
        return n


def _s3_checkpoint(prefix: str, committable: S3Committable) -> int:
    """The checkpoint an S3 committable's files were opened for (from their keys), or -1."""
    for f in committable.files:
        parsed = s3_naming.parse_data_key(prefix, f.key)
        if parsed is not None:
            return parsed.checkpoint_id
    return -1


class FlightsDeltaSink(DeltaSink):
    """:class:`DeltaSink` with :class:`SinkCounters` (it writes ``config.columns``; one Delta
    commit per checkpoint).

    Args:
        name: the sink's name.
        config: the Delta sink's configuration.
    """

    def __init__(self, name: str, config: DeltaSinkConfig) -> None:
        super().__init__(name, config)
        self.counters = SinkCounters()

    def commit_checkpoint(
        self, checkpoint_id: int, committables: Sequence[DeltaCommittable]
    ) -> CommitOutcome:
        started = time.perf_counter()
        outcome = super().commit_checkpoint(checkpoint_id, committables)
        records = sum(c.num_records for c in committables)
        self.counters.record_commit(
            outcome, checkpoint_id, len(committables), records, time.perf_counter() - started
        )
        return outcome

    def abort(self, committable: DeltaCommittable) -> None:
        super().abort(committable)
        self.counters.transactions_aborted += 1

    def abort_lingering(self, scope: LingeringScope[DeltaCommittable]) -> int:
        n = super().abort_lingering(scope)
        self.counters.transactions_aborted += n
        return n
