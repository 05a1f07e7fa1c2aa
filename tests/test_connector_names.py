"""A connector is named in its own folder and its declaration only (#45 item 4): no module of the
product outside ``connectors/<kind>/`` imports it, spells ``twophase.connectors.<kind>`` or uses
its kind as a string; the runtime, the data source and the CLI learn of it from its declaration
(:mod:`twophase.sinks.registry`). Docstrings and comments may name it (docs aside).

The development tooling (``setup.py``'s ``DEVELOPMENT``: services, chaos, compat, the flights demo
and its verifier, never in the wheel users install) runs named connectors on purpose and is not
scanned; the allow-list below is short and says why.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.build_layout import is_development

from twophase.sinks.registry import ConnectorRegistry

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("__init__.py", "sinks", "coordinator", "connectors", "integration")
ALLOWED = {
    ("__init__.py", "*"): "type checkers' view of the re-exports (TYPE_CHECKING imports only)",
    ("coordinator/storage/", "s3"): "the s3:// scheme of checkpoint storage, not the S3 connector",
    ("sinks/s3_options.py", "s3"): "boto3's service name in the S3 options every connector shares",
    ("connectors/delta/", "s3"): "the s3:// scheme of a Delta table's location",
    ("connectors/iceberg/", "s3"): "the s3:// scheme of an Iceberg data file's path",
    ("coordinator/storage/", "azure"): "the Azure checkpoint backend and its service name, not the file sink",
    ("connectors/iceberg/", "azure"): "the store of an Iceberg warehouse on Azure, not the Azure file sink",
    ("coordinator/storage/", "gcs"): "the GCS checkpoint backend and its service name, not the file sink",
    ("connectors/iceberg/", "gcs"): "the store of an Iceberg warehouse on GCS, not the GCS file sink",
}
"""(path prefix, kind or ``*``) → why that mention is not a connector's name."""


def _product_files() -> list[Path]:
    found = []
    for top in SCANNED:
        path = ROOT / top
        found += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [p for p in found if not is_development(p)]


def _docstrings(tree: ast.AST) -> set[int]:
    """Ids of the string constants that are statements of their own (docstrings)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def mentions(source: str, kind: str) -> list[int]:
    """Lines of ``source`` that import the connector ``kind``, spell its package, or use ``kind``
    as a string (any case); docstrings excepted."""
    tree = ast.parse(source)
    package = f"twophase.connectors.{kind}"
    docs = _docstrings(tree)
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            modules = [a.name for a in node.names]
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                modules = [base, *(f"{base}.{m}" for m in modules)]
            if any(m == package or m.startswith(package + ".") for m in modules):
                lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            lines += [node.lineno] if node.value.lower() == kind or package in node.value else []
    return sorted(set(lines))


def _allowed(rel: str, kind: str) -> bool:
    return any(rel.startswith(prefix) and who in ("*", kind) for prefix, who in ALLOWED)


def test_no_module_outside_a_connectors_folder_names_it() -> None:
    kinds = ConnectorRegistry().all()
    offenders = []
    for path in _product_files():
        rel = path.relative_to(ROOT).as_posix()
        source = path.read_text(encoding="utf-8")
        for kind in kinds:
            if rel.startswith(f"connectors/{kind}/") or _allowed(rel, kind):
                continue
            offenders += [f"{rel}:{line}: {kind}" for line in mentions(source, kind)]
    assert offenders == []


def test_the_scan_finds_an_import_a_table_and_an_if_chain() -> None:
    source = '''
"""Docstrings may say kafka."""
from twophase.connectors.kafka import KafkaSink
from twophase.connectors import kafka
TABLE = {"Kafka": 1}
if kind == "kafka":
    name = "twophase.connectors.kafka.sink:KafkaSink"
'''
    assert mentions(source, "kafka") == [3, 4, 5, 6, 7]
    assert mentions(source, "delta") == []


def test_twophase_types_only_the_names_the_declarations_export() -> None:
    """``__init__.py``'s TYPE_CHECKING imports (allowed above) are the declarations' re-exports: a
    stale one fails here; a connector missing there is still exported at run time, typed Any."""
    declared = {n: d.package for d in ConnectorRegistry().all().values() for n in d.top_level}
    typed = {}
    for node in ast.walk(ast.parse((ROOT / "__init__.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("twophase.connectors."):
            typed.update({a.name: node.module for a in node.names})
    assert typed.items() <= declared.items()
