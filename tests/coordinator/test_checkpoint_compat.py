"""Checkpoints written by earlier releases still restore.

``tests/fixtures/checkpoints_v2`` was written by the code of commit e18c614 (checkpoint format v2,
the release before format v3's manifests) with its ``make_fixture.py``: the same three sinks, the
third checkpoint published and never committed; ``runtime.json`` holds its ``_metadata`` files
base64-encoded (they are zlib streams).

``tests/fixtures/checkpoints_v1`` was written by the code of commit aecbfc0 (before the runtime
was split along its seams): a job of three fake sinks (per-committable, in-progress files, one
commit per checkpoint) whose last checkpoint was persisted but not committed, the fake external
system's state at that moment, and one payload of every connector committable kind.
"""

from __future__ import annotations

import base64
import json
import shutil
import zlib
from pathlib import Path
from typing import Any, cast

import pytest
from support.fakes import (
    FakeCheckpointSink,
    FakeExternalSystem,
    FakeInProgressSink,
    FakeSink,
)
from support.harness import TwoPhaseHarness, batch
from support.memory_storage import InMemoryCheckpointStorage

from twophase.connectors.delta.internal.committable import CODEC as DELTA_CODEC
from twophase.connectors.kafka.internal.committable import CODEC as KAFKA_CODEC
from twophase.connectors.s3.internal.committable import COMMITTABLE_CODEC, IN_PROGRESS_CODEC
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.storage.local import LocalCheckpointStorage

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints_v1"
FIXTURE_V2 = FIXTURE.parent / "checkpoints_v2"
JOB = "fixture_job"


def _system(fixture: Path = FIXTURE) -> FakeExternalSystem:
    state: dict[str, Any] = json.loads((fixture / "external.json").read_text())
    return FakeExternalSystem(
        open={k: list(v) for k, v in state["open"].items()},
        prepared={k: list(v) for k, v in state["prepared"].items()},
        committed={k: list(v) for k, v in state["committed"].items()},
        aborted=set(state["aborted"]),
        released=set(state["released"]),
        owner={k: (v[0], v[1], int(v[2])) for k, v in state["owner"].items()},
    )


def test_every_fixture_checkpoint_loads() -> None:
    metas = [
        CheckpointMetadata.loads(p.read_bytes())
        for p in sorted((FIXTURE / "runtime" / JOB).glob("chk-*/_metadata"))
    ]
    assert [m.checkpoint_id for m in metas] == [2, 3]
    assert metas[-1].source_position == {"engine": "spark", "query_id": "q-1", "batch_id": 2}


@pytest.mark.parametrize(
    ("kind", "codec"),
    [
        ("kafka.transaction", KAFKA_CODEC),
        ("s3.files", COMMITTABLE_CODEC),
        ("s3.in_progress", IN_PROGRESS_CODEC),
        ("delta.add", DELTA_CODEC),
    ],
)
def test_connector_payloads_of_v1_still_decode(kind: str, codec: Any) -> None:
    payload = json.loads((FIXTURE / "payloads.json").read_text())[kind]
    decoded = codec.from_json(payload)
    again = codec.to_json(decoded)
    assert codec.from_json(again) == decoded
    # every field v1 wrote keeps its value; fields added since (a newer version) take their defaults
    assert again["kind"] == payload["kind"] and again["version"] >= payload["version"]
    assert _contains(again["body"], payload["body"])


def _contains(new: Any, old: Any) -> bool:
    if isinstance(old, dict):
        return isinstance(new, dict) and all(k in new and _contains(new[k], v) for k, v in old.items())
    if isinstance(old, list):
        return isinstance(new, list) and len(new) == len(old) and all(map(_contains, new, old))
    return bool(new == old)


def _sinks(system: FakeExternalSystem) -> list[Any]:
    """The fixture job's sinks: per-committable, in-progress files, one commit per checkpoint."""
    return [
        FakeSink("plain", system),
        FakeInProgressSink("files", system, roll_records=3),
        FakeCheckpointSink("table", system),
    ]


def _next_epoch(h: TwoPhaseHarness) -> None:
    """The epoch after the fixture's last checkpoint (batch 3: records k and l)."""
    h.write_epoch(
        [[batch(["k"])], [batch(["l"])]],
        source_position={"engine": "spark", "query_id": "q-1", "batch_id": 3},
    )


def _finish_exactly_once(h: TwoPhaseHarness, system: FakeExternalSystem) -> None:
    """Finish the job: every record a to l committed once per sink, nothing lingering."""
    h.runtime.finish()
    expected = list("abcdefghijkl")
    for name in ("plain", "files", "table"):
        got = sorted(k for txn, ks in system.committed.items() if txn.startswith(name + "-") for k in ks)
        assert got == expected, name
    assert system.violations == []
    assert system.lingering() == set()


def test_a_v1_checkpoint_restores_recommits_and_resumes(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE / "runtime", tmp_path / "runtime")
    system = _system()
    sinks = _sinks(system)
    # the harness uses only CheckpointStorage's calls on it here (no in-memory test hooks)
    local = cast(InMemoryCheckpointStorage, LocalCheckpointStorage(tmp_path / "runtime", JOB))
    h = TwoPhaseHarness(sinks, job_id=JOB, storage=local)
    restored = h.restore()
    assert restored.checkpoint_id == 3 and restored.recommitted == 4
    assert not h.runtime.replay_check({"engine": "spark", "query_id": "q-1", "batch_id": 3})
    _next_epoch(h)
    _finish_exactly_once(h, system)


def _v2_runtime(into: Path) -> Path:
    """The v2 fixture's checkpoint directory, written out under ``into``."""
    files: dict[str, str] = json.loads((FIXTURE_V2 / "runtime.json").read_text())
    for rel, text in files.items():
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        (into / rel).write_bytes(base64.b64decode(text))
    return into


def test_a_v2_checkpoint_restores_recommits_and_continues_in_v3(tmp_path: Path) -> None:
    runtime = _v2_runtime(tmp_path / "runtime")
    stored = (runtime / JOB / "chk-3" / "_metadata").read_bytes()
    assert stored[:1] == b"x" and json.loads(zlib.decompress(stored))["version"] == 2
    system = _system(FIXTURE_V2)
    sinks = _sinks(system)
    local = LocalCheckpointStorage(runtime, JOB)
    h = TwoPhaseHarness(sinks, job_id=JOB, storage=cast(InMemoryCheckpointStorage, local))
    restored = h.restore()
    assert restored.checkpoint_id == 3 and restored.recommitted == 4
    assert not h.runtime.replay_check({"engine": "spark", "query_id": "q-1", "batch_id": 3})
    _next_epoch(h)
    # the new checkpoint is a version 3 manifest over Arrow files, and restores in a new process
    newest = local.list_checkpoints()[-1]
    assert json.loads(zlib.decompress(Path(newest.location).read_bytes()))["version"] == 3
    assert any(p.suffix == ".arrow" for p in Path(newest.location).parent.iterdir())
    again = LocalCheckpointStorage(runtime, JOB).load(newest)
    assert again == local.load(newest) and again.checkpoint_id == 4
    _finish_exactly_once(h, system)
