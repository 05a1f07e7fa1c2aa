"""The flights commands that need no service: ``checkpoints list`` and ``checkpoints show``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata, CommittableRecord, SinkSnapshot
from twophase.coordinator.storage import open_storage
from twophase.integration.flights_commands import checkpoints


def _publish(root: Path) -> None:
    storage = open_storage(str(root), "cli_job")
    payload = {"kind": "kafka", "version": 1, "body": {"transactional_id": "twophase-cli_job-kafka-0-1"}}
    storage.publish(
        CheckpointMetadata(
            job_id="cli_job",
            checkpoint_id=1,
            kind=CheckpointKind.CHECKPOINT,
            timestamp_ms=1_700_000_000_000,
            sinks={
                "kafka": SinkSnapshot(2, (CommittableRecord(0, 0, payload, 1),)),
                "delta": SinkSnapshot(2),
            },
            source_position={"engine": "spark", "query_id": "q", "batch_id": 0},
        )
    )
    storage.publish(
        CheckpointMetadata(
            job_id="cli_job",
            checkpoint_id=2,
            kind=CheckpointKind.FINAL,
            timestamp_ms=1_700_000_001_000,
            sinks={"kafka": SinkSnapshot(2), "delta": SinkSnapshot(2)},
            source_position={"engine": "spark", "query_id": "q", "batch_id": 0},
            end_of_input=True,
        )
    )


def test_checkpoints_list_and_show(tmp_path: Path) -> None:
    _publish(tmp_path)
    runner = CliRunner()
    args = ["--checkpoint-dir", str(tmp_path), "--job-id", "cli_job"]

    listed = runner.invoke(checkpoints, ["list", *args])
    assert listed.exit_code == 0, listed.output
    rows = [line.split("│") for line in listed.output.splitlines() if line.startswith("│")]
    ids = [r[1].strip() for r in rows if r[1].strip()]  # wrapped cells continue on rows without an id
    assert ids == ["1", "2"]
    assert "final" in listed.output and "batch 0" in listed.output

    shown = runner.invoke(checkpoints, ["show", "1", *args])
    assert shown.exit_code == 0, shown.output
    body = json.loads(shown.output)
    assert body["checkpoint_id"] == 1
    assert body["sinks"]["kafka"]["committables"][0]["payload"]["body"]["transactional_id"].endswith("-0-1")

    latest = runner.invoke(checkpoints, ["show", *args])
    assert json.loads(latest.output)["kind"] == "final"

    missing = runner.invoke(checkpoints, ["show", "7", *args])
    assert missing.exit_code != 0
