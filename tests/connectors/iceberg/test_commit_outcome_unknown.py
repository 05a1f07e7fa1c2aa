"""A commit whose answer is lost: the catalog may have applied it, the client cannot tell.

Found by the model-based protocol test (``support.iceberg_model``): a recovery commit that met a
REST catalog's ``CommitStateUnknownException`` answered FATAL and failed the restore, although the
committer's re-check of the snapshot summaries makes another attempt safe. The SQL catalog's
broken connection (SQLAlchemy's ``OperationalError``) went the same way; a reset socket (an
``OSError``) already answered RETRY.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitStateUnknownException
from pyiceberg.table import CommitTableResponse
from sqlalchemy.exc import OperationalError

from twophase.connectors.iceberg import IcebergSink
from twophase.sinks.outcome import CommitOutcome

from .conftest import rows
from .test_sink import JOB, ids, pre_commit, reader

LOST_ANSWERS: dict[str, Callable[[], Exception]] = {
    "rest_state_unknown": lambda: CommitStateUnknownException("504 Gateway Timeout"),
    "sql_connection_lost": lambda: OperationalError(
        "UPDATE iceberg_tables", {}, Exception("server closed the connection unexpectedly")
    ),
}


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not_applied"])
@pytest.mark.parametrize("answer", sorted(LOST_ANSWERS))
def test_a_commit_whose_answer_is_lost_is_retried_and_lands_once(
    sink: IcebergSink, monkeypatch: pytest.MonkeyPatch, answer: str, applied: bool
) -> None:
    ours = pre_commit(sink, 1, [rows(0, 4)])
    original = SqlCatalog.commit_table
    lost: list[bool] = []

    def answer_lost(self: SqlCatalog, *args: object, **kwargs: object) -> CommitTableResponse:
        if not lost:
            lost.append(True)
            if applied:
                original(self, *args, **kwargs)  # type: ignore[arg-type]
            raise LOST_ANSWERS[answer]()
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SqlCatalog, "commit_table", answer_lost)
    assert sink.commit_checkpoint(1, ours) is CommitOutcome.RETRY
    again = sink.commit_checkpoint(1, ours)
    assert again is (CommitOutcome.ALREADY_COMMITTED if applied else CommitOutcome.COMMITTED)
    assert ids(sink.config) == [0, 1, 2, 3]
    assert len(reader(sink.config).metadata.snapshots) == 1
    assert sink.last_committed_checkpoint(JOB) == 1
