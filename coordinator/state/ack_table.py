"""An epoch's acknowledgements as one Arrow table, checked in Arrow compute (issue #42).

Spark hands the driver every task's acknowledgement rows at once (``DataFrame.toArrow``); the
checks that hold for every row — each names a sink of the job, is expected by the checkpoint, and
is the first of its (sink, partition) — run as Arrow kernels over the whole table rather than as a
Python pass per row. Only the exceptions become Python objects: a later attempt of a (sink,
partition) (a zombie or speculative attempt, or a retried task whose predecessor also answered),
whose transaction the epoch aborts. Which of several attempts is acknowledged follows arrival
order, as before: the first row of a (sink, partition) in the table (Spark returns exactly one
successful attempt per partition; the Python data source's commit messages may hold more).

The payloads are neither decoded nor parsed at intake (the sink's object is made at commit, issue
#42), so what decoding there used to catch is checked here for the whole table, before anything
is recorded: the rows come from executors of this driver's release (:func:`check_release`), and
every payload's codec header — the ``kind`` and ``version`` the executor stamped beside it from
the object it encoded — is one its sink's codec reads (:func:`check_payloads`). Each check, and
:func:`normalized`, is handed only the columns it reads, never the payloads, which the ledger
blocks take as received (issue #42: the trace of one committable).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from twophase.coordinator.state.acknowledgement import ACK_SCHEMA, RELEASE
from twophase.sinks.errors import CommittableDecodeError, JobError

KEY = ["sink", "partition"]
"""The columns that name a subtask."""

_ROW = "__row"


PAYLOAD = "committable"
"""The payloads' column: not :func:`normalized`'s, the intake hands it to the ledger blocks as
received (issue #42: the trace of one committable)."""

ROW_SCHEMA = pa.schema([f for f in ACK_SCHEMA if f.name != PAYLOAD])
""":data:`~twophase.coordinator.state.acknowledgement.ACK_SCHEMA` without the payloads: what
:func:`normalized` returns."""


def normalized(rows: pa.Table, received: pa.Schema) -> pa.Table:
    """The acknowledgements' columns but their payloads: ``rows`` (the table Spark handed, its
    payload column :data:`PAYLOAD` left out: no check reads the payloads, the ledger blocks take
    them as received) with exactly :data:`ROW_SCHEMA`'s columns, in its order and types (Spark may
    hand ``large_binary`` or ``large_string`` columns, e.g. with
    ``spark.sql.execution.arrow.useLargeVarTypes``), the same rows in the same order; the columns
    of :data:`_ONE_CHUNK` in one chunk each, the others as received (possibly one chunk per task).
    ``received``: the schema of the table Spark handed, payload column included, whose type is
    checked here (by its type alone: one the intake can cast to ``binary``).

    Raises:
        JobError: a column (the payloads' included) is missing or cannot be cast (the executors
            run another release of twophase than the driver: reinstall the same version on both).
    """
    present = set(received.names)
    missing = [n for n in ACK_SCHEMA.names if n not in present]
    if missing:
        if "release" in rows.column_names and pa.types.is_string(rows.schema.field("release").type):
            check_release(rows["release"])  # another release: named, as the columns' absence is its
        raise JobError(
            f"the tasks' acknowledgements lack the columns {missing} (columns {received.names}): the "
            "executors run another twophase release than the driver; install the same on both"
        )
    picked = rows.select(ROW_SCHEMA.names)
    payload = received.field(PAYLOAD).type
    if not picked.schema.equals(ROW_SCHEMA) or payload != pa.binary():
        try:
            picked = picked.cast(ROW_SCHEMA)
            pa.nulls(0, payload).cast(pa.binary())  # the payloads' type: cast by the intake
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            schema = pa.schema([received.field(n) for n in ACK_SCHEMA.names])
            raise JobError(
                f"the tasks' acknowledgements have the schema {schema} where {ACK_SCHEMA} is needed: "
                "the executors run another twophase release than the driver; install the same on both"
            ) from e
    for column in picked.columns:
        if column.num_chunks > 1:
            break
    else:  # every column in one chunk (or none): as received
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
    for field in ROW_SCHEMA:
        if field.name in nulls:
            columns.append(pa.nulls(n, field.type))
        elif field.name in _ONE_CHUNK:
            columns.append(joined[field.name])
        else:
            columns.append(picked[field.name])
    return pa.Table.from_arrays(columns, schema=ROW_SCHEMA)


_ONE_CHUNK = ("sink", "partition", "attempt", "in_progress", "records", "kind", "version")
"""The columns :func:`normalized` hands as one chunk each (the intake sorts, groups or reads them
per row); the others may stay chunked. Never the payloads (:data:`PAYLOAD`, not handed to it):
rows that arrive in key order (:func:`in_key_order`) are recorded as slices of the payload
buffers Spark handed over, and a join would copy every payload once more (issue #42: ~200 MB at
10⁵ × 3 sinks)."""


def unknown_sinks(sink: pa.ChunkedArray | pa.Array, sinks: Collection[str]) -> list[str]:
    """The names in the ``sink`` column that are not in ``sinks``, sorted (empty when every row's is)."""
    known = pc.is_in(sink, value_set=pa.array(sorted(sinks), pa.string()))
    if pc.all(known).as_py() is not False:
        return []
    return sorted(set(sink.filter(pc.invert(known)).to_pylist()))


def check_release(releases: pa.ChunkedArray | pa.Array, release: str = RELEASE) -> None:
    """Every row's ``release`` (the column of a :func:`normalized` table) is ``release``: it was
    made by an executor running this driver's release.

    Raises:
        JobError: some rows come from another release (names them and what to reinstall).
    """
    same = pc.fill_null(pc.equal(releases, pa.scalar(release, releases.type)), False)
    if len(releases) == 0 or pc.all(same).as_py():
        return
    other = sorted({str(r) for r in pc.unique(releases.filter(pc.invert(same))).to_pylist()})
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


HEADERS = ["sink", "partition", "kind", "version"]
"""The columns :func:`check_payloads` reads: the subtask and its payload's codec header."""

_HEADER_KEYS = ["sink", "kind", "version", "present"]


def check_payloads(
    headers: pa.Table, present: pa.Array | pa.ChunkedArray, codecs: Mapping[str, CodecHeader]
) -> None:
    """Every payload's codec header, as its executor stamped it (``kind`` and ``version`` columns,
    :meth:`~twophase.coordinator.state.acknowledgement.Acknowledgement.of`), is one its sink's codec
    reads, checked without the payloads (issue #42: no JSON parse at intake).

    Args:
        headers: the :data:`HEADERS` columns of a :func:`normalized` table, one row per
            acknowledgement.
        present: per row, whether it carries a payload (``is_valid`` of its ``committable``).
        codecs: sink → its codec's header; a sink not in it (one that overrides ``decode``) is not
            checked here, its payloads are decoded at commit.

    One hash aggregate over the small columns gives the distinct (sink, kind, version) of the
    table (a few: one per sink, unless another build answered), checked against ``codecs`` in
    Python; a row is looked for only when one is wrong.

    Raises:
        CommittableDecodeError: a payload of a sink with a codec header has none, or another kind,
            or a version the codec does not read (names the sink, the partition and what to
            reinstall): nothing may be recorded.
    """
    if headers.num_rows == 0 or not codecs:
        return
    keyed = headers.select(["sink", "kind", "version"]).append_column("present", present)
    seen = keyed.group_by(_HEADER_KEYS, use_threads=False).aggregate([])
    for sink, kind, version, has in zip(*(seen[k].to_pylist() for k in _HEADER_KEYS), strict=True):
        want = codecs.get(sink)
        if not has or want is None or (kind == want.kind and version in want.versions):
            continue
        mask = pc.and_(
            pc.and_(pc.equal(headers["sink"], pa.scalar(sink, pa.string())), pc.fill_null(present, False)),
            pc.and_(_is(headers["kind"], kind), _is(headers["version"], version)),
        )
        partition = headers["partition"].filter(mask)[0].as_py()
        if kind is None or version is None:
            raise CommittableDecodeError(
                f"sink {sink!r} partition {partition}: a committable without its codec header (kind "
                f"{kind!r} version {version!r}), where this driver's codec reads kind {want.kind!r} "
                f"versions {sorted(want.versions)}: it was not made by Acknowledgement.of (which stamps "
                "the header of what the sink encoded) or comes from another build; install the same "
                "twophase (and connector) release on the driver and its executors"
            )
        raise CommittableDecodeError(
            f"sink {sink!r} partition {partition}: a committable of kind {kind!r} "
            f"version {version!r}, where this driver's codec reads kind {want.kind!r} versions "
            f"{sorted(want.versions)}: the executors run another build of the sink than the driver; "
            "install the same twophase (and connector) release on both"
        )


def _is(column: pa.ChunkedArray, value: object) -> pa.ChunkedArray:
    """Per row of ``column``: equal to ``value`` (null to ``None``)."""
    if value is None:
        return pc.is_null(column)
    return pc.fill_null(pc.equal(column, pa.scalar(value, column.type)), False)


def in_key_order(keys: pa.Table) -> bool:
    """Whether the rows of ``keys`` (the :data:`KEY` columns, one chunk each) ascend by sink, then
    strictly by partition: as :func:`~twophase.coordinator.spark.tasks.acknowledgements_of` sorts
    a gathered epoch's rows on the executors, so that the driver groups them per sink by slicing,
    without a sort and a copy of every payload (issue #42). Compares each row with the next in
    Arrow compute; an empty or one-row table is in order."""
    n = keys.num_rows
    if n < 2:
        return True
    sink, partition = keys["sink"], keys["partition"]
    before, after = sink.slice(0, n - 1), sink.slice(1)
    rising = pc.less(partition.slice(0, n - 1), partition.slice(1))
    ordered = pc.or_(pc.less(before, after), pc.and_(pc.equal(before, after), rising))
    return pc.all(ordered).as_py() is True


def first_rows(keys: pa.Table) -> pa.Array | None:
    """Per row of ``keys`` (the :data:`KEY` columns of a table, in arrival order): whether it is
    the first row of its (sink, partition); ``None`` when every row is (no later attempt), the
    common case. The rows that are not are later attempts: not acknowledged, to be aborted."""
    numbered = keys.select(KEY).append_column(_ROW, pa.array(range(keys.num_rows), pa.int64()))
    firsts = numbered.group_by(KEY, use_threads=False).aggregate([(_ROW, "min")])[f"{_ROW}_min"]
    if len(firsts) == keys.num_rows:
        return None
    return pc.is_in(numbered[_ROW], value_set=firsts).combine_chunks()


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
    made: dict[int, pa.Array] = {}  # one conversion per distinct set (an epoch's sinks share one)
    partitions = []
    for parts in parts_of.values():
        arr = made.get(id(parts))
        if arr is None:
            arr = made[id(parts)] = pa.array(list(parts), pa.int32())
        partitions.append(arr)
    if not sinks:
        return key_table(())
    return pa.table({"sink": pa.concat_arrays(sinks), "partition": pa.concat_arrays(partitions)})


def unexpected(keys: pa.Table, expected: pa.Table) -> list[tuple[str, int]]:
    """The (sink, partition) pairs of ``keys`` (its :data:`KEY` columns) that ``expected`` (a
    :func:`key_table`) lacks, sorted."""
    extra = keys.select(KEY).join(expected, keys=KEY, join_type="left anti", use_threads=False)
    return sorted(zip(extra["sink"].to_pylist(), extra["partition"].to_pylist(), strict=True))


def records_per_sink(rows: pa.Table) -> dict[str, int]:
    """sink → records its acknowledgements wrote (``rows``: a table with their ``sink`` and
    ``records`` columns; a row that does not say counts 0)."""
    sums = (
        rows.select(["sink", "records"]).group_by("sink", use_threads=False).aggregate([("records", "sum")])
    )
    return {
        s: int(n or 0) for s, n in zip(sums["sink"].to_pylist(), sums["records_sum"].to_pylist(), strict=True)
    }
