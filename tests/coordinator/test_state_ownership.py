"""The runtime's objects own their state (#25): no module of ``coordinator/`` assigns an attribute
of an object other than ``self``, directly (``other.x = …``, ``other.x += …``) or through an
item (``other.x[k] = …``). A change of another object's state goes through one of its named,
checked transitions (``PendingCheckpoint.complete``, ``Run.started``, …).

The test kit (``tests/support``) is not read: its models stand in for external systems.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "coordinator"

ALLOWED = {
    (
        "run/restart.py",
        "state.attempt_number",
    ): "tenacity's RetryCallState, the library's way to ask a wait for restart n",
    (
        "state/subtask_lifecycle.py",
        "t.status",
    ): "PendingTransaction is this module's own record, moved by its lifecycle",
}
"""(file, target) → why it is not another object's state."""


def foreign_writes(source: str) -> list[str]:
    """Targets in ``source`` that assign an attribute (or an item of one) of an object other than
    ``self`` or ``cls``, as written (``pc.status``, ``self._s.abandoned``, ``pc.acks``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for el in target.elts if isinstance(target, ast.Tuple) else [target]:
                attribute = el.value if isinstance(el, ast.Subscript) else el
                if not isinstance(attribute, ast.Attribute):
                    continue
                owner = attribute.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                found.append(ast.unparse(attribute))
    return found


def test_the_checker_finds_every_form_of_a_foreign_write() -> None:
    source = "\n".join(
        [
            "def f(self, pc, s):",
            "    self.ok = 1",
            "    self.items[0] = 1",
            "    pc.status = 2",
            "    s.count += 1",
            "    self._s.abandoned = True",
            "    pc.acks[key] = ack",
            "    a, s.b = 1, 2",
        ]
    )
    assert foreign_writes(source) == ["pc.status", "s.count", "self._s.abandoned", "pc.acks", "s.b"]


def test_no_runtime_module_writes_another_objects_state() -> None:
    offenders = []
    for path in sorted(RUNTIME.rglob("*.py")):
        rel = path.relative_to(RUNTIME)
        if "__pycache__" in rel.parts:
            continue
        for target in foreign_writes(path.read_text(encoding="utf-8")):
            if (rel.as_posix(), target) not in ALLOWED:
                offenders.append(f"coordinator/{rel.as_posix()}: {target}")
    assert offenders == [], "\n".join(offenders)
