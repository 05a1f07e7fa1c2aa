"""The sink API: what a connector implements. *When* each method runs is the runtime's job.

The protocol is Flink's two-phase commit (``TwoPhaseCommitSinkFunction``, Sink V2
``Committer``) with FLIP-147's end-of-input rule:

- executor side, inside one Spark task (a *subtask*): ``begin_transaction`` → ``write`` each Arrow
  batch → ``pre_commit``, which flushes everything and returns the *committable*;
- driver side, possibly after a crash and in another process: ``commit`` once the checkpoint
  holding the committable is durable (``notify_checkpoint_complete``), ``abort`` otherwise;
  ``recover_and_commit`` / ``recover_and_abort`` on restore; ``abort_lingering`` for what this job
  opened that no checkpoint holds.

Two type parameters keep the two sides apart:

- ``TXN``, the *open* transaction, lives only inside the task. It may hold live clients (a
  producer, a buffer) and is never serialized.
- ``COMM``, the *committable*, is a frozen dataclass encoded as versioned JSON by
  :attr:`TwoPhaseCommitSink.codec`; after ``pre_commit`` a commit must be able to succeed from any
  process with it alone.

The driver commits one checkpoint's committables of a sink with ONE
:meth:`TwoPhaseCommitSink.commit_batch` call, which by default loops ``commit``; a connector
overrides it to commit the batch the way its service is fastest (a thread pool, a few
connections). Sinks whose transactions span epochs (an S3 JSON-lines file rolling by size) also
implement :class:`InProgressSink`. Sinks that must commit all committables of one checkpoint at
once (Delta: one table commit per checkpoint) implement :class:`CheckpointCommitSink`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import pyarrow as pa

from twophase.sinks.codec import CommittableCodec
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.outcome import CommitOutcome, CommittableSize

TXN = TypeVar("TXN")
COMM = TypeVar("COMM")


class TwoPhaseCommitSink(abc.ABC, Generic[TXN, COMM]):
    """A two-phase-commit sink. Instances are configured on the driver and pickled to executors,
    so they hold configuration only: no clients, no open transactions.

    Attributes:
        name: stable within a job; part of every transaction name.
        codec: encodes committables (``COMM``) as versioned JSON for checkpoint metadata.
        speculation_safe: False when two concurrent attempts of one subtask would interfere (e.g.
            PostgreSQL's: a speculative copy's begin rolls back what the first attempt prepared,
            and the epoch then fails verification). The runtime then refuses to run with Spark
            speculation on.
        commit_concurrency: how many ``commit`` / ``recover_and_commit`` calls of this sink, each
            on a different committable, the default :meth:`commit_batch` runs at once (≥ 1; 1: one
            at a time). Only sinks whose commits are independent of each other and whose
            driver-side clients are thread-safe raise it. A sink overriding :meth:`commit_batch`
            may read it as its own bound. It never applies to a :class:`CheckpointCommitSink`,
            whose checkpoints are committed one after another, in checkpoint order.
        max_pending_checkpoints: how many checkpoints may still await commit when the next epoch
            starts writing (``None``: no limit). A sink that reuses names (Kafka's pooled
            transactional ids) declares it: the runtime then never starts epoch ``w`` while a
            checkpoint older than ``w - max_pending_checkpoints`` is uncommitted (it waits for
            asynchronous commits first).
        transaction_timeout_ms: after how long the external system aborts a pre-committed
            transaction on its own (ms; ``None``: never). The runtime warns when a pending one
            passes 80% of it (``CommitPolicy.timeout_warning_ratio``).
    """

    name: str
    codec: CommittableCodec[COMM]
    speculation_safe: bool = True
    commit_concurrency: int = 1
    max_pending_checkpoints: int | None = None
    transaction_timeout_ms: int | None = None

    # --- executor side -------------------------------------------------------------------------

    def validate(self, schema: pa.Schema) -> None:
        """Check, before anything is written, that this sink can take data of ``schema``.

        Raises:
            SchemaError: a column is missing or of a type the sink cannot write.
            ConfigError: the configuration cannot work (e.g. a timeout above the broker's max).
        """

    def read_columns(self) -> tuple[str, ...] | None:
        """The columns of the incoming batches this sink reads, by name; ``None``: every column.

        The engine hands the tasks only the union of its sinks' read columns, projected before the
        data leaves the JVM (in a batch write, nothing only other columns need is computed), so a
        sink finds in each batch the columns it declares, in the data's order, and possibly others:
        it selects its columns by name, never by position. Default: ``None``.
        """
        return None

    @abc.abstractmethod
    def begin_transaction(self, ctx: WriterContext) -> TXN:
        """Open a transaction for one subtask's epoch.

        Raises:
            ServiceUnavailableError: the external system cannot be reached (after retries).
        """

    @abc.abstractmethod
    def write(self, txn: TXN, batch: pa.RecordBatch) -> None:
        """Write one Arrow batch into the open transaction (whole batches, never row by row).

        Raises:
            RecordError: a record cannot be written; the message names its position.
        """

    @abc.abstractmethod
    def pre_commit(self, txn: TXN) -> COMM | None:
        """Flush everything and return the committable; ``None`` if the transaction is empty.

        After it returns, commit can only fail if the external system lost the transaction (for
        example a Kafka transaction timeout). An empty transaction is released by the sink itself
        and yields no committable.

        In a Spark task the job's sinks pre-commit at once, each on a thread of its own (one call
        per sink and transaction; ``snapshot_in_progress`` or ``finish`` follow on the same
        thread): sinks of one job must not share a client that is not thread-safe.
        """

    def verify_pre_committed(self, committables: Sequence[COMM], in_progress: Sequence[JsonObject]) -> None:
        """Driver side, after every acknowledgement of a checkpoint arrived and before it is
        persisted: check that what the acknowledged attempts pre-committed (and keep in progress)
        is still as they left it. Spark may run other attempts of a subtask beside the one it
        acknowledges (zombies after a stage retry, speculative copies); one that fenced or
        overwrote the acknowledged transaction must be caught here, while the epoch can still be
        retried, never after the checkpoint is durable. Default: nothing to check (every attempt
        writes its own transaction, e.g. files with unique names).

        Raises:
            ConcurrentAttemptError: a transaction was fenced or changed (names it).
            ServiceUnavailableError: the external system cannot be reached.
        """

    def abort_open(self, txn: TXN) -> None:
        """Best-effort abort of a transaction that was never pre-committed (task failure, close()).

        Whatever this leaves behind is found later by :meth:`abort_lingering`.
        """

    # --- driver side ---------------------------------------------------------------------------

    @abc.abstractmethod
    def commit(self, committable: COMM) -> CommitOutcome:
        """Commit a pre-committed transaction. Idempotent: committing twice is not an error
        (the second call returns ``ALREADY_COMMITTED``). Never raises for the outcomes of
        :class:`CommitOutcome`; returns ``RETRY`` for transient failures.
        """

    @abc.abstractmethod
    def abort(self, committable: COMM) -> None:
        """Abort a pre-committed transaction. Idempotent."""

    def recover_and_commit(self, committable: COMM) -> CommitOutcome:
        """Commit after a restore, possibly in another process than the writer. Default: ``commit``."""
        return self.commit(committable)

    def commit_batch(self, committables: Sequence[COMM]) -> list[CommitOutcome]:
        """Commit several pre-committed transactions of ONE checkpoint; the driver's only commit
        call for them (one per sink per checkpoint, and again with the ``RETRY`` ones).

        Each committable is decided on its own, exactly as :meth:`commit` would decide it from the
        sink's durable evidence: a batch may come back partly ``COMMITTED``, partly
        ``ALREADY_COMMITTED`` (committed before a crash), ``RETRY``, ``LOST`` or ``FATAL``. The
        committables are independent: the sink may commit them in any order and concurrently.

        Default: :meth:`commit` on each, up to :attr:`commit_concurrency` at once
        (:func:`commit_each`), so a sink that implements only ``commit`` keeps working.

        Args:
            committables: non-empty, of one checkpoint, ascending by partition.

        Returns:
            One :class:`CommitOutcome` per committable, in input order (the runtime refuses any
            other length and fails the commit, confirming none of them).

        Raises:
            ServiceUnavailableError: the whole batch could not be tried (counted as ``RETRY`` for
                every committable). Anything else fails the commit of the whole batch; nothing of it
                counts as confirmed, and a restore re-commits it.
        """
        return commit_each(self.commit, committables, self.commit_concurrency)

    def recover_and_commit_batch(self, committables: Sequence[COMM]) -> list[CommitOutcome]:
        """:meth:`commit_batch` after a restore, possibly in another process than the writers.
        Default: :meth:`recover_and_commit` on each, up to :attr:`commit_concurrency` at once."""
        return commit_each(self.recover_and_commit, committables, self.commit_concurrency)

    def recover_and_abort(self, committable: COMM) -> None:
        """Abort after a restore. Default: ``abort``."""
        self.abort(committable)

    def abort_batch(self, committables: Sequence[COMM]) -> None:
        """Abort several pre-committed transactions: the driver's one call per sink for the
        transactions of the checkpoints it aborts (or of the subtasks it closes). Idempotent, as
        :meth:`abort` is: a transaction aborted before, or never opened, is not an error.

        Default: :meth:`abort` on each, in order, so a sink that implements only ``abort`` keeps
        working. A sink whose abort reads shared state overrides it to read that state once for
        the batch (Delta reads the table's log once, to delete only files no commit references).

        Args:
            committables: non-empty, of one or more checkpoints.

        Raises:
            Exception: whatever :meth:`abort` raises, at the first that fails; what is left is
                pre-committed in no checkpoint, and :meth:`abort_lingering` aborts it later.
        """
        for c in committables:
            self.abort(c)

    @abc.abstractmethod
    def abort_lingering(self, scope: LingeringScope[COMM]) -> int:
        """Abort what this job and sink opened that no checkpoint holds; return how many.

        Lingering transactions come from failed or speculative task attempts and from crashes
        before a checkpoint completed. Never touch anything in ``scope.held`` or
        ``scope.held_in_progress``, nor other jobs' transactions.
        """

    def last_committed_checkpoint(self, job_id: str) -> int | None:
        """The highest checkpoint id the external system records as committed for ``job_id`` and
        this sink, if it keeps such a record (Delta: the table's ``txn`` version for appId
        ``<job>:<sink>``, PROTOCOL.md "Transaction Identifiers"); ``None`` if it keeps none.

        A restore starts new checkpoint ids above it: ids start again whenever the job's checkpoint
        storage is empty (a new or emptied checkpoint directory, cancel with delete, a savepoint
        restored elsewhere), and an idempotency key keyed by checkpoint id must never be reused.
        Default: ``None``.

        Raises:
            ServiceUnavailableError: the external system cannot be reached.
        """
        return None

    def measure(self, committable: COMM) -> CommittableSize:
        """Records and bytes in ``committable``, for the runtime's per-sink metrics. Cheap, no I/O.
        Default: unknown."""
        return CommittableSize()

    def close(self) -> None:
        """Release driver-side clients (admin connections). Idempotent."""

    # --- helpers -------------------------------------------------------------------------------

    def encode(self, committable: COMM) -> dict[str, Any]:
        """Encode a committable for checkpoint metadata (versioned JSON object)."""
        return self.codec.to_json(committable)

    def decode(self, payload: JsonObject) -> COMM:
        """Decode a committable from checkpoint metadata.

        Raises:
            CommittableDecodeError: malformed, of another kind, or of a newer version.
        """
        return self.codec.from_json(payload)


class InProgressSink(TwoPhaseCommitSink[TXN, COMM], abc.ABC):
    """A sink whose transactions may span epochs (e.g. an S3 JSON-lines file that rolls by size).

    At each checkpoint the runtime calls :meth:`pre_commit` (which returns the committable of any
    file that rolled, or ``None``) and then :meth:`snapshot_in_progress` for what is still open.
    The next epoch's task for the same partition receives that state as
    ``WriterContext.restored_state`` in ``begin_transaction`` and resumes it. At end of input the
    runtime calls :meth:`finish` instead of :meth:`pre_commit`, which turns everything in
    progress into a committable for the final checkpoint (FLIP-147).
    """

    @property
    def keeps_in_progress(self) -> bool:
        """Whether this sink, as configured, may keep data in progress across checkpoints (True
        unless it says otherwise: an S3 sink writing Parquet, or rolling on every checkpoint,
        leaves nothing open). Runtimes without an end-of-input hook refuse sinks that do."""
        return True

    @abc.abstractmethod
    def snapshot_in_progress(self, txn: TXN) -> JsonObject | None:
        """The JSON state of what stays open across the checkpoint, or ``None``.

        It must be enough to resume from any process. Secrets never go into it.
        """

    @abc.abstractmethod
    def finish(self, txn: TXN) -> COMM | None:
        """At end of input: flush and turn in-progress data into a committable (or ``None``)."""

    @abc.abstractmethod
    def abort_in_progress(self, state: JsonObject) -> None:
        """Abort in-progress state that will never be resumed (a restore from an older checkpoint)."""


class CheckpointCommitSink(TwoPhaseCommitSink[TXN, COMM], abc.ABC):
    """A sink that commits every committable of one checkpoint in ONE call (like Flink Sink V2's
    global committer), for systems where one commit per checkpoint is what makes the commit atomic
    and idempotent: Delta Lake commits all subtasks' Add actions together with
    ``txn(appId, version=<checkpoint id>)`` (Delta PROTOCOL.md, "Transaction Identifiers").

    For such a sink the runtime never calls :meth:`commit` / :meth:`recover_and_commit` (nor
    ``commit_batch``, whose per-committable outcomes it cannot give). It groups
    the pending transactions by checkpoint and calls :meth:`commit_checkpoint` (or
    :meth:`recover_and_commit_checkpoint` after a restore):

    - once per completed checkpoint that holds committables of this sink, with ALL of them (every
      subtask's acknowledged committables), never an empty sequence;
    - in increasing checkpoint order; a later checkpoint's call starts only after the earlier
      one answered ``COMMITTED`` or ``ALREADY_COMMITTED`` (or, on recovery with the user's
      opt-in, ``LOST``);
    - possibly again for the same checkpoint (a retry, a recovery, a replayed notification): the
      call must be idempotent.

    The outcome covers the whole checkpoint (nothing is ever committed partially): ``COMMITTED``,
    ``ALREADY_COMMITTED`` (committed earlier, or a newer checkpoint already committed: checkpoints
    commit in order, so an older one counts as committed), ``RETRY`` (transient: the runtime
    retries the same call with backoff), ``LOST`` (some data of the checkpoint is gone: nothing was
    committed; the runtime fails unless recovering with the user's opt-in) or ``FATAL``. Aborts stay
    per committable (:meth:`abort`).
    """

    @abc.abstractmethod
    def commit_checkpoint(self, checkpoint_id: int, committables: Sequence[COMM]) -> CommitOutcome:
        """Commit all of this sink's committables of ``checkpoint_id`` atomically, as one commit.

        Args:
            checkpoint_id: the completed checkpoint (≥ 1).
            committables: every committable of this sink pre-committed for it (non-empty, ascending
                by partition).

        Returns:
            The :class:`CommitOutcome` of the whole checkpoint (see the class docstring). Never
            raises for those outcomes; may raise ``ServiceUnavailableError`` (counted as ``RETRY``).
        """

    def recover_and_commit_checkpoint(
        self, checkpoint_id: int, committables: Sequence[COMM]
    ) -> CommitOutcome:
        """Commit a checkpoint after a restore, possibly in another process than the writers.
        Default: :meth:`commit_checkpoint` (which must be idempotent)."""
        return self.commit_checkpoint(checkpoint_id, committables)


def commit_each(
    commit: Callable[[COMM], CommitOutcome], committables: Sequence[COMM], concurrency: int = 1
) -> list[CommitOutcome]:
    """``commit`` on each committable, up to ``concurrency`` at once (threads); the outcomes in
    input order. What the default :meth:`TwoPhaseCommitSink.commit_batch` does, and a building
    block for sinks that batch only part of their work.

    A :class:`~twophase.sinks.errors.ServiceUnavailableError` from one call is that committable's
    ``RETRY``, as the runtime counts it for a single commit.

    Raises:
        Exception: any other exception of ``commit`` (the first one, once every started call
            returned).
    """

    def one(committable: COMM) -> CommitOutcome:
        try:
            return commit(committable)
        except ServiceUnavailableError:
            return CommitOutcome.RETRY

    if concurrency <= 1 or len(committables) <= 1:
        return [one(c) for c in committables]
    with ThreadPoolExecutor(min(concurrency, len(committables)), thread_name_prefix="commit-batch") as pool:
        return list(pool.map(one, committables))
