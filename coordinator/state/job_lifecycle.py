"""The job lifecycle state machine (DESIGN.md §5): every transition named, illegal ones raise.

::

    CREATED ──start──► RUNNING ──finish──► FINISHING ──finished──► FINISHED
    RUNNING ──stop──► STOPPING ──stopped_drained──► FINISHED     (stop with savepoint, drain)
                      STOPPING ──suspend──► SUSPENDED            (savepoint or plain stop, no drain)
    CREATED | RUNNING | FINISHING | STOPPING | FAILING | RESTARTING ──cancel──► CANCELLING
    CANCELLING ──canceled──► CANCELED
    RUNNING | FINISHING | STOPPING | RESTARTING ──fail──► FAILING
    FAILING ──restart──► RESTARTING ──restarted──► RUNNING
    FAILING ──give_up──► FAILED

FINISHED, SUSPENDED, CANCELED and FAILED are terminal for one runtime: a suspended job resumes in
a new runtime from its savepoint or checkpoint. A cancel issued while a stop hangs takes effect
(STOPPING → CANCELLING), as "reinforce job stop semantic" requires.
"""

from __future__ import annotations

import enum
import logging
import threading

from twophase.sinks.errors import IllegalTransitionError

log = logging.getLogger(__name__)


class JobState(enum.Enum):
    """Where a job is (names as in Flink's ``JobStatus``)."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FINISHING = "FINISHING"
    FINISHED = "FINISHED"
    STOPPING = "STOPPING"
    SUSPENDED = "SUSPENDED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FAILING = "FAILING"
    RESTARTING = "RESTARTING"
    FAILED = "FAILED"

    @property
    def is_terminal(self) -> bool:
        """True for FINISHED, SUSPENDED, CANCELED and FAILED."""
        return self in (JobState.FINISHED, JobState.SUSPENDED, JobState.CANCELED, JobState.FAILED)


class JobTransition(enum.Enum):
    """The named transitions of :class:`JobState`."""

    START = "start"
    FINISH = "finish"
    FINISHED = "finished"
    STOP = "stop"
    STOPPED_DRAINED = "stopped_drained"
    SUSPEND = "suspend"
    CANCEL = "cancel"
    CANCELED = "canceled"
    FAIL = "fail"
    RESTART = "restart"
    RESTARTED = "restarted"
    GIVE_UP = "give_up"


S, T = JobState, JobTransition

TRANSITIONS: dict[tuple[JobState, JobTransition], JobState] = {
    (S.CREATED, T.START): S.RUNNING,
    (S.RUNNING, T.FINISH): S.FINISHING,
    (S.FINISHING, T.FINISHED): S.FINISHED,
    (S.RUNNING, T.STOP): S.STOPPING,
    (S.STOPPING, T.STOPPED_DRAINED): S.FINISHED,
    (S.STOPPING, T.SUSPEND): S.SUSPENDED,
    **{
        (s, T.CANCEL): S.CANCELLING
        for s in (S.CREATED, S.RUNNING, S.FINISHING, S.STOPPING, S.FAILING, S.RESTARTING)
    },
    (S.CANCELLING, T.CANCELED): S.CANCELED,
    **{(s, T.FAIL): S.FAILING for s in (S.RUNNING, S.FINISHING, S.STOPPING, S.RESTARTING)},
    (S.FAILING, T.RESTART): S.RESTARTING,
    (S.RESTARTING, T.RESTARTED): S.RUNNING,
    (S.FAILING, T.GIVE_UP): S.FAILED,
}
"""The complete transition table; anything absent is illegal."""


class JobLifecycle:
    """The state of one job in one runtime. Thread-safe (a cancel may come from another thread).

    Args:
        job_id: for messages and log fields.
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self._state = JobState.CREATED
        self._lock = threading.Lock()
        self.history: list[tuple[JobState, JobTransition, JobState]] = []

    @property
    def state(self) -> JobState:
        """The current state."""
        with self._lock:
            return self._state

    def can(self, transition: JobTransition) -> bool:
        """Whether ``transition`` is legal now."""
        with self._lock:
            return (self._state, transition) in TRANSITIONS

    def transition(self, transition: JobTransition) -> JobState:
        """Apply ``transition``; return the new state.

        Raises:
            IllegalTransitionError: ``transition`` is not legal from the current state.
        """
        with self._lock:
            source = self._state
            target = TRANSITIONS.get((source, transition))
            if target is None:
                raise IllegalTransitionError(f"job {self.job_id}", source.value, transition.value)
            self._state = target
            self.history.append((source, transition, target))
        log.info(
            "job transition job=%s %s -[%s]-> %s", self.job_id, source.value, transition.value, target.value,
            extra={"job": self.job_id, "transition": transition.value, "state": target.value},
        )  # fmt: skip
        return target

    def require(self, *states: JobState, action: str) -> None:
        """Check that the job is in one of ``states`` before ``action``.

        Raises:
            IllegalTransitionError: it is not.
        """
        with self._lock:
            current = self._state
        if current not in states:
            raise IllegalTransitionError(f"job {self.job_id}", current.value, action)
