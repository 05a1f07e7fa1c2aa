"""One committable traced on the driver, from the acknowledgement table's intake to the sink's
commit being entered (issue #42's done-when: at most 12 calls and 4 forms).

The trace is the interpreter's own (``sys.setprofile``): every call of product code between
``CheckpointCoordinator.acknowledge_table`` and the sink's ``commit`` whose arguments or locals
carry the committable — its payload bytes, an Arrow table or binary column holding them, a
``PendingTransaction`` or ``CommittableRecord`` of them, the sink's object, or one of those held,
two holders deep at most: an item of a short list or tuple, a field of a NamedTuple or dataclass, a
value of a mapping (so a mapping of sink to a list of calls) — counts as one call, and the type it
is carried in as its form. The path was far longer: 38 calls in 4 forms when this test was written
(2026-12-03), 33 since the ledger of columns, most of them one Arrow table or one
``PendingTransaction`` handed down the helpers of intake, metadata and commit; 48 in 3 forms since
the columnar path (the ledger blocks hold Arrow columns, a transaction is made only for the commit),
counting the ledger block, a commit call of its rows (``BlockRows``) and the metadata's
``CommittableRows`` as the Arrow tables they are (every method called on one counts, as a
``PendingTransaction``'s always did): 20 of them are those holders' small methods, 10 the intake's
checks in ``ack_table`` and the payload decoder (counted so on 2026-12-03); 32 in 3 forms since the
holders hand what is needed once ("trace42"); 26 since each intake check is handed only the columns
it reads ("header42"); 28 since the commit lanes are grouped by the project's one ``group_lanes``
again; 23 in 2 forms since a block's rows are committed as columns ("cols42": the committables
decoded in bulk from the payload column, no ``PendingTransaction`` unless a row is an exception; the
pending checkpoint keeps its rows without the payloads, which the ledger block holds; a binary
column carrying the payload counts from then on, as "Arrow column", which adds the three calls
handed one: ``normalized``'s column pass, ``LedgerBlock.__init__`` and ``decode_payloads``); 19
since no reader asks a holder its length ("trace42", 2026-12-04: ``normalized`` checks the columns'
chunks in a loop, not a generator resumed per column; the storage writes the metadata's
``CommittableRows`` table as it is and counts its rows there; the completed checkpoint's log line
counts the committables from the tables; ``submit_calls`` sizes a block's call by its rows); 18
since every commit call names its sink (a call of made transactions is a ``TxnCall``, so the lanes
group the calls by their ``sink_name``, not through a function); 21 once the trace also looks into
mappings and dataclass or NamedTuple fields, and two holders deep ("trace12": a mapping of sink to a
list of calls would otherwise hide the calls; it adds three calls that were there unseen:
``PendingCheckpoint.record_table``, handed the intake's blocks by sink, the notification's list of
its calls, made from its mapping of (checkpoint, sink) to call, and ``Lane.__post_init__``, a lane
holding a tuple of calls); 18 since the committer is handed a batch's calls per sink, as the
coordinator's ledgers hold them ("trace12": nothing regroups them, so ``commit_lanes``,
``group_lanes`` and the notification's sorted list of calls are gone; a scratch trace through any
depth of holders fell by the same three); 14 since each step is handed only what it works on
("trace13": ``normalized`` is not handed the payloads, which go to the ledger block as received; a
block's status column, ``RowStatus``, makes the PERSISTED and COMMITTING transitions of its rows,
handed no payload, so ``LedgerBlock.recode`` and ``LedgerBlock.commit_persisted``, handed the block
with its payloads, are gone; a block keeps its committable file's table as the metadata's
``CommittableRows``, made with the block, and the publish hands a block whose rows are all live on
as it is, so ``LedgerBlock.columns`` is gone and ``CommittableRows.__init__`` moved to the block's
making; the scratch trace fell by as many); and 12 ("trace12b", 2026-12-05), the bound: a commit
call none of whose rows was decoded before decodes its payload column without keeping the
committables on the block (``LedgerBlock.committables`` gone from the path), and ``run_lanes``
checks every lane's parallelism before any item starts (``Lane.__post_init__`` gone; a scratch
trace through any depth fell by the same two).

DESIGN.md's walk of one committable is this trace (``test_design_md_walk_is_the_trace``);
``make design-walk`` writes it there.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import pyarrow as pa
from support.clock import ManualClock
from support.fakes import FakeExternalSystem, FakeSink
from support.harness import batch
from support.memory_storage import InMemoryCheckpointStorage

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.state.acknowledgement import Acknowledgement, acknowledgement_table
from twophase.coordinator.state.metadata import CheckpointKind, CommittableRecord, CommittableRows
from twophase.coordinator.state.subtask_lifecycle import BlockRows, LedgerBlock, PendingTransaction
from twophase.sinks.context import WriterContext

JOB = "job"
PRODUCT = Path(__file__).resolve().parents[2]
MAX_CALLS = 12
MAX_FORMS = 4


class Trace:
    """The calls that carry one committable (payload ``payload``, sink object ``committable``),
    in order, until the sink's commit is entered."""

    def __init__(self, payload: bytes, committable: Any) -> None:
        self.payload = payload
        self.committable = committable
        self.calls: list[tuple[str, str]] = []
        self.entered_commit = False

    def form(self, value: Any, depth: int = 0) -> str | None:
        """The form ``value`` carries the committable in, or ``None``; ``depth``: how many
        holders (see :meth:`held`) ``value`` was found in."""
        if isinstance(value, bytes):
            return "bytes" if value == self.payload else None
        if isinstance(value, (PendingTransaction, CommittableRecord)):
            return type(value).__name__ if getattr(value, "payload", None) == self.payload else None
        if isinstance(value, Acknowledgement):
            return "Acknowledgement" if value.committable == self.payload else None
        if isinstance(value, BlockRows):
            value = getattr(value, "block", None)
        if isinstance(value, LedgerBlock):  # the ledger's rows, as Arrow columns (none while it is made)
            payload = getattr(value, "payload", None)
            return "Arrow table" if payload is not None and self.payload in payload.to_pylist()[:4] else None
        if isinstance(value, CommittableRows):
            value = getattr(value, "table", None)
        if isinstance(value, (pa.Table, pa.RecordBatch)) and value.num_rows <= 4:
            for column in ("committable", "payload"):
                if column in value.column_names and self.payload in value[column].to_pylist():
                    return "Arrow table"
            return None
        if isinstance(value, (pa.Array, pa.ChunkedArray)) and len(value) <= 4 and value.type == pa.binary():
            return "Arrow column" if self.payload in value.to_pylist() else None
        if type(value) is type(self.committable):
            return "the sink's committable" if value == self.committable else None
        return self.held(value, depth)

    def held(self, value: Any, depth: int) -> str | None:
        """The form of the committable in what ``value`` holds, two holders deep at most: a short
        list or tuple's items, a NamedTuple's or a dataclass's fields, a mapping's values (a
        mapping of sink to a list of calls carries the calls; so does a dataclass of a tuple)."""
        if depth >= 2:
            return None
        inner: Iterable[Any] = ()
        named_tuple = isinstance(value, tuple) and hasattr(type(value), "_fields")
        if named_tuple or (isinstance(value, (list, tuple)) and len(value) <= 4):
            inner = value
        elif isinstance(value, Mapping):
            inner = list(value.values())
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            inner = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
        return next((f for f in (self.form(x, depth + 1) for x in inner) if f), None)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.entered_commit or event != "call":
            return
        code = frame.f_code
        if code.co_name in ("commit", "commit_batch") and isinstance(frame.f_locals.get("self"), FakeSink):
            self.entered_commit = True
            return
        name = code.co_filename
        if not name.startswith(str(PRODUCT)) or "/tests/" in name or "/.venv/" in name:
            return
        for value in list(frame.f_locals.values()):
            form = self.form(value)
            if form is not None:
                where = Path(code.co_filename).relative_to(PRODUCT)
                self.calls.append((f"{where}:{getattr(code, 'co_qualname', code.co_name)}", form))
                return


