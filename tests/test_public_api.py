"""The public surface is curated (#25 item 5): what users build is importable from ``twophase``;
in ``sinks/`` and ``connectors/`` every other module lives in an ``internal`` package, so the
public modules are exactly the ones listed here; the README and the guides import nothing else."""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from pathlib import Path

import twophase

ROOT = Path(__file__).resolve().parents[1]

PUBLIC_MODULES = {
    "twophase.sinks": {
        "__init__",
        "api",
        "codec",
        "context",
        "errors",
        "outcome",
        "json_codec",
        "listing",
        "registry",
        "s3_options",
        "spark_staging",
    },
    "twophase.connectors.kafka": {
        "__init__",
        "config",
        "sink",
        "errors",
        "oauth",
        "declaration",
        "listing",
        "jvm_jar",
    },
    "twophase.connectors.s3": {"__init__", "config", "sink", "declaration", "listing", "jvm_jar"},
    "twophase.connectors.delta": {"__init__", "config", "sink", "declaration", "listing"},
    "twophase.connectors.postgres": {"__init__", "config", "sink", "metrics", "declaration", "listing"},
    "twophase.connectors.iceberg": {"__init__", "config", "sink", "declaration", "listing", "jvm_jar"},
    "twophase.connectors.azure": {"__init__", "config", "sink", "declaration", "listing"},
    "twophase.connectors.gcs": {"__init__", "config", "sink", "declaration", "listing"},
    "twophase.connectors.objectstore": {"__init__"},
}
"""Package → its public modules. ``sinks.conformance`` is a public package of its own; Kafka's
``oauth`` holds the token callbacks users name in settings, PostgreSQL's ``metrics`` the collector
users register; the Kafka, S3 and Iceberg sinks' ``jvm_jar`` says where their staged writes' jar is
(``staging_jar``), ``sinks.spark_staging`` what a sink implements to stage with a JVM writer; the
object-store file layer the file sinks share (``objectstore``) is no connector and all internal;
every connector's ``declaration`` is what the registry reads (:mod:`twophase.sinks.registry`) and
its ``listing`` what ``twophase lingering`` shows."""

CONFIGS = (
    "KafkaSinkConfig",
    "S3SinkConfig",
    "DeltaSinkConfig",
    "PostgresSinkConfig",
    "IcebergSinkConfig",
    "AzureBlobSinkConfig",
    "RuntimeConfig",
    "CheckpointConfig",
    "CommitPolicy",
    "RestartStrategy",
)


def test_outside_internal_packages_only_the_listed_modules_exist() -> None:
    found = {}
    for package in PUBLIC_MODULES:
        folder = ROOT.joinpath(*package.split(".")[1:])
        found[package] = {p.stem for p in folder.glob("*.py")}
    assert found == PUBLIC_MODULES


def project_types(annotation: object) -> set[type]:
    """The classes of this project an annotation names (through unions, optionals, containers)."""
    out: set[type] = set()
    if isinstance(annotation, type):
        if annotation.__module__.startswith("twophase.") and (
            dataclasses.is_dataclass(annotation) or issubclass(annotation, enum.Enum)
        ):
            out.add(annotation)
        return out
    for arg in typing.get_args(annotation):  # unions (``X | None``) and containers alike
        out |= project_types(arg)
    return out


def test_every_type_a_user_builds_to_configure_a_job_is_importable_from_twophase() -> None:
    needed: set[type] = set()
    for name in CONFIGS:
        config = getattr(twophase, name)
        for annotation in typing.get_type_hints(config).values():
            needed |= project_types(annotation)
    missing = sorted(t.__qualname__ for t in needed if getattr(twophase, t.__name__, None) is not t)
    assert missing == []


def test_the_readme_and_the_guides_import_only_public_modules() -> None:
    private = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for line in path.read_text(encoding="utf-8").splitlines():
            m = re.match(r"\s*(?:from|import) (twophase[\w.]*)", line)
            if m is None:
                continue
            module = m.group(1)
            public = module == "twophase" or module.startswith("twophase.sinks.conformance")
            package, _, leaf = module.rpartition(".")
            public = public or module in PUBLIC_MODULES or leaf in PUBLIC_MODULES.get(package, set())
            if not public:
                private.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert private == []
