"""The ``twophase`` root package: one-line imports, lazy loading, and no module outside the root."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert KafkaSinkConfig and S3SinkConfig and DeltaSinkConfig and RuntimeConfig and RestartStrategy


def test_all_lists_exactly_the_lazy_exports() -> None:
    assert sorted(twophase.__all__) == sorted(twophase._EXPORTS)
    for name in twophase.__all__:
        assert getattr(twophase, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = twophase.Nope  # type: ignore[attr-defined]


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
