"""Commit outcomes of the PostgreSQL committer against a model of PostgreSQL's prepared transactions.

The model keeps what the server would: the prepared gids (``pg_prepared_xacts``) and the commit
records made visible by COMMIT PREPARED (the rows each prepared transaction inserted). It answers
the committer's statements as PostgreSQL does: 42704 for a gid that does not exist, 55006 for a busy
one, 42501 without the privilege (PostgreSQL docs, "COMMIT PREPARED", "ROLLBACK PREPARED").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from twophase.connectors.postgres import PostgresCommittable, PostgresSinkConfig
from twophase.connectors.postgres.internal import committer as committer_module
from twophase.connectors.postgres.internal.committer import PostgresCommitter
from twophase.connectors.postgres.internal.naming import make_gid
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.outcome import CommitOutcome

CONFIG = PostgresSinkConfig(table="t", password="pw", commit_record_retention=10)


@dataclass
class PreparedTransactionsModel:
    """What the server knows: prepared gids, committed gids (visible commit records), faults."""

    prepared: set[str] = field(default_factory=set)
    committed: set[str] = field(default_factory=set)
    busy: set[str] = field(default_factory=set)
    other_database: set[str] = field(default_factory=set)
    horizon: int | None = None
    down: bool = False
    denied: bool = False
    statements: list[str] = field(default_factory=list)

    def prepare(self, gid: str) -> None:
        self.prepared.add(gid)


class _Result:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class FakeConnection:
    """Answers the committer's statements from the model."""

    def __init__(self, model: PreparedTransactionsModel) -> None:
        self.model = model

    def __enter__(self) -> FakeConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        yield

    def execute(self, query: Any, params: tuple[Any, ...] = ()) -> _Result:
        text = query.as_string(None) if isinstance(query, sql.Composable) else str(query)
        self.model.statements.append(text)
        model = self.model
        for verb in ("COMMIT PREPARED ", "ROLLBACK PREPARED "):
            if text.startswith(verb):
                gid = text[len(verb) :].strip("'")
                if model.denied:
                    raise psycopg.errors.InsufficientPrivilege(
                        "permission denied to finish prepared transaction"
                    )
                if gid in model.other_database:
                    raise psycopg.errors.ObjectNotInPrerequisiteState(
                        "prepared transaction belongs to another database"
                    )
                if gid in model.busy:
                    raise psycopg.errors.ObjectInUse(f'prepared transaction with identifier "{gid}" is busy')
                if gid not in model.prepared:
                    raise psycopg.errors.UndefinedObject(
                        f'prepared transaction with identifier "{gid}" does not exist'
                    )
                model.prepared.discard(gid)
                if verb.startswith("COMMIT"):
                    model.committed.add(gid)
                return _Result([])
        if text.startswith("SELECT 1 FROM") and "WHERE gid = %s" in text:
            pool = model.prepared if "pg_prepared_xacts" in text else model.committed
            return _Result([(1,)] if params[0] in pool else [])
        if text.startswith("SELECT max(CASE WHEN gid = %s"):
            return _Result([(model.horizon,)])
        if text.startswith("INSERT INTO") and text.endswith("ON CONFLICT (gid) DO NOTHING"):
            model.horizon = max(model.horizon or 0, params[3])
            return _Result([])
        if text.startswith("DELETE FROM"):
            return _Result([])
        raise AssertionError(f"unexpected statement {text}")


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[PreparedTransactionsModel]:
    state = PreparedTransactionsModel()

    def connect(config: PostgresSinkConfig, *, autocommit: bool, connector: object = None) -> FakeConnection:
        assert autocommit, "COMMIT/ROLLBACK PREPARED must run outside a transaction block"
        if state.down:
            raise ServiceUnavailableError("PostgreSQL 127.0.0.1:5432/postgres unreachable")
        return FakeConnection(state)

    monkeypatch.setattr(committer_module, "connect", connect)
    yield state


def _committable(checkpoint: int = 1, partition: int = 0) -> PostgresCommittable:
    return PostgresCommittable(make_gid("job", "pg", checkpoint, partition, 0, "0a1b2c3d"), 5)


def test_commit_then_commit_again(model: PreparedTransactionsModel) -> None:
    c = _committable()
    model.prepare(c.gid)
    committer = PostgresCommitter(CONFIG, "pg")
    assert committer.commit(c) is CommitOutcome.COMMITTED
    assert committer.commit(c) is CommitOutcome.ALREADY_COMMITTED
    assert model.committed == {c.gid} and model.prepared == set()


def test_gone_without_a_commit_record_is_lost(model: PreparedTransactionsModel) -> None:
    c = _committable()
    model.prepare(c.gid)
    committer = PostgresCommitter(CONFIG, "pg")
    committer.abort(c)
    committer.abort(c)  # idempotent
    assert committer.commit(c) is CommitOutcome.LOST


