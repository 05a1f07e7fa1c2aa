"""DESIGN.md's walk of a committable matches the code (#25 item 2): its hops are numbered in
order and every module and function it names exists. The table is generated from the trace of
one committable on the driver since issue #42 (``tests/coordinator/test_committable_trace.py``,
which also holds its bound: at most 12 calls and 4 forms); this checks what it names."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("sinks", "coordinator", "connectors", "integration")
FORMS = ("bytes", "Arrow table", "Arrow column", "the sink's committable")
"""The forms of the traced walk that are no class of the product."""


def walk_rows() -> list[tuple[str, str, str]]:
    """(hop, where, shape) of each row of the walk's table in DESIGN.md."""
    text = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
    start = text.index("| hop | where (module: function) | form |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        hop, where, shape = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((hop, where, shape))
    return rows


@cache
def definitions() -> frozenset[str]:
    """Every top-level function and class (``f``, ``C``) and method (``C.m``) of the product."""
    names: set[str] = set()
    for folder in PRODUCT:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(node.name)
                elif isinstance(node, ast.ClassDef):
                    names.add(node.name)
                    names.update(
                        f"{node.name}.{m.name}"
                        for m in node.body
                        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                    )
    return frozenset(names)


def test_the_walk_is_numbered_in_order() -> None:
    rows = walk_rows()
    assert rows, "DESIGN.md's walk table has no rows"
    assert [hop for hop, _, _ in rows] == [str(n) for n in range(1, len(rows) + 1)]


def test_every_module_function_and_shape_the_walk_names_exists() -> None:
    missing = []
    for hop, where, shape in walk_rows():
        for module in re.findall(r"`([\w/]+\.py)`", where):
            if not (ROOT / module).is_file():
                missing.append(f"hop {hop}: module {module}")
        for name in re.findall(r"`([A-Za-z_][\w.<>]*)`", where):
            if name.startswith("sink.") or name.endswith(".py"):
                continue  # the sink's own methods (the API), and modules (checked above)
            name = name.split(".<locals>")[0]  # a closure or comprehension: the function holding it
            if name not in definitions():
                missing.append(f"hop {hop}: {name}")
        if shape not in FORMS and shape not in definitions():
            missing.append(f"hop {hop}: form {shape}")
    assert missing == []


def test_the_checker_reports_a_name_the_code_does_not_define() -> None:
    assert "CheckpointCoordinator.acknowledge" in definitions()
    assert "CommitRequest" not in definitions()  # gone with #25 item 2
