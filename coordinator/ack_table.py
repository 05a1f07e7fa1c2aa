"""An epoch's acknowledgements as one Arrow table, checked in Arrow compute (issue #42).

Spark hands the driver every task's acknowledgement rows at once (``DataFrame.toArrow``); the
checks that hold for every row — each names a sink of the job, is expected by the checkpoint, and
is the first of its (sink, partition) — run as Arrow kernels over the whole table rather than as a
Python pass per row. Only the exceptions become Python objects: a later attempt of a (sink,
partition) (a zombie or speculative attempt, or a retried task whose predecessor also answered),
whose transaction the epoch aborts. Which of several attempts is acknowledged follows arrival
order, as before: the first row of a (sink, partition) in the table (Spark returns exactly one
successful attempt per partition; the Python data source's commit messages may hold more).

The payloads are not decoded at intake (the sink's object is made at commit, issue #42), so what
decoding there used to catch is checked here for the whole table, before anything is recorded:
the rows come from executors of this driver's release (:func:`check_release`), and every payload
is JSON text of one object whose ``kind`` and ``version`` its sink's codec reads
(:func:`check_payloads`, parsed by Arrow's JSON reader, not per row in Python).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from twophase.coordinator.acknowledgement import ACK_SCHEMA, RELEASE
from twophase.sinks.errors import CommittableDecodeError, JobError

KEY = ["sink", "partition"]
"""The columns that name a subtask."""

_ROW = "__row"


def normalized(table: pa.Table) -> pa.Table:
    """``table`` with exactly :data:`~twophase.coordinator.acknowledgement.ACK_SCHEMA`'s columns,
    in its order and types (Spark may hand ``large_binary`` or ``large_string`` columns, e.g. with
    ``spark.sql.execution.arrow.useLargeVarTypes``), the same rows in the same order; the columns of
    :data:`_ONE_CHUNK` in one chunk each, the others as received (possibly one chunk per task).

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
    picked = table.select(ACK_SCHEMA.names)
    if not picked.schema.equals(ACK_SCHEMA):
        try:
            picked = picked.cast(ACK_SCHEMA)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise JobError(
                f"the tasks' acknowledgements have the schema {picked.schema} where {ACK_SCHEMA} is needed: "
                "the executors run another twophase release than the driver; install the same on both"
            ) from e
    if all(c.num_chunks <= 1 for c in picked.columns):
        return picked
    # Spark hands one chunk per task, and kernels, sorts and to_pylist pay per chunk; joining the
    # chunks costs per chunk and column too (~1.7 µs each), so only the columns the intake sorts,
    # groups or reads per row are joined; a column null on every row (``in_progress`` of stateless
    # sinks) becomes one null array, and the rest stay as received: ``release`` (one kernel) and
    # ``write_ms`` (read only on the rare paths) (issue #42)
    n = picked.num_rows
    nulls = {name for name in _ONE_CHUNK if picked[name].null_count == n}
    joined = picked.select([name for name in _ONE_CHUNK if name not in nulls]).combine_chunks()
    columns: list[pa.Array | pa.ChunkedArray] = []
    for field in ACK_SCHEMA:
        if field.name in nulls:
            columns.append(pa.nulls(n, field.type))
        elif field.name in _ONE_CHUNK:
            columns.append(joined[field.name])
        else:
            columns.append(picked[field.name])
    return pa.Table.from_arrays(columns, schema=ACK_SCHEMA)


_ONE_CHUNK = ("sink", "partition", "attempt", "committable", "in_progress", "records")
"""The columns :func:`normalized` hands as one chunk each (the intake sorts, groups or reads them
per row); the others may stay chunked."""


def unknown_sinks(table: pa.Table, sinks: Collection[str]) -> list[str]:
    """The sink names in ``table`` that are not in ``sinks``, sorted (empty when every row's is)."""
    known = pc.is_in(table["sink"], value_set=pa.array(sorted(sinks), pa.string()))
    if pc.all(known).as_py() is not False:
        return []
    return sorted(set(table.filter(pc.invert(known))["sink"].to_pylist()))


def check_release(table: pa.Table, release: str = RELEASE) -> None:
    """Every row of a :func:`normalized` table was made by an executor running ``release``.

    Raises:
        JobError: some rows come from another release (names them and what to reinstall).
    """
    same = pc.fill_null(pc.equal(table["release"], pa.scalar(release, pa.string())), False)
    if table.num_rows == 0 or pc.all(same).as_py():
        return
    other = sorted({str(r) for r in pc.unique(table.filter(pc.invert(same))["release"]).to_pylist()})
    raise JobError(
        f"the executors run twophase {', '.join(other)} and this driver twophase {release}: their "
        f"committables may not decode here; install twophase {release} on the executors (the same "
        "release on the driver and its executors)"
    )