WALK_BEGIN = "<!-- the walk of one committable: generated by tests/coordinator/test_committable_trace.py -->"
WALK_END = "<!-- end of the generated walk -->"
WALK_HEADER = "| hop | where (module: function) | form |"


def traced_walk() -> Trace:
    """Trace one committable of one sink through one checkpoint on the driver: acknowledged as a
    table, the checkpoint completed (published), then notified (committed)."""
    system = FakeExternalSystem()
    sink = FakeSink("s0", system)
    clock = ManualClock()
    committer = CommitterOperator(JOB, {"s0": sink}, clock=clock, sleep=clock.sleep)
    storage = InMemoryCheckpointStorage(JOB)
    coord = CheckpointCoordinator(
        JOB, [sink], storage, committer, CheckpointConfig(), clock=clock, fault=lambda p: None
    )
    pc = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    txn = sink.begin_transaction(WriterContext(JOB, "s0", pc.checkpoint_id, 0, 0, 1))
    sink.write(txn, batch(["r"]))
    committable = sink.pre_commit(txn)
    ack = Acknowledgement.of(sink, 0, 0, committable)
    assert ack.committable is not None
    table = acknowledgement_table([ack])
    trace = Trace(ack.committable, committable)
    sys.setprofile(trace)
    try:
        coord.acknowledge_table(pc.checkpoint_id, table)
        coord.complete(pc.checkpoint_id)
        coord.notify_checkpoint_complete(pc.checkpoint_id)
    finally:
        sys.setprofile(None)
    assert trace.entered_commit, "the sink's commit was never entered"
    return trace


