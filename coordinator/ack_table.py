"""An epoch's acknowledgements as one Arrow table, checked in Arrow compute (issue #42).

Spark hands the driver every task's acknowledgement rows at once (``DataFrame.toArrow``); the
checks that hold for every row — each names a sink of the job, is expected by the checkpoint, and
is the first of its (sink, partition) — run as Arrow kernels over the whole table rather than as a
Python pass per row. Only the exceptions become Python objects: a later attempt of a (sink,
partition) (a zombie or speculative attempt, or a retried task whose predecessor also answered),
whose transaction the epoch aborts. Which of several attempts is acknowledged follows arrival
order, as before: the first row of a (sink, partition) in the table (Spark returns exactly one
successful attempt per partition; the Python data source's commit messages may hold more).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from twophase.coordinator.acknowledgement import ACK_SCHEMA
from twophase.sinks.errors import JobError

KEY = ["sink", "partition"]
"""The columns that name a subtask."""

_ROW = "__row"


def normalized(table: pa.Table) -> pa.Table:
    """``table`` with exactly :data:`~twophase.coordinator.acknowledgement.ACK_SCHEMA`'s columns,
    in its order and types (Spark may hand ``large_binary`` or ``large_string`` columns, e.g. with
    ``spark.sql.execution.arrow.useLargeVarTypes``).

    Raises:
        JobError: a column is missing or cannot be cast (the executors run another release of
            twophase than the driver: reinstall the same version on both).
    """
    missing = [n for n in ACK_SCHEMA.names if n not in table.column_names]
    if missing:
        raise JobError(
            f"the tasks' acknowledgements lack the columns {missing} (columns {table.column_names}): the "
            "executors run another twophase release than the driver; install the same on both"
        )
    # one chunk: Spark hands one per task, and kernels and to_pylist pay per chunk
    picked = table.select(ACK_SCHEMA.names).combine_chunks()
    if picked.schema.equals(ACK_SCHEMA):
        return picked
    try:
        return picked.cast(ACK_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise JobError(
            f"the tasks' acknowledgements have the schema {picked.schema} where {ACK_SCHEMA} is needed: the "
            "executors run another twophase release than the driver; install the same on both"
        ) from e


def unknown_sinks(table: pa.Table, sinks: Collection[str]) -> list[str]:
    """The sink names in ``table`` that are not in ``sinks``, sorted (empty when every row's is)."""
    known = pc.is_in(table["sink"], value_set=pa.array(sorted(sinks), pa.string()))
    if pc.all(known).as_py() is not False:
        return []
    return sorted(set(table.filter(pc.invert(known))["sink"].to_pylist()))


@dataclass(frozen=True)
class FirstAcknowledgements:
    """A table of acknowledgements split by arrival (:func:`split_first`).

    Attributes:
        first: the first row of each (sink, partition), in arrival order.
        later: every other row (a later attempt of a (sink, partition) in ``first``), in arrival
            order: its transaction is not acknowledged and must be aborted.
    """

    first: pa.Table
    later: pa.Table


def split_first(table: pa.Table) -> FirstAcknowledgements:
    """Split ``table`` into the first acknowledgement of each (sink, partition) and the rest."""
    numbered = table.append_column(_ROW, pa.array(range(table.num_rows), pa.int64()))
    firsts = numbered.group_by(KEY, use_threads=False).aggregate([(_ROW, "min")])[f"{_ROW}_min"]
    if len(firsts) == table.num_rows:
        return FirstAcknowledgements(table, table.slice(0, 0))
    is_first = pc.is_in(numbered[_ROW], value_set=firsts)
    return FirstAcknowledgements(table.filter(is_first), table.filter(pc.invert(is_first)))


def key_table(keys: Iterable[tuple[str, int]]) -> pa.Table:
    """(sink, partition) pairs as a two-column table (the ``expected`` side of :func:`unexpected`)."""
    sinks: list[str] = []
    partitions: list[int] = []
    for s, p in keys:
        sinks.append(s)
        partitions.append(p)
    return pa.table({"sink": pa.array(sinks, pa.string()), "partition": pa.array(partitions, pa.int32())})


def unexpected(first: pa.Table, expected: pa.Table) -> list[tuple[str, int]]:
    """The (sink, partition) pairs of ``first`` that ``expected`` (a :func:`key_table`) lacks, sorted."""
    extra = first.select(KEY).join(expected, keys=KEY, join_type="left anti", use_threads=False)
    return sorted(zip(extra["sink"].to_pylist(), extra["partition"].to_pylist(), strict=True))


def records_per_sink(first: pa.Table) -> dict[str, int]:
    """sink → records its acknowledgements wrote (a row that does not say counts 0)."""
    sums = (
        first.select(["sink", "records"]).group_by("sink", use_threads=False).aggregate([("records", "sum")])
    )
    return {
        s: int(n or 0) for s, n in zip(sums["sink"].to_pylist(), sums["records_sum"].to_pylist(), strict=True)
    }
