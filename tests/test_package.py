"""The ``twophase`` root package: one-line imports, lazy loading, and no module outside the root."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.build_layout import code_folders, is_development

import twophase

ROOT = Path(twophase.__file__).resolve().parent
OLD_ROOTS = frozenset({"sinks", "coordinator", "connectors", "integration"})


def test_the_public_names_come_from_one_line() -> None:
    from twophase import (
        DeltaSink,
        DeltaSinkConfig,
        Job,
        KafkaSink,
        KafkaSinkConfig,
        RestartStrategy,
        RuntimeConfig,
        S3Sink,
        S3SinkConfig,
    )

    assert Job.__module__ == "twophase.coordinator.spark.job"
    assert {c.__module__.split(".")[1] for c in (KafkaSink, S3Sink, DeltaSink)} == {"connectors"}
    assert all(
        callable(c) for c in (KafkaSinkConfig, S3SinkConfig, DeltaSinkConfig, RuntimeConfig, RestartStrategy)
    )


def test_all_lists_exactly_the_lazy_exports() -> None:
    from twophase.sinks.registry import CONNECTORS

    connectors = [n for d in CONNECTORS.all().values() for n in d.top_level]
    assert sorted(twophase.__all__) == sorted([*twophase._EXPORTS, *connectors])
    for name in twophase.__all__:
        assert getattr(twophase, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = twophase.Nope


def test_importing_the_sink_api_loads_no_connector_client() -> None:
    # a Spark task imports twophase.sinks.api: boto3, deltalake and librdkafka stay unloaded
    code = (
        "import sys, twophase.sinks.api\n"
        "print(sorted(m for m in ('boto3', 'deltalake', 'confluent_kafka', 'pyspark') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_module_imports_the_folders_as_top_level_packages() -> None:
    # From the repository root `import sinks` would still resolve, as a second copy of every module
    offenders = {
        str(p.relative_to(ROOT)): sorted(_imported_roots(p) & OLD_ROOTS)
        for p in ROOT.rglob("*.py")
        if ".venv" not in p.parts and "build" not in p.parts and _imported_roots(p) & OLD_ROOTS
    }
    assert offenders == {}


ENTRY_POINTS = {
    "twophase.integration.cli.__main__": "python -m twophase.integration.cli",
    "twophase.coordinator.spark.autoload.pyspark_twophase": "Spark's data source lookup",
    "twophase.connectors.postgres.metrics": (
        "the documented Prometheus collector (docs/connectors/postgres.md)"
    ),
}
"""Shipped modules no other shipped module imports, and who starts or imports each. (The
development tooling's own starts, ``make chaos``, ``make compat`` and the flights job's
spark-submit script, run from the checkout: setup.py leaves them out of the wheel.)"""


def _modules(development: bool) -> dict[str, Path]:
    """The modules of the code folders: the wheel's (``development`` False) or the development
    tooling's, which setup.py leaves out of it."""
    found = {} if development else {"twophase": ROOT / "__init__.py"}
    for top in code_folders():
        for path in (ROOT / top).rglob("*.py"):
            if is_development(path) != development or path.name.startswith("test_"):
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            found[".".join(["twophase", *(parts[:-1] if parts[-1] == "__init__" else parts)])] = path
    return found


def _shipped_modules() -> dict[str, Path]:
    return _modules(development=False)


def _imports(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # "module:attribute", loaded on first use: the connectors' declarations, the CLI's commands
            ref = re.fullmatch(r"(twophase(?:\.\w+)+):[\w.]+", node.value)
            out |= {ref.group(1)} if ref else set()
    return out


def test_every_shipped_module_serves_the_product() -> None:
    """#25: the wheel holds no module that only this project's tests use. Every module of the code
    folders is reached by imports (or ``"module:attribute"`` references, loaded on first use) from
    what users and tools start: the packages, the root's lazy
    exports and the :data:`ENTRY_POINTS`; no other module is such a start; and none imports the
    test support (``support``)."""
    shipped = _shipped_modules()
    imports = {name: _imports(name, path) for name, path in shipped.items()}
    starts = {n for n, p in shipped.items() if p.name == "__init__.py"} | set(ENTRY_POINTS)
    starts |= set(twophase._EXPORTS.values())
    reached, todo = set(), list(starts)
    while todo:
        name = todo.pop()
        if name in shipped and name not in reached:
            reached.add(name)
            todo += imports[name]
    assert sorted(set(shipped) - reached) == []
    used = set().union(*imports.values())
    assert {n for n, p in shipped.items() if p.name != "__init__.py" and n not in used} == set(ENTRY_POINTS)
    on_support = sorted(n for n, found in imports.items() if any(m.split(".")[0] == "support" for m in found))
    assert on_support == []


def test_no_shipped_module_imports_the_development_tooling() -> None:
    """#45 item 4: the user commands stand on the runtime and the connectors. No module of the wheel
    imports the development tooling (setup.py's DEVELOPMENT); the command group alone names the
    development commands, offered only where their modules exist (a checkout), as the job options
    name the flights demo's runs (``FLIGHTS_RUNS``, looked up by name where it exists)."""
    from twophase.integration.cli.main import DEVELOPMENT_COMMANDS

    development = set(_modules(development=True))
    reaching = {}
    for name, path in _shipped_modules().items():
        found = {m for m in _imports(name, path) if m in development}
        if found:
            reaching[name] = found
    named = {ref.partition(":")[0] for ref in DEVELOPMENT_COMMANDS.values()}
    assert reaching == {"twophase.integration.cli.main": named}
    assert development >= named