@dataclass(frozen=True)
class CodecHeader:
    """What a sink's codec reads: payloads of ``kind`` at one of ``versions`` (their ``kind`` and
    ``version`` fields, :class:`~twophase.sinks.codec.CommittableCodec`)."""

    kind: str
    versions: frozenset[int]


_HEADER = pa.schema([("kind", pa.string()), ("version", pa.int64())])


def payload_headers(payloads: pa.Array) -> pa.Table:
    """The ``kind`` and ``version`` of every payload (non-null binary), one row each, in order:
    parsed by Arrow's JSON reader, which reads each whole, so a payload that is not JSON fails.
    A payload the reader refuses (not JSON, not an object, a mistyped field, or JSON only Python
    reads, such as ``NaN``) is parsed again in Python, row by row, to say which.

    Raises:
        CommittableDecodeError: a payload is not JSON text of one object (names its row).
    """
    if len(payloads) == 0:
        return _HEADER.empty_table()
    joined = pc.binary_join(
        pa.ListArray.from_arrays(pa.array([0, len(payloads)], pa.int32()), payloads),
        pa.scalar(b"\n", pa.binary()),
    )[0].as_buffer()
    options = pj.ParseOptions(explicit_schema=_HEADER, unexpected_field_behavior="ignore")
    try:
        headers = pj.read_json(
            pa.BufferReader(joined), read_options=pj.ReadOptions(block_size=1 << 26), parse_options=options
        )
        if headers.num_rows == len(payloads):
            return headers
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    return _python_headers(payloads)


def _python_headers(payloads: pa.Array) -> pa.Table:
    kinds: list[str | None] = []
    versions: list[int | None] = []
    for i, raw in enumerate(payloads.to_pylist()):
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise CommittableDecodeError(f"payload #{i} is not JSON ({e}): {raw[:120]!r}") from e
        if type(obj) is not dict:
            raise CommittableDecodeError(f"payload #{i} is not a JSON object: {raw[:120]!r}")
        kind, version = obj.get("kind"), obj.get("version")
        kinds.append(kind if type(kind) is str else None)
        versions.append(version if type(version) is int else None)
    return pa.table([pa.array(kinds, pa.string()), pa.array(versions, pa.int64())], schema=_HEADER)


def check_payloads(table: pa.Table, codecs: Mapping[str, CodecHeader]) -> None:
    """Every payload of a :func:`normalized` table is JSON text of one object whose ``kind`` and
    ``version`` its sink's codec reads (``codecs``: sink → its codec's header; a sink not in it is
    only checked for JSON). Two Arrow kernels per sink over the parsed headers, no decode.

    Raises:
        CommittableDecodeError: a payload is not JSON of one object, or of another kind or a
            version the sink's codec does not read (names the sink, the partition and what to
            reinstall): nothing may be recorded.
    """
    present = pc.is_valid(table["committable"])
    rows = table.select(["sink", "partition", "committable"])  # not the columns left in chunks
    rows = rows.filter(present) if present.null_count or not pc.all(present).as_py() else rows
    if rows.num_rows == 0:
        return
    try:
        headers = payload_headers(rows["committable"].combine_chunks())
    except CommittableDecodeError as e:
        raise CommittableDecodeError(f"an acknowledgement's committable does not decode: {e}") from None
    for sink, want in codecs.items():
        mine = pc.equal(rows["sink"], pa.scalar(sink, pa.string()))
        good = pc.and_(
            pc.equal(headers["kind"], pa.scalar(want.kind, pa.string())),
            pc.is_in(headers["version"], value_set=pa.array(sorted(want.versions), pa.int64())),
        )
        bad = pc.and_(mine, pc.invert(pc.fill_null(good, False)))
        if not pc.any(bad).as_py():
            continue
        i = pc.index(bad, True).as_py()
        kind, version = headers["kind"][i].as_py(), headers["version"][i].as_py()
        raise CommittableDecodeError(
            f"sink {sink!r} partition {rows['partition'][i].as_py()}: a committable of kind {kind!r} "
            f"version {version!r}, where this driver's codec reads kind {want.kind!r} versions "
            f"{sorted(want.versions)}: the executors run another build of the sink than the driver; "
            "install the same twophase (and connector) release on both"
        )


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
    # the key columns only: grouping scans every column of its table, chunk by chunk
    numbered = table.select(KEY).append_column(_ROW, pa.array(range(table.num_rows), pa.int64()))
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


def key_table_of(parts_of: Mapping[str, Collection[int]]) -> pa.Table:
    """sink → its partitions as the two-column table of :func:`key_table` (rows grouped by sink):
    one array per sink, without a Python tuple per (sink, partition) (issue #42)."""
    sinks = [pa.repeat(pa.scalar(s, pa.string()), len(parts)) for s, parts in parts_of.items()]
    partitions = [pa.array(list(parts), pa.int32()) for parts in parts_of.values()]
    if not sinks:
        return key_table(())
    return pa.table({"sink": pa.concat_arrays(sinks), "partition": pa.concat_arrays(partitions)})


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
