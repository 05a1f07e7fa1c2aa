"""Where the conformance kit sits: inside the sink API's folder, above the runtime. It drives sinks
through ``coordinator/`` (the production executor loop and driver runtime); nothing else in
``sinks/`` imports the project, and nothing in the product imports the kit (it needs pytest and
hypothesis, which the product does not)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
KIT = "twophase.sinks.conformance"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_the_rest_of_the_sink_api_imports_nothing_of_the_project() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}: {m}"
        for p in (ROOT / "sinks").rglob("*.py")
        if "conformance" not in p.parts
        for m in _imports(p)
        if m.startswith("twophase.") and not m.startswith("twophase.sinks")
    ]
    assert offenders == []


def test_no_product_module_imports_the_kit() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}: {m}"
        for top in ("sinks", "coordinator", "connectors", "integration")
        for p in (ROOT / top).rglob("*.py")
        if "conformance" not in p.parts
        for m in _imports(p)
        if m.startswith(KIT)
    ]
    assert offenders == []


def test_the_kit_runs_sinks_through_the_runtime_not_a_connector_nor_test_support() -> None:
    kit = set().union(*(_imports(p) for p in (ROOT / "sinks" / "conformance").glob("*.py")))
    assert "twophase.coordinator.run.fanout" in kit and "twophase.coordinator.run.runtime" in kit
    assert not {m for m in kit if m.startswith(("twophase.connectors", "support"))}
