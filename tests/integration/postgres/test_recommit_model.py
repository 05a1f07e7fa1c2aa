"""Stateful test on a real PostgreSQL: restores re-commit unmarked checkpoints among later commits,
pruning with changing retentions, rolled-back checkpoints and concurrent prunes (#43 item 1).

Each life is a fresh job and table. Checkpoints commit in order, as the coordinator commits them
(every pending checkpoint ≤ c before c); some leave their newest checkpoint prepared (the driver died
before the commit) or roll it back (a transaction lost: the restore that follows must say LOST, and
a real job stops there). A restore decodes any earlier checkpoint's committables from their JSON,
as a new driver does when the checkpoint's ``_committed`` marker is missing, and re-commits them
with its own retention. Checked after every step, with plain psycopg: every committed checkpoint's
rows exactly once, nothing else; and each re-commit's outcome: ALREADY_COMMITTED for a committed
checkpoint however far the commit records were pruned, COMMITTED for a prepared one, LOST for the
rolled-back newest one.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
from typing import Any

import psycopg
import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg import sql

from twophase.connectors.postgres import PostgresCommittable, PostgresSink, PostgresSinkConfig
from twophase.integration.services.postgres import PostgresServer
from twophase.sinks.context import WriterContext
from twophase.sinks.outcome import CommitOutcome

Conn = psycopg.Connection[tuple[Any, ...]]
_LIVES = itertools.count()
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


class Recommits(RuleBasedStateMachine):
    """One job's sink; see the module docstring."""

    def __init__(self, postgres: PostgresServer, reader: Conn) -> None:
        super().__init__()
        life = next(_LIVES)
        self.postgres, self.reader = postgres, reader
        self.job, self.table = f"pg-recommit-model-{life}", f"recommit_model_{life}"
        reader.execute(
            sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, name text)").format(sql.Identifier(self.table))
        )
        self.retention = 10
        self.next_checkpoint = 1
        self.stored: dict[int, list[dict[str, Any]]] = {}  # checkpoint -> its committables' JSON
        self.state: dict[int, str] = {}  # checkpoint -> committed | prepared | rolled back

    def _sink(self) -> PostgresSink:
        fields: dict[str, Any] = {**self.postgres.endpoint.sink_fields(), "table": self.table}
        sink = PostgresSink("pg", PostgresSinkConfig(**fields, commit_record_retention=self.retention))
        sink.validate(SCHEMA)
        return sink

    @staticmethod
    def _ids(checkpoint: int, partition: int) -> list[int]:
        return [checkpoint * 100 + partition * 10 + i for i in range(2)]

    def _prepare(self, sink: PostgresSink, checkpoint: int, partitions: int) -> list[PostgresCommittable]:
        out = []
        for partition in range(partitions):
            txn = sink.begin_transaction(
                WriterContext(self.job, sink.name, checkpoint, partition, 0, partitions)
            )
            ids = self._ids(checkpoint, partition)
            sink.write(txn, pa.record_batch({"id": pa.array(ids, pa.int64()), "name": [str(i) for i in ids]}))
            committable = sink.pre_commit(txn)
            assert committable is not None
            out.append(committable)
        return out

    def _commit_pending(self, sink: PostgresSink) -> None:
        # the coordinator commits every pending checkpoint <= c before c
        for checkpoint, state in sorted(self.state.items()):
            if state == "prepared":
                for c in self.stored[checkpoint]:
                    assert sink.recover_and_commit(sink.decode(c)) is CommitOutcome.COMMITTED
                self.state[checkpoint] = "committed"

    @precondition(lambda self: "rolled back" not in self.state.values())
    @rule(
        count=st.integers(1, 6),
        partitions=st.integers(1, 3),
        last=st.sampled_from(["commit", "commit in parallel", "leave prepared", "roll back"]),
    )
    def checkpoints(self, count: int, partitions: int, last: str) -> None:
        """``count`` checkpoints commit in order; the last one as ``last`` says."""
        sink = self._sink()
        self._commit_pending(sink)
        for n in range(count):
            checkpoint = self.next_checkpoint
            self.next_checkpoint += 1
            committables = self._prepare(sink, checkpoint, partitions)
            self.stored[checkpoint] = [json.loads(json.dumps(sink.encode(c))) for c in committables]
            how = last if n == count - 1 else "commit"
            if how == "commit":
                assert all(sink.commit(c) is CommitOutcome.COMMITTED for c in committables)
            elif how == "commit in parallel":  # the partitions' commits prune at the same time
                with concurrent.futures.ThreadPoolExecutor(len(committables)) as pool:
                    outcomes = list(pool.map(sink.commit, committables))
                assert outcomes == [CommitOutcome.COMMITTED] * len(committables)
            elif how == "roll back":
                for c in committables:
                    sink.abort(c)
            self.state[checkpoint] = {"leave prepared": "prepared", "roll back": "rolled back"}.get(
                how, "committed"
            )

    @rule(retention=st.integers(10, 25))
    def new_driver_with_retention(self, retention: int) -> None:
        self.retention = retention

    @precondition(lambda self: bool(self.state))
    @rule(data=st.data())
    def restore_unmarked(self, data: st.DataObject) -> None:
        """A new driver re-commits a checkpoint whose marker is missing."""
        # not one already reported LOST and ignored: below the pruning horizon it would count as
        # committed (commits come in checkpoint order; DESIGN.md §12)
        choices = sorted(c for c, state in self.state.items() if state != "lost, ignored")
        if not choices:
            return
        checkpoint = data.draw(st.sampled_from(choices), label="checkpoint")
        sink = self._sink()
        outcomes = [sink.recover_and_commit(sink.decode(c)) for c in self.stored[checkpoint]]
        expected = {
            "committed": CommitOutcome.ALREADY_COMMITTED,
            "prepared": CommitOutcome.COMMITTED,
            "rolled back": CommitOutcome.LOST,
        }[self.state[checkpoint]]
        assert outcomes == [expected] * len(outcomes), (checkpoint, self.state[checkpoint], outcomes)
        if self.state[checkpoint] == "prepared":
            self.state[checkpoint] = "committed"
        elif self.state[checkpoint] == "rolled back":
            # the restore reports it LOST; going on is the user's ignore_lost_on_recovery
            self.state[checkpoint] = "lost, ignored"

    @invariant()
    def rows_exactly_once(self) -> None:
        rows = self.reader.execute(
            sql.SQL("SELECT id, count(*) FROM {} GROUP BY id").format(sql.Identifier(self.table))
        ).fetchall()
        expected = {
            i: 1
            for checkpoint, state in self.state.items()
            if state == "committed"
            for partition in range(len(self.stored[checkpoint]))
            for i in self._ids(checkpoint, partition)
        }
        assert {int(i): int(n) for i, n in rows} == expected

    def teardown(self) -> None:
        # roll back what a life left prepared, so that the server's slots do not run out
        prefix = f"twophase.{self.job}."
        for (gid,) in self.reader.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, %s)", (prefix,)
        ).fetchall():
            self.reader.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


def test_restores_of_unmarked_checkpoints(postgres: PostgresServer, reader: Conn) -> None:
    class OnTheServer(Recommits):
        def __init__(self) -> None:
            super().__init__(postgres, reader)

    run_state_machine_as_test(
        OnTheServer,
        settings=settings(
            max_examples=25,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
