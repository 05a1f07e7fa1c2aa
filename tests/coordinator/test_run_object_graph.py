"""A run is an object graph (issue #42 item 5): no function or method of ``coordinator/`` takes
the run as a parameter. Each restore starts a ``Run``; its epochs, restore and endings are objects
built with only the collaborators they use, never with the run itself.

Read from the source (the AST), so a new procedure of the run fails here before it is merged.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "coordinator"

RUN_TYPES = ("Run", "RunState")
"""The names the run's class has, or had."""


def _names_a_run(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace('"', " ").replace("'", " ")  # string annotations too
    return any(re.search(rf"(?<![\w.]){name}(?!\w)", text) for name in RUN_TYPES)


def run_parameters(source: str) -> list[str]:
    """``function(parameter)`` for every parameter in ``source`` annotated with the run's type
    (``Run``, ``RunState``, quoted or not, alone or in a union), methods and nested functions
    included."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        args = node.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        name = node.name if not isinstance(node, ast.Lambda) else "<lambda>"
        found.extend(f"{name}({a.arg})" for a in every if a is not None and _names_a_run(a.annotation))
    return found


def test_the_checker_finds_the_run_in_every_position_and_spelling() -> None:
    source = "\n".join(
        [
            "def open_epoch(s: RunState, n: int) -> None: ...",
            "def restore_run(s: 'RunState') -> None: ...",
            "class Ending:",
            "    def __init__(self, run: Run | None, coord: CheckpointCoordinator) -> None: ...",
            "    def take(self, *, run: Optional[Run]) -> None: ...",
            "def fine(runs: int, settings: RunSettings, progress: RunProgress, r: run.Other) -> Run: ...",
        ]
    )
    assert run_parameters(source) == ["open_epoch(s)", "restore_run(s)", "__init__(run)", "take(run)"]


def test_no_function_of_the_coordinator_takes_the_run() -> None:
    offenders: list[str] = []
    for path in sorted(RUNTIME.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        offenders.extend(f"{rel}: {f}" for f in run_parameters(path.read_text(encoding="utf-8")))
    assert offenders == [], "build the step with the collaborators it uses instead:\n" + "\n".join(offenders)


def test_the_run_state_bag_is_gone() -> None:
    defined = {
        node.name
        for path in RUNTIME.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }
    assert "RunState" not in defined
    assert "Run" in defined
