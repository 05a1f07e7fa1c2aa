"""Running a whole job under its restart strategy (DESIGN.md §5 "failover").

:func:`run_with_restarts` restores, runs the caller's body (epochs, then finish or stop), and on a
failure fails the job, waits per the :class:`~twophase.coordinator.run.restart.RestartStrategy`
(tenacity), restores and runs the body again, until it returns or the strategy is exhausted.
A refusal (:class:`~twophase.sinks.errors.RefusedError`: a missing permission, an untrusted
certificate; met on the driver or, as the text of a task failure, on an executor) is never
restarted, as Flink's non-recoverable errors: the job fails at once with
:class:`~twophase.sinks.errors.JobRefusedError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from tenacity import Retrying, retry_if_exception

from twophase.coordinator.run.restart import RestartTracker
from twophase.coordinator.state.job_lifecycle import JobLifecycle, JobState, JobTransition
from twophase.sinks.errors import (
    CorruptCheckpointError,
    DriverFencedError,
    IllegalTransitionError,
    JobError,
    JobRefusedError,
    TransactionLostError,
    find_refusal,
)
from twophase.sinks.internal.structured_log import log_event

if TYPE_CHECKING:
    from twophase.coordinator.state.metrics import CheckpointMetrics
    from twophase.sinks.context import JsonObject

log = logging.getLogger(__name__)
R = TypeVar("R")


class RestartableJob(Protocol):
    """What the restart loop drives: ``JobRuntime``'s lifecycle, restore, failure and finish calls
    (a protocol, so this layer above the runtime does not import it)."""

    @property
    def job_id(self) -> str: ...

    @property
    def lifecycle(self) -> JobLifecycle: ...

    @property
    def restarts(self) -> RestartTracker: ...

    def check_canceled(self) -> None: ...

    def restore(self, savepoint_location: str | None = None) -> object: ...

    def fail(self, error: BaseException) -> None: ...

    def failover(self, error: BaseException) -> object: ...

    def finish(self, source_position: JsonObject | None = None) -> CheckpointMetrics | None: ...


J = TypeVar("J", bound=RestartableJob)


class JobCanceledError(JobError):
    """The job was canceled while (or before) this action ran."""


FINAL_ERRORS = (JobError, IllegalTransitionError, TransactionLostError, CorruptCheckpointError)
"""Errors a restart cannot cure: the strategy exhausted or a cancel (JobError), a protocol
mistake, a lost transaction (the user must decide), an unreadable checkpoint."""


def refused(runtime: RestartableJob, error: BaseException) -> JobRefusedError | None:
    """When ``error`` is a refusal (:func:`~twophase.sinks.errors.find_refusal`): fail the job and
    give it up (FAILED, no restart), and return the error to end it with; else ``None``."""
    found = find_refusal(error)
    if found is None:
        return None
    runtime.check_canceled()
    runtime.fail(error)
    if runtime.lifecycle.can(JobTransition.GIVE_UP):
        runtime.lifecycle.transition(JobTransition.GIVE_UP)
    refusal = JobRefusedError(runtime.job_id, *found)
    log_event(log, logging.ERROR, "job refused, not restarted", job=runtime.job_id, error=str(refusal))
    return refusal


def fail_over(runtime: RestartableJob, cause: BaseException) -> None:
    """Fail over after ``cause`` (``runtime.failover``), again and again while the restore itself
    fails (a service still down when the restart delay ended), as the restart strategy allows.

    Raises:
        JobRefusedError: ``cause``, or the failure of a restore, is a refusal; never restarted.
        JobError: the strategy is exhausted (the job is FAILED), or the job was canceled.
        TransactionLostError, CorruptCheckpointError, IllegalTransitionError: no restart cures them.
    """
    while True:
        refusal = refused(runtime, cause)
        if refusal is not None:
            raise refusal from cause
        try:
            runtime.failover(cause)
            return
        except FINAL_ERRORS:
            raise
        except Exception as e:
            log_event(log, logging.WARNING, "restore failed, failing over again", job=runtime.job_id, error=e)
            cause = e


def finish_with_restarts(
    runtime: RestartableJob, source_position: JsonObject | None
) -> CheckpointMetrics | None:
    """``runtime.finish`` (end of input); when it fails (e.g. its lingering cleanup meets a broker
    still down after the final checkpoint committed), fail over (:func:`fail_over`) and finish
    again: restored from the final checkpoint, the second finish has nothing left to do.

    Returns:
        the final checkpoint's metrics, or ``None`` when it finished after a fail-over from it.

    Raises:
        as :func:`fail_over`.
    """
    while True:
        try:
            return runtime.finish(source_position)
        except FINAL_ERRORS:
            raise
        except Exception as e:
            log_event(log, logging.WARNING, "finish failed, failing over", job=runtime.job_id, error=e)
            fail_over(runtime, e)


def run_with_restarts(
    runtime: J,
    body: Callable[[J], R],
    *,
    savepoint_location: str | None = None,
    sleep: Callable[[float], None],
) -> R:
    """Run ``body(runtime)`` under the runtime's restart strategy: restore first (from
    ``savepoint_location`` if given); on a failure, fail the job, wait, restore, run again.

    Args:
        runtime: the job's runtime (CREATED, or FAILING after an earlier failure).
        body: drives epochs, then finishes or stops; its result is returned.
        savepoint_location: the first restore's savepoint.
        sleep: sleeps the restart delays (seconds).

    Raises:
        JobCanceledError: canceled. The last error: the strategy is exhausted (job FAILED), an
        ``IllegalTransitionError`` (a protocol mistake in ``body``; the job is FAILED), or a
        ``DriverFencedError`` (a newer driver owns the job; never restarted).
        JobRefusedError: a refusal (a missing permission, an untrusted certificate); never restarted.
    """
    retrying = Retrying(
        stop=runtime.restarts.as_stop(),
        wait=runtime.restarts.as_wait(),
        sleep=sleep,
        retry=retry_if_exception(
            lambda e: (
                not isinstance(e, (JobCanceledError, IllegalTransitionError, DriverFencedError))
                and find_refusal(e) is None
            )
        ),
        reraise=True,
    )
    lifecycle = runtime.lifecycle
    try:
        for attempt in retrying:
            with attempt:
                runtime.check_canceled()
                if lifecycle.state is JobState.FAILING:
                    lifecycle.transition(JobTransition.RESTART)
                    runtime.restore()
                elif lifecycle.state is JobState.CREATED:
                    runtime.restore(savepoint_location)
                try:
                    return body(runtime)
                except JobCanceledError:
                    raise
                except Exception as e:
                    runtime.fail(e)
                    raise
    except Exception as e:
        refusal = None if isinstance(e, JobCanceledError) else refused(runtime, e)
        if refusal is not None:
            raise refusal from e
        if lifecycle.can(JobTransition.GIVE_UP):
            lifecycle.transition(JobTransition.GIVE_UP)
        raise
    except BaseException:
        if lifecycle.can(JobTransition.GIVE_UP):
            lifecycle.transition(JobTransition.GIVE_UP)
        raise
    raise AssertionError("unreachable")  # pragma: no cover
