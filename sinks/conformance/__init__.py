"""A conformance kit for sink authors: does a :class:`~twophase.sinks.api.TwoPhaseCommitSink`
keep the two-phase-commit contract? (What Flink's connector testing framework offers connector
authors, for twophase's sink API.)

Subclass :class:`SinkContract` in a pytest module, under a name pytest collects (``Test…``), and
fill in its hooks: a fresh external system (a model in memory, a temporary folder, a fresh
namespace on a real server), a sink writing to it, what a reader of that system sees, and what is
left open in it. The inherited test drives random lives of a job through twophase's production
code (the executor loop :func:`~twophase.coordinator.run.fanout.write_subtasks` in every task, the
driver's :class:`~twophase.coordinator.run.runtime.JobRuntime` for checkpoints, commits, restores and
lingering cleanup), with hypothesis choosing the steps, and checks what FLIP-143 (unified sink
API, ``Committer``) and FLIP-147 (final checkpoint) ask of a two-phase-commit sink:

- no record is visible before its checkpoint is committed;
- commit is idempotent: committing again answers ``ALREADY_COMMITTED`` and changes nothing;
- ``commit_batch`` (the sink's own, or the default that loops ``commit``) answers one outcome per
  committable, in input order, each the committable's own: a batch half committed before a
  driver died answers ``ALREADY_COMMITTED`` for that half and ``COMMITTED`` for the rest, or
  ``LOST`` for the rest when the system dropped them (:meth:`SinkContract.lose`);
- abort after pre-commit: a checkpoint that fails leaves none of its records visible;
- recover-and-commit after a driver crash: a durable checkpoint's records land, once;
- lingering abort: what failed, lost and zombie attempts and crashed drivers left is cleaned up;
- nothing twice across task retries and zombie attempts, including a zombie of a retried stage
  with the same attempt number (Spark numbers attempts from 0 again, SPARK-24552);
- ``LOST`` only when the data is really gone;
- checkpoint ids never repeat a committed one: when the checkpoint storage is lost and the job
  runs again with the same id, new ids start above
  :meth:`~twophase.sinks.api.TwoPhaseCommitSink.last_committed_checkpoint` (DESIGN.md §12);
- a repeated commit is decided from the sink's own durable record: with every ``_committed``
  marker write refused, a restore's re-commit answers ``ALREADY_COMMITTED`` (issue #43);
- one driver at a time: a second driver's restore fences the first, which stops with
  :class:`~twophase.sinks.errors.DriverFencedError`, and what the first aborts on its way out
  never costs the second a transaction.

A violation fails the test with :class:`ContractViolation`, whose message names the check and
prints the (shrunk) history of the failing life in plain words.

Needs ``pytest`` and ``hypothesis`` (not dependencies of twophase itself). Example::

    class TestMySink(SinkContract[MySystem]):
        def new_system(self) -> MySystem: ...
        def make_sink(self, system: MySystem) -> MySink: ...
        def read_committed(self, system: MySystem) -> list[str]: ...
        def lingering(self, system: MySystem) -> list[str]: ...
"""

from twophase.sinks.conformance.contract import EXAMPLES_ENV, SEED_ENV, SinkContract, check_sink
from twophase.sinks.conformance.violation import ContractViolation

__all__ = ["EXAMPLES_ENV", "SEED_ENV", "ContractViolation", "SinkContract", "check_sink"]