def test_abort_all_rolls_back_every_gid_over_one_connection(
    model: PreparedTransactionsModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An aborted checkpoint of many subtasks: one session for all its ROLLBACK PREPAREDs, not a
    connection per transaction (issue #42); idempotent, gids already gone included."""
    cs = [_committable(partition=p) for p in range(4)]
    for c in cs[:3]:
        model.prepare(c.gid)
    connects: list[object] = []
    real = vars(committer_module)["connect"]  # the model's, as the fixture patched it

    def counting(*args: Any, **kwargs: Any) -> Any:
        connects.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(committer_module, "connect", counting)
    committer = PostgresCommitter(CONFIG, "pg")
    committer.abort_all(cs)
    committer.abort_all(cs)
    assert len(connects) == 2 and model.prepared == set() and model.committed == set()


def test_busy_and_unreachable_ask_for_retry(model: PreparedTransactionsModel) -> None:
    c = _committable()
    model.prepare(c.gid)
    committer = PostgresCommitter(CONFIG, "pg")
    model.busy.add(c.gid)
    assert committer.commit(c) is CommitOutcome.RETRY
    model.busy.clear()
    model.down = True
    assert committer.commit(c) is CommitOutcome.RETRY
    with pytest.raises(ServiceUnavailableError):
        committer.abort(c)
    model.down = False
    assert committer.commit(c) is CommitOutcome.COMMITTED


def test_permission_denied_or_another_database_is_fatal_and_commits_nothing(
    model: PreparedTransactionsModel,
) -> None:
    c = _committable()
    model.prepare(c.gid)
    model.denied = True
    assert PostgresCommitter(CONFIG, "pg").commit(c) is CommitOutcome.FATAL
    model.denied = False
    model.other_database.add(c.gid)
    assert PostgresCommitter(CONFIG, "pg").commit(c) is CommitOutcome.FATAL
    assert model.prepared == {c.gid} and model.committed == set()


def test_old_commit_records_are_pruned_only_far_below(model: PreparedTransactionsModel) -> None:
    committer = PostgresCommitter(CONFIG, "pg")
    for checkpoint in (5, 25):
        c = _committable(checkpoint)
        model.prepare(c.gid)
        assert committer.commit(c) is CommitOutcome.COMMITTED
    deletes = [s for s in model.statements if s.startswith("DELETE")]
    # once, at the commit of checkpoint 25: the horizon's old row, the commit records, the seals
    assert [d.split('"')[3] for d in deletes] == ["twophase_commits"] * 2 + ["twophase_commits_sealed"]
    assert all("checkpoint_id < " in d for d in deletes)
    assert model.horizon == 15  # raised in the same transaction, before any record is deleted


@given(st.lists(st.sampled_from(["commit", "abort", "down", "up"]), max_size=12))
def test_outcomes_follow_what_the_server_did(actions: list[str]) -> None:
    model = PreparedTransactionsModel()
    c = _committable()
    model.prepare(c.gid)
    committer = PostgresCommitter(CONFIG, "pg")

    def connect(config: PostgresSinkConfig, *, autocommit: bool, connector: object = None) -> FakeConnection:
        if model.down:
            raise ServiceUnavailableError("down")
        return FakeConnection(model)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(committer_module, "connect", connect)
        for action in actions:
            if action in ("down", "up"):
                model.down = action == "down"
            elif action == "abort":
                try:
                    committer.abort(c)
                except ServiceUnavailableError:
                    assert model.down
            else:
                outcome = committer.commit(c)
                if model.down:
                    assert outcome is CommitOutcome.RETRY
                elif c.gid in model.committed:
                    assert outcome in (CommitOutcome.COMMITTED, CommitOutcome.ALREADY_COMMITTED)
                else:
                    assert outcome is CommitOutcome.LOST
    assert not (c.gid in model.committed and c.gid in model.prepared)


def test_a_batch_commits_over_a_few_sessions_each_gid_decided_on_its_own(
    model: PreparedTransactionsModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#42 item 3: one checkpoint's gids over ``connections`` sessions, outcomes in input order:
    committed now, committed before, rolled back, busy, in another database."""
    sessions: list[FakeConnection] = []
    enter = FakeConnection.__enter__

    def counting(self: FakeConnection) -> FakeConnection:
        sessions.append(self)
        return enter(self)

    monkeypatch.setattr(FakeConnection, "__enter__", counting)
    batch = [_committable(30, p) for p in range(7)]
    for c in batch:
        model.prepare(c.gid)
    committer = PostgresCommitter(CONFIG, "pg")
    assert committer.commit(batch[1]) is CommitOutcome.COMMITTED
    committer.abort(batch[2])
    model.busy.add(batch[3].gid)
    model.other_database.add(batch[4].gid)
    sessions.clear()
    model.statements.clear()
    assert committer.commit_batch(batch, connections=3) == [
        CommitOutcome.COMMITTED,
        CommitOutcome.ALREADY_COMMITTED,
        CommitOutcome.LOST,
        CommitOutcome.RETRY,
        CommitOutcome.FATAL,
        CommitOutcome.COMMITTED,
        CommitOutcome.COMMITTED,
    ]
    assert len(sessions) == 3  # not one per gid
    # commit records pruned once for the batch, not once per gid
    assert sum(s.startswith("INSERT INTO") for s in model.statements) == 1


def test_a_batch_whose_server_is_down_asks_to_retry_every_gid(model: PreparedTransactionsModel) -> None:
    batch = [_committable(2, p) for p in range(5)]
    for c in batch:
        model.prepare(c.gid)
    model.down = True
    committer = PostgresCommitter(CONFIG, "pg")
    assert committer.commit_batch(batch, connections=4) == [CommitOutcome.RETRY] * 5
    model.down = False
    assert committer.commit_batch(batch, connections=4) == [CommitOutcome.COMMITTED] * 5


def test_a_session_that_breaks_asks_to_retry_only_what_it_did_not_decide(
    model: PreparedTransactionsModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = [_committable(2, p) for p in range(4)]
    for c in batch:
        model.prepare(c.gid)
    execute = FakeConnection.execute

    def breaking(self: FakeConnection, query: Any, params: tuple[Any, ...] = ()) -> Any:
        if batch[2].gid in str(query.as_string(None) if isinstance(query, sql.Composable) else query):
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return execute(self, query, params)

    monkeypatch.setattr(FakeConnection, "execute", breaking)
    outcomes = PostgresCommitter(CONFIG, "pg").commit_batch(batch, connections=1)
    assert outcomes == [CommitOutcome.COMMITTED] * 2 + [CommitOutcome.RETRY] * 2
