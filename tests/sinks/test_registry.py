"""Connectors declare themselves once (#45 item 4): a toy connector registered here through its
declaration alone is built by the ``.format("twophase")`` data source, listed by the lingering tool
and by ``twophase lingering``, and re-exported by ``twophase``; the five connectors are found
without being named."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import support.toy_connector as toy
from click.testing import CliRunner
from support.file_sink import FileCommittable

import twophase
from twophase.coordinator.spark.default_source import TwophaseDataSource, sink_from_options
from twophase.integration.cli.main import main
from twophase.integration.lingering import list_lingering
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError, MissingExtraError
from twophase.sinks.listing import ItemStatus
from twophase.sinks.registry import CONNECTORS, ConnectorDeclaration, ConnectorRegistry


@pytest.fixture
def registered() -> Iterator[ConnectorDeclaration]:
    CONNECTORS.register(toy.DECLARATION)
    try:
        yield toy.DECLARATION
    finally:
        CONNECTORS.unregister(toy.DECLARATION.kind)
        vars(twophase).pop("ToySink", None)
        vars(twophase).pop("__all__", None)


def _pre_commit(sink: toy.ToySink, job_id: str, checkpoint_id: int) -> FileCommittable:
    ctx = WriterContext(
        job_id=job_id,
        sink_name=sink.name,
        checkpoint_id=checkpoint_id,
        partition=0,
        attempt=0,
        num_partitions=1,
    )
    txn = sink.begin_transaction(ctx)
    sink.write(txn, pa.RecordBatch.from_pylist([{"id": checkpoint_id}]))
    committable = sink.pre_commit(txn)
    assert committable is not None
    return committable


def test_the_connectors_of_the_package_are_found_by_their_declarations() -> None:
    declared = ConnectorRegistry().all()  # a fresh registry: discovery alone
    assert sorted(declared) == ["azure", "delta", "gcs", "iceberg", "kafka", "postgres", "s3"]
    for kind, declaration in declared.items():
        assert declaration.package == f"twophase.connectors.{kind}"
        assert declaration.extra == kind and declaration.libraries
        assert set(declaration.top_level) <= set(declaration.exports)


def test_the_data_source_builds_a_connector_it_knows_only_by_its_declaration(
    registered: ConnectorDeclaration, tmp_path: Path
) -> None:
    sink = TwophaseDataSource(
        {"sink": "toy", "root": str(tmp_path), "toy.team": "ops", "fsync": "false"}
    ).build_sink({"sink": "toy", "root": str(tmp_path), "toy.team": "ops", "fsync": "false"})
    assert isinstance(sink, toy.ToySink) and sink.name == "toy"
    assert sink.config == toy.ToySinkConfig(root=str(tmp_path), labels={"team": "ops"}, fsync=False)
    with pytest.raises(
        ConfigError, match=r"unknown option\(s\) \['rot'\] for sink 'toy'; it takes \['root', "
    ):
        sink_from_options({"sink": "toy", "root": str(tmp_path), "rot": "x"})
    with pytest.raises(ConfigError, match=r"""option "sink" must be one of \[.*'toy'\], got 'toys'"""):
        sink_from_options({"sink": "toys"})


def test_without_the_declaration_the_data_source_does_not_know_the_kind(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"""option "sink" must be one of """
        r"""\['azure', 'delta', 'gcs', 'iceberg', 'kafka', 'postgres', 's3'\]""",
    ):
        sink_from_options({"sink": "toy", "root": str(tmp_path)})


def test_the_lingering_tool_lists_a_declared_connectors_sink(
    registered: ConnectorDeclaration, tmp_path: Path
) -> None:
    sink = registered.build_sink("events", toy.ToySinkConfig(root=str(tmp_path)))
    assert isinstance(sink, toy.ToySink)
    held = _pre_commit(sink, "job_a", 1)
    loose = _pre_commit(sink, "job_a", 2)
    listed = list_lingering(sink, LingeringScope("job_a", "events", held=(held,)))
    assert (listed.kind, listed.what, listed.listable) == ("toy", "staging files", True)
    assert listed.ids(ItemStatus.HELD) == [Path(held.staging).name]
    assert listed.ids(ItemStatus.LINGERING) == [Path(loose.staging).name]


def test_a_sink_no_declaration_names_is_not_listable(tmp_path: Path) -> None:
    sink = toy.ToySink("events", toy.ToySinkConfig(root=str(tmp_path)))  # toy is not registered
    listed = list_lingering(sink, LingeringScope("job_a", "events"))
    assert (listed.kind, listed.listable) == ("ToySink", False)


def test_twophase_lingering_lists_and_aborts_a_declared_connectors_sink(
    registered: ConnectorDeclaration, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(toy, "ROOT", tmp_path / "out")
    (sink,) = toy.toy_sinks()
    loose = _pre_commit(sink, "job_b", 1)
    args = [
        "lingering",
        "--sinks",
        "support.toy_connector:toy_sinks",
        "--checkpoint-dir",
        str(tmp_path / "chk"),
    ]
    result = CliRunner().invoke(main, [*args, "--job-id", "job_b", "--abort", "--force", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    (before,) = body["sinks"]
    assert (before["type"], before["lingering"], before["held"]) == ("toy", 1, 0)
    assert [i["id"] for i in before["items"]] == [Path(loose.staging).name]
    assert body["aborted"] == {"toy": 1} and body["after"][0]["lingering"] == 0


def test_twophase_lingering_builds_the_sink_from_the_querys_options(
    registered: ConnectorDeclaration, tmp_path: Path
) -> None:
    """A data-source job has options, not a sinks factory: ``-o`` takes them as its query gave them."""
    sink = registered.build_sink("events", toy.ToySinkConfig(root=str(tmp_path / "out")))
    assert isinstance(sink, toy.ToySink)
    loose = _pre_commit(sink, "orders", 1)
    query = {
        "sink": "toy",
        "sinkName": "events",
        "root": str(tmp_path / "out"),
        "toy.team": "ops",
        "jobId": "orders",
        "twophaseCheckpointDir": str(tmp_path / "chk"),
        "checkpointLocation": str(tmp_path / "spark-chk"),
    }
    args = [a for k, v in query.items() for a in ("-o", f"{k}={v}")]
    result = CliRunner().invoke(main, ["lingering", *args, "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert (body["job_id"], body["origin"]) == ("orders", "-o options (sink toy)")
    (listed,) = body["sinks"]
    assert (listed["sink"], listed["type"], listed["lingering"]) == ("events", "toy", 1)
    assert [i["id"] for i in listed["items"]] == [Path(loose.staging).name]
    wrong = CliRunner().invoke(main, ["lingering", *args, "-o", "rot=x"])
    assert wrong.exit_code == 1
    assert wrong.output.startswith("Error: unknown option(s) ['rot'] for sink 'toy'; it takes ['root', ")


def test_twophase_re_exports_what_a_declaration_names(registered: ConnectorDeclaration) -> None:
    assert twophase.ToySink is toy.ToySink
    assert "ToySink" in twophase.__all__ and "ToySinkConfig" not in twophase.__all__
    with pytest.raises(AttributeError):
        _ = twophase.ToySinkConfig


def test_a_missing_client_library_names_the_extra_to_install(
    registered: ConnectorDeclaration, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = ConnectorDeclaration(
        kind="toy_missing",
        title="Toy",
        package="toy_client_library",
        config="toy_client_library.config:Config",
        sink="toy_client_library.sink:Sink",
        extra="toy",
        libraries={"toy_client_library": "toy-client-library"},
    )
    with pytest.raises(MissingExtraError, match=r"pip install 'twophase\[toy\]'") as caught:
        missing.config_class()
    assert (caught.value.kind, caught.value.extra, caught.value.library) == (
        "toy_missing",
        "toy",
        "toy-client-library",
    )
    unrelated = ConnectorDeclaration(
        kind="toy_bad", title="Toy", package="x", config="no_such_module:C", sink="x:S"
    )
    with pytest.raises(ModuleNotFoundError):  # not a library of its extra: no advice to install one
        unrelated.config_class()


def test_a_kind_is_declared_once_and_a_declaration_is_checked() -> None:
    registry = ConnectorRegistry()
    registry.register(toy.DECLARATION)
    registry.register(toy.DECLARATION)  # again: the same declaration, nothing changes
    other = ConnectorDeclaration(kind="toy", title="Other", package="x", config="x:C", sink="x:S")
    with pytest.raises(ConfigError, match="connector kind 'toy' is declared twice"):
        registry.register(other)
    with pytest.raises(ConfigError, match="lower-case identifier"):
        ConnectorDeclaration(kind="Toy", title="T", package="x", config="x:C", sink="x:S")
    with pytest.raises(ConfigError, match="is not 'module:attribute'"):
        ConnectorDeclaration(kind="t", title="T", package="x", config="x.C", sink="x:S")
    with pytest.raises(ConfigError, match=r"top_level names \['S'\] are not in its exports"):
        ConnectorDeclaration(kind="t", title="T", package="x", config="x:C", sink="x:S", top_level=("S",))


def test_a_connector_of_another_distribution_is_found_by_its_entry_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    point = importlib.metadata.EntryPoint("toy", "support.toy_connector:DECLARATION", "twophase.connectors")
    found = importlib.metadata.EntryPoints([point])

    def entry_points(group: str) -> importlib.metadata.EntryPoints:
        return found if group == "twophase.connectors" else importlib.metadata.EntryPoints([])

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    declared = ConnectorRegistry().all()
    assert declared["toy"] is toy.DECLARATION and "kafka" in declared


def test_each_connector_package_exports_what_its_declaration_names() -> None:
    for declaration in ConnectorRegistry().all().values():
        package = importlib.import_module(declaration.package)
        assert sorted(package.__all__) == sorted(declaration.exports)
        assert set(package.__all__) <= set(dir(package))
        for name in declaration.exports:
            assert getattr(package, name).__name__ == name
