"""The project's import graph has no cycle (#25), ``TYPE_CHECKING`` imports and imports inside
functions included: each module can be read and tested from the ones below it.

``from pkg import name`` counts as an import of ``pkg.name`` when that is a module, else of
``pkg`` (its ``__init__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_FOLDERS = ("sinks", "coordinator", "connectors", "integration")


def _modules() -> dict[str, Path]:
    found = {"twophase": ROOT / "__init__.py"}
    for top in CODE_FOLDERS:
        for path in (ROOT / top).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(("twophase", *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module → the project's modules it imports (anywhere in its source)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                targets = subs + ([node.module] if len(subs) < len(node.names) else [])
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_import_graph_has_no_cycle() -> None:
    # the flights job's optional sinks sit above the verifier and below their registry
    # (optional_sink, flights_postgres, flights_iceberg < flights_sinks < flights): no cycle left
    assert cycles(import_graph()) == []


def test_sinks_coordinator_and_connectors_have_no_cycle() -> None:
    graph = import_graph()
    product: dict[str, set[str]] = {m: set() for m in graph if not m.startswith("twophase.integration")}
    for module in product:
        product[module] = {t for t in graph[module] if t in product}
    assert cycles(product) == []


def test_the_cycle_finder_finds_a_cycle_through_type_checking_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert "twophase.coordinator.run.runtime" in import_graph()["twophase.coordinator.spark.handle"]


def test_the_runtime_imports_no_pyspark_and_no_connector() -> None:
    """The engine-agnostic line: coordinator/ outside its Spark adapter never imports pyspark or a
    connector (the adapter, coordinator/spark, is the only part that does)."""
    offenders = []
    for path in (ROOT / "coordinator").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("coordinator/spark/", "tests/support/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [f"{rel}: {n}" for n in names if n.startswith(("pyspark", "twophase.connectors"))]
    assert offenders == []


FLOORS = ("state", "storage", "commit", "checkpoint", "run", "spark")
"""coordinator/'s floors, lowest first (issue #42 item 5): each imports only its own and lower ones."""


def _floor(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["twophase", "coordinator"] or len(parts) < 4:
        return None
    return FLOORS.index(parts[2])


def test_the_coordinator_is_floors_each_importing_only_downward() -> None:
    graph = import_graph()
    top = [m for m in graph if m.startswith("twophase.coordinator.") and m.count(".") == 2]
    assert [m for m in top if m.removeprefix("twophase.coordinator.") not in FLOORS] == []
    upward = [
        f"{m} → {t}"
        for m, targets in graph.items()
        if (floor := _floor(m)) is not None
        for t in targets
        if (target := _floor(t)) is not None and target > floor
    ]
    assert upward == []


def test_the_floor_check_finds_an_upward_import() -> None:
    assert _floor("twophase.coordinator.state.metadata") == 0
    assert _floor("twophase.coordinator.run.runtime") == 4 and _floor("twophase.sinks.api") is None
    with pytest.raises(ValueError):  # a module outside every floor is named, not skipped
        _floor("twophase.coordinator.elsewhere.module")
