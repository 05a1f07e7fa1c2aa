"""The verdicts of the fault suite: a case finished exactly once, or lost what it names and
resumed past it cleanly; and a readable description of a case for assertion messages."""

from __future__ import annotations

import json

from support.faults.support import EXPECTED_RECORDS, FaultResult
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.sinks.errors import TransactionLostError


def describe(result: FaultResult) -> str:
    """A multi-line explanation for assertion messages: the result and every sink's read-back."""
    lines = [json.dumps(result.row(), indent=1)]
    if result.report is not None:
        for s in result.report.sinks:
            lines.append(
                f"{s.sink}: records={s.records} dup={s.duplicates} missing={s.missing} "
                f"unexpected={s.unexpected} content_ok={s.content_ok} lingering={s.lingering} "
                f"({s.lingering_detail}) error={s.error}"
            )
        lines.append(f"checkpoint: {result.report.checkpoint_detail}")
    return "\n".join(lines)


def lost_error(result: FaultResult) -> TransactionLostError | None:
    """The first :class:`TransactionLostError` in the chain of ``result.error`` (None: none)."""
    error: BaseException | None = result.error
    while error is not None:
        if isinstance(error, TransactionLostError):
            return error
        error = error.__cause__ or error.__context__
    return None


def assert_resumed_with_lost_records(resumed: FaultResult, lost_sink: str, lost_records: int) -> None:
    """After a resume with ``ignore_lost_on_recovery``: every sink holds the flights with no
    duplicate and nothing lingering; only ``lost_sink`` misses records, between 1 and
    ``lost_records`` (the record counts the LOST error named)."""
    assert resumed.error is None, describe(resumed)
    assert resumed.report is not None
    for s in resumed.report.sinks:
        assert s.error is None and s.duplicates == 0 and s.unexpected == 0, describe(resumed)
        assert s.lingering == 0, f"{s.sink} left {s.lingering_detail}:\n{describe(resumed)}"
        assert s.records + s.missing == EXPECTED_RECORDS, describe(resumed)
        if s.sink == lost_sink:
            assert 0 < s.missing <= lost_records, describe(resumed)
        else:
            assert s.missing == 0, describe(resumed)


def assert_exactly_once(result: FaultResult, fired: bool = True, checkpoint: bool = True) -> None:
    """The job finished after the fault, and every sink holds every record exactly once with no
    open transaction, pending upload or unreferenced Delta file left.

    Args:
        fired: also require that the fault fired.
        checkpoint: also require the spec's (local) checkpoint folder to end with the final one.
    """
    assert result.fired or not fired, f"the fault never fired:\n{describe(result)}"
    assert result.error is None and result.state is JobState.FINISHED, (
        f"the job did not finish:\n{describe(result)}"
    )
    report = result.report
    assert report is not None
    for s in report.sinks:
        assert s.error is None, f"{s.sink} could not be read back:\n{describe(result)}"
        assert (s.records, s.duplicates, s.missing, s.unexpected) == (EXPECTED_RECORDS, 0, 0, 0), describe(
            result
        )
        assert s.ids_ok and s.content_ok, describe(result)
        assert s.lingering == 0, f"{s.sink} left {s.lingering_detail}:\n{describe(result)}"
    assert report.checkpoint_ok or not checkpoint, describe(result)
