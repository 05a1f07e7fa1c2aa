"""The conformance kit's pytest base class :class:`SinkContract` and :func:`check_sink`. See the
package docstring for what is checked."""

from __future__ import annotations

import abc
import logging
import os
import pickle
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Final, Generic, TypeVar

import pyarrow as pa

from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.conformance._lives import ContractLives

SYSTEM = TypeVar("SYSTEM")

AnySink = TwoPhaseCommitSink[Any, Any]

EXAMPLES_ENV: Final = "TWOPHASE_CONFORMANCE_EXAMPLES"
"""Environment variable: how many random lives each contract runs (overrides
:attr:`SinkContract.max_examples`), e.g. ``TWOPHASE_CONFORMANCE_EXAMPLES=500`` for a long run."""
SEED_ENV: Final = "TWOPHASE_CONFORMANCE_SEED"
"""Environment variable: draw lives from this seed instead of the fixed (derandomized) sequence."""


class SinkContract(abc.ABC, Generic[SYSTEM]):
    """A pytest base class: subclass it as ``Test…`` and fill in the hooks; the inherited
    :meth:`test_two_phase_commit_contract` then checks the sink.

    Every random life (hypothesis example) starts with :meth:`new_system` and ends with
    :meth:`close_system`. In between, the kit makes the sink with :meth:`make_sink` for every
    driver process (a restart makes a new one: nothing may survive a crash in memory) and copies
    it for every task attempt with :meth:`executor_copy` (Spark pickles sinks to executors).
    Records are strings (``b<batch>r<i>``); :meth:`batch` turns them into the Arrow batches the sink
    is given, and :meth:`read_committed` must return them as a reader of the system sees them.

    Class attributes (override to tune):
        job_id: the job id every life uses.
        max_examples: random lives per run (default 12; :data:`EXAMPLES_ENV` overrides).
        steps: at most this many steps per life (default 10).
        max_partitions: epochs run on 1..max_partitions tasks (default 3).
        max_records: at most this many records per batch (default 5).
    """

    job_id: ClassVar[str] = "conformance"
    max_examples: ClassVar[int] = 12
    steps: ClassVar[int] = 10
    max_partitions: ClassVar[int] = 3
    max_records: ClassVar[int] = 5

    # -- what the author provides -------------------------------------------------------------

    @abc.abstractmethod
    def new_system(self) -> SYSTEM:
        """A fresh, empty external system for one life: a model in memory, a temporary folder,
        or a fresh topic, bucket prefix or table on a real server."""

    @abc.abstractmethod
    def make_sink(self, system: SYSTEM) -> AnySink:
        """A new sink writing to ``system``, as a driver process would configure it (the kit calls
        ``validate`` on it with :meth:`batch`'s schema)."""

    @abc.abstractmethod
    def read_committed(self, system: SYSTEM) -> Iterable[str]:
        """Every record a reader of ``system`` sees now (committed data only), as the strings the
        kit wrote, each as often as it is visible."""

    @abc.abstractmethod
    def lingering(self, system: SYSTEM) -> Iterable[str]:
        """What is left open in ``system`` (open or pre-committed transactions, staged files,
        uploads), one description each; empty when clean. Checked at the end of every life,
        after the job finished."""

    def batch(self, keys: Sequence[str]) -> pa.RecordBatch:
        """The Arrow batch holding records ``keys``. Default: string columns ``key`` and ``value``,
        both ``keys``."""
        column = pa.array(list(keys), pa.string())
        return pa.RecordBatch.from_arrays([column, column], names=["key", "value"])

    def executor_copy(self, sink: AnySink) -> AnySink:
        """The copy of the driver's ``sink`` one task attempt runs. Default: a pickle round trip,
        as Spark ships sinks to executors. Override when the test's system cannot be pickled
        (an in-memory model): e.g. ``self.make_sink(system)`` configured the same way."""
        return pickle.loads(pickle.dumps(sink))  # type: ignore[no-any-return]

    def lose(self, system: SYSTEM, committables: Sequence[Any]) -> bool:
        """Make ``system`` drop these pre-committed transactions, as its transaction timeout would
        (optional). Return False if it cannot (the default): the check of ``LOST`` then only asks
        that no commit ever answers it."""
        return False

    def close_system(self, system: SYSTEM) -> None:
        """Release ``system`` at the end of a life (default: nothing)."""

    @property
    def supports_loss(self) -> bool:
        """Whether :meth:`lose` is implemented (overridden): only then does the kit drop
        transactions and expect ``LOST``."""
        return type(self).lose is not SinkContract.lose

    # -- the test -----------------------------------------------------------------------------

    def test_two_phase_commit_contract(self) -> None:
        """Random lives of a job over this sink; see :func:`check_sink`."""
        check_sink(self)


def check_sink(contract: SinkContract[Any]) -> None:
    """Run ``contract``'s random lives (hypothesis, :data:`EXAMPLES_ENV` lives, derandomized
    unless :data:`SEED_ENV` is set) and check the two-phase-commit contract in each.

    Raises:
        ContractViolation: the sink broke the contract (the message prints the shrunk history).
    """
    from hypothesis import HealthCheck, settings
    from hypothesis import seed as with_seed
    from hypothesis.stateful import run_state_machine_as_test

    seed = os.environ.get(SEED_ENV)
    config = settings(
        max_examples=int(os.environ.get(EXAMPLES_ENV, str(contract.max_examples))),
        stateful_step_count=contract.steps,
        deadline=None,
        derandomize=seed is None,
        database=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,  # one failure, shrunk: the first the author should read
    )

    def lives() -> ContractLives:
        return ContractLives(contract)

    # the runtime logs every transition and commit: thousands of lines that only a failure's
    # history needs, and it has its own
    logger = logging.getLogger("twophase")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        # hypothesis.seed marks the factory; run_state_machine_as_test draws from that seed
        factory = lives if seed is None else with_seed(int(seed))(lives)
        run_state_machine_as_test(factory, settings=config)  # type: ignore[arg-type]  # a factory is documented
    finally:
        logger.setLevel(level)
