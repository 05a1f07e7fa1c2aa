"""How every model test runs (``make model-check``): ``TWOPHASE_MODEL_EXAMPLES`` lives (default
30), ``TWOPHASE_MODEL_SEED`` (default: derandomized, so ``make test`` draws the same lives each
time), ``TWOPHASE_MODEL_SHRINK=0`` to report a failing life as found (shrinking replays it many
times, and asynchronous commit makes replays diverge); no example database, no health checks (a
life is slow by design)."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import RuleBasedStateMachine


def model_case(machine: type[RuleBasedStateMachine], steps: int) -> Any:
    """``machine``'s test case, run as the environment says, with up to ``steps`` steps a life."""
    case = machine.TestCase
    case.settings = settings(
        max_examples=int(os.environ.get("TWOPHASE_MODEL_EXAMPLES", "30")),
        stateful_step_count=steps,
        deadline=None,
        derandomize="TWOPHASE_MODEL_SEED" not in os.environ,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[
            p for p in Phase if p is not Phase.shrink or os.environ.get("TWOPHASE_MODEL_SHRINK", "1") == "1"
        ],
    )
    if "TWOPHASE_MODEL_SEED" in os.environ:
        case = seed(int(os.environ["TWOPHASE_MODEL_SEED"]))(case)
    return case