def walk_table(calls: list[tuple[str, str]]) -> str:
    """The traced calls as DESIGN.md's walk table: hop, module and function, form."""
    rows = [WALK_HEADER, "|---|---|---|"]
    for i, (where, form) in enumerate(calls):
        module, function = where.split(":", 1)
        rows.append(f"| {i + 1} | `{module}`: `{function}` | {form} |")
    return "\n".join(rows)


def design_walk(text: str) -> str:
    """The walk table between DESIGN.md's markers (the lines from its header to its last row)."""
    start, end = text.index(WALK_BEGIN), text.index(WALK_END)
    lines = text[start:end].splitlines()
    return "\n".join(line for line in lines if line.startswith("|"))


def test_one_committable_reaches_the_sinks_commit_in_at_most_12_calls_and_4_forms() -> None:
    trace = traced_walk()
    forms = {form for _, form in trace.calls}
    walk = "\n".join(f"{i + 1:2}. {where} ({form})" for i, (where, form) in enumerate(trace.calls))
    assert len(trace.calls) <= MAX_CALLS and len(forms) <= MAX_FORMS, (
        f"{len(trace.calls)} calls in {len(forms)} forms {sorted(forms)}:\n{walk}"
    )


def test_design_md_walk_is_the_trace() -> None:
    """DESIGN.md's walk of one committable is this trace, generated, not written by hand:
    ``make design-walk`` (``TWOPHASE_WRITE_WALK=1``) writes it there."""
    generated = walk_table(traced_walk().calls)
    path = PRODUCT / "DESIGN.md"
    text = path.read_text(encoding="utf-8")
    if os.environ.get("TWOPHASE_WRITE_WALK") == "1":
        start = text.index(WALK_BEGIN) + len(WALK_BEGIN)
        text = f"{text[:start]}\n{generated}\n{text[text.index(WALK_END) :]}"
        path.write_text(text, encoding="utf-8")
    assert design_walk(text) == generated, (
        "DESIGN.md's walk of one committable is not the traced one: run `make design-walk`"
    )
