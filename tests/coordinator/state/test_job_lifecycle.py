"""The job lifecycle state machine: the explicit table, and that nothing outside it is allowed."""

from __future__ import annotations

import pytest

from twophase.coordinator.state.job_lifecycle import TRANSITIONS, JobLifecycle, JobState, JobTransition
from twophase.sinks.errors import IllegalTransitionError


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("transition", list(JobTransition))
def test_only_table_transitions_are_legal(state: JobState, transition: JobTransition) -> None:
    job = JobLifecycle("j")
    job._state = state
    target = TRANSITIONS.get((state, transition))
    if target is None:
        with pytest.raises(IllegalTransitionError) as e:
            job.transition(transition)
        assert (e.value.state, e.value.transition) == (state.value, transition.value)
        assert job.state is state
    else:
        assert job.transition(transition) is target
        assert job.history[-1] == (state, transition, target)


def test_terminal_states_have_no_way_out() -> None:
    for (source, _), _target in TRANSITIONS.items():
        assert not source.is_terminal
    assert {s for s in JobState if s.is_terminal} == {
        JobState.FINISHED,
        JobState.SUSPENDED,
        JobState.CANCELED,
        JobState.FAILED,
    }


def test_paths_through_the_lifecycle() -> None:
    paths = {
        "finish": [JobTransition.START, JobTransition.FINISH, JobTransition.FINISHED],
        "drain": [JobTransition.START, JobTransition.STOP, JobTransition.STOPPED_DRAINED],
        "suspend": [JobTransition.START, JobTransition.STOP, JobTransition.SUSPEND],
        "cancel a hanging stop": [
            JobTransition.START,
            JobTransition.STOP,
            JobTransition.CANCEL,
            JobTransition.CANCELED,
        ],
        "failover": [
            JobTransition.START,
            JobTransition.FAIL,
            JobTransition.RESTART,
            JobTransition.RESTARTED,
            JobTransition.FAIL,
            JobTransition.GIVE_UP,
        ],
    }
    ends = {}
    for name, path in paths.items():
        job = JobLifecycle(name)
        for t in path:
            job.transition(t)
        ends[name] = job.state
    assert ends == {
        "finish": JobState.FINISHED,
        "drain": JobState.FINISHED,
        "suspend": JobState.SUSPENDED,
        "cancel a hanging stop": JobState.CANCELED,
        "failover": JobState.FAILED,
    }
