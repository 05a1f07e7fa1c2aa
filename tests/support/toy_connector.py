"""A toy connector that exists only through its declaration: the proof that adding a connector
touches its own folder alone (the data source, ``twophase lingering`` and ``twophase``'s exports
find it by :data:`DECLARATION`, registered by the test that uses it).

Its sink is the JSON-lines file sink of the Spark suites under a config dataclass; its listing
names the staging files that no checkpoint holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.file_sink import FileCommittable, JsonLinesFileSink
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConfigError
from twophase.sinks.listing import LingeringItem, SinkLingering, sorted_items
from twophase.sinks.registry import ConnectorDeclaration


@dataclass(frozen=True)
class ToySinkConfig:
    """Where the toy sink writes, and free-form labels (``toy.<key>`` options)."""

    root: str
    labels: Mapping[str, str] = field(default_factory=dict)
    fsync: bool = True

    def __post_init__(self) -> None:
        if not self.root:
            raise ConfigError("toy: root must name a folder")


class ToySink(JsonLinesFileSink):
    """The JSON-lines file sink, built as every connector's sink is: ``ToySink(name, config)``."""

    def __init__(self, name: str, config: ToySinkConfig) -> None:
        super().__init__(name, config.root)
        self.config = config


def list_lingering(sink: ToySink, scope: LingeringScope[FileCommittable]) -> SinkLingering:
    """The job's staging files, held when a retained checkpoint holds them."""
    staging = Path(sink.root) / "_staging" / scope.job_id / scope.sink_name
    held = {Path(c.staging).name for c in scope.held}
    found = sorted(p.name for p in staging.iterdir()) if staging.is_dir() else []
    items = sorted_items(LingeringItem.of(name, name in held, "staging file") for name in found)
    return SinkLingering(scope.sink_name, DECLARATION.kind, "staging files", items, detail=str(staging))


DECLARATION = ConnectorDeclaration(
    kind="toy",
    title="Toy",
    package="support.toy_connector",
    config="support.toy_connector:ToySinkConfig",
    sink="support.toy_connector:ToySink",
    extra="toy",
    libraries={"toy_client_library": "toy-client-library"},
    exports={"ToySink": "", "ToySinkConfig": ""},
    top_level=("ToySink",),
    listing="support.toy_connector:list_lingering",
    mapping_options={"toy.": "labels"},
)
"""The toy connector's declaration (not registered until a test does)."""

ROOT: Path | None = None
"""Where :func:`toy_sinks` puts its sink (a test sets it)."""


def toy_sinks() -> list[Any]:
    """The ``--sinks`` factory of ``twophase lingering``: one toy sink under :data:`ROOT`."""
    assert ROOT is not None
    return [DECLARATION.build_sink("toy", ToySinkConfig(root=str(ROOT)))]
