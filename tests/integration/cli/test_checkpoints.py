"""``twophase checkpoints list|show`` and the job options, on checkpoints published here (no
service; a flights run's on Azurite and on fake-gcs-server)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.azure_container import fresh_container
from support.cli import json_output, one_line_error, rendered_columns, run_twophase

from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import payload_bytes
from twophase.coordinator.storage import AzureStorageOptions, GcsStorageOptions, open_storage
from twophase.integration.cli import main
from twophase.integration.cli.checkpoints import checkpoints
from twophase.integration.jobs.flights import FlightsJobSpec
from twophase.integration.services.azurite import CONNECTION_STRING_ENV, AzureBlobEndpoint
from twophase.integration.services.gcs_server import ENDPOINT_ENV, PROJECT, GcsEndpoint

KAFKA_PAYLOAD = {"kind": "kafka", "version": 1, "body": {"transactional_id": "twophase-cli_job-kafka-0-1"}}


def _publish(
    root: Path | str,
    job: str = "cli_job",
    azure: AzureStorageOptions | None = None,
    gcs: GcsStorageOptions | None = None,
) -> None:
    storage = open_storage(str(root), job, azure_options=azure, gcs_options=gcs, env={})
    storage.publish(
        CheckpointMetadata(
            job_id=job,
            checkpoint_id=1,
            kind=CheckpointKind.CHECKPOINT,
            timestamp_ms=1_700_000_000_000,
            sinks={
                "kafka": SinkSnapshot(2, (CommittableRecord(0, 0, payload_bytes(KAFKA_PAYLOAD), 1),)),
                "delta": SinkSnapshot(2),
            },
            source_position={"engine": "spark", "query_id": "q", "batch_id": 0},
        )
    )
    storage.publish(
        CheckpointMetadata(
            job_id=job,
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

    listed = runner.invoke(checkpoints, ["list", *args], terminal_width=80)
    assert listed.exit_code == 0, listed.output
    ids, kinds, *_ = rendered_columns(listed.output)
    assert (ids, kinds) == ("12", "checkpointfinal")
    assert "batch 0" in listed.output and "kafka: 1" in listed.output

    shown = runner.invoke(checkpoints, ["show", "1", *args])
    assert shown.exit_code == 0, shown.output
    body = json.loads(shown.output)
    assert body["checkpoint_id"] == 1
    assert body["sinks"]["kafka"]["committables"][0]["payload"] == KAFKA_PAYLOAD

    latest = runner.invoke(checkpoints, ["show", *args])
    assert json.loads(latest.output)["kind"] == "final"
    assert json.loads(runner.invoke(checkpoints, ["show", "--json", *args]).output)["kind"] == "final"

    missing = runner.invoke(checkpoints, ["show", "7", *args])
    assert missing.exit_code == 1
    assert missing.output.strip() == "Error: job cli_job has no retained checkpoint 7"


def test_checkpoints_list_json(tmp_path: Path) -> None:
    _publish(tmp_path)

    result = CliRunner().invoke(
        main, ["checkpoints", "list", "--json", "--checkpoint-dir", str(tmp_path), "--job", "CLI job"]
    )

    body = json.loads(result.output)
    assert body["job_id"] == "cli_job"  # derived from the name as Job does
    assert [(c["id"], c["kind"], c["end_of_input"]) for c in body["checkpoints"]] == [
        (1, "checkpoint", False),
        (2, "final", True),
    ]
    first = body["checkpoints"][0]
    assert first["sinks"] == {
        "delta": {"num_partitions": 2, "committables": 0, "in_progress": 0},
        "kafka": {"num_partitions": 2, "committables": 1, "in_progress": 0},
    }
    assert first["source_position"] == {"engine": "spark", "query_id": "q", "batch_id": 0}
    assert first["completed_utc"] == "2023-11-14 22:13:20"
    assert first["location"].endswith("chk-1/_metadata")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--job", "a", "--job-id", "a"], "give --job NAME or --job-id ID, not both"),
        (["--checkpoint-dir", "/tmp/x"], "--checkpoint-dir and --job/--job-id go together"),
        (["--work-dir", "/tmp/x", "--job-id", "a"], "--work-dir names a flights run"),
        (["--sinks", "nocolon"], "'nocolon' is not module:function"),
    ],
)
def test_job_options_that_do_not_go_together(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["checkpoints", "list", *args])

    assert result.exit_code == 2
    assert message in result.output


def _factory_module(folder: Path, checkpoint_dir: Path) -> None:
    (folder / "weather_job.py").write_text(
        textwrap.dedent(
            f"""
            from twophase import Job
            from support.file_sink import JsonLinesFileSink

            def sinks():
                return [JsonLinesFileSink("archive", {str(checkpoint_dir / "out")!r})]

            def job():
                j = Job(None, "Weather Job", {str(checkpoint_dir)!r})
                for s in sinks():
                    j.sink(s)
                return j

            def broken():
                raise RuntimeError("no credentials")

            def not_sinks():
                return {{"archive": 1}}
            """
        )
    )


def test_sinks_factory_from_the_current_directory(tmp_path: Path) -> None:
    _publish(tmp_path, "weather_job")
    _factory_module(tmp_path, tmp_path)

    from_job = run_twophase(
        ["checkpoints", "list", "--json", "--sinks", "weather_job:job"], tmp_path, cwd=tmp_path
    )
    assert json_output(from_job)["job_id"] == "weather_job"
    assert [c["id"] for c in json_output(from_job)["checkpoints"]] == [1, 2]

    listed = run_twophase(
        ["checkpoints", "list", "--json", "--sinks", "weather_job:sinks", "--checkpoint-dir", str(tmp_path),
         "--job-id", "weather_job"],
        tmp_path,
        cwd=tmp_path,
    )  # fmt: skip
    assert [c["id"] for c in json_output(listed)["checkpoints"]] == [1, 2]

    contradicting = run_twophase(
        ["checkpoints", "list", "--sinks", "weather_job:job", "--job-id", "other"], tmp_path, cwd=tmp_path
    )
    assert contradicting.returncode == 2
    assert "contradicts the job's 'weather_job'" in contradicting.stderr


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("no_such_module:job", "Error: --sinks no_such_module:job: cannot import 'no_such_module'"),
        ("weather_job:nothing", "Error: --sinks weather_job:nothing: 'weather_job' has no 'nothing'"),
        (
            "weather_job:broken",
            "Error: --sinks weather_job:broken: the factory raised RuntimeError: no credentials",
        ),
        (
            "weather_job:not_sinks",
            "Error: --sinks weather_job:not_sinks: expected a list of TwoPhaseCommitSink",
        ),
    ],
)
def test_bad_factories_fail_in_one_line(tmp_path: Path, factory: str, message: str) -> None:
    _factory_module(tmp_path, tmp_path)

    result = run_twophase(["checkpoints", "list", "--sinks", factory], tmp_path, cwd=tmp_path)

    assert one_line_error(result).startswith(message)


def test_a_mistyped_directory_or_job_is_refused_in_one_line(tmp_path: Path) -> None:
    """#45 item 9: listing nothing for a typo read as "no checkpoint yet" and exited 0."""
    _publish(tmp_path)
    runner = CliRunner()
    typo = runner.invoke(
        checkpoints, ["list", "--checkpoint-dir", str(tmp_path / "nope"), "--job-id", "cli_job"]
    )
    assert typo.exit_code == 1
    assert (
        typo.output.strip()
        == f"Error: checkpoint directory {tmp_path / 'nope'} does not exist; check --checkpoint-dir"
    )
    other = runner.invoke(checkpoints, ["list", "--checkpoint-dir", str(tmp_path), "--job-id", "cli_jb"])
    assert other.exit_code == 1
    assert other.output.strip() == (
        f"Error: no job 'cli_jb' in {tmp_path} (jobs there: cli_job); check --job or --job-id"
    )


@pytest.mark.slow
def test_a_flights_run_on_azure_is_read_with_the_account_the_demo_uses(
    tmp_path: Path, azure_endpoint: AzureBlobEndpoint
) -> None:
    """A ``--store azure`` run's checkpoints on ``abfss://`` are opened with the demo's account
    (``TWOPHASE_AZURE_CONNECTION_STRING`` here), not the ``AZURE_STORAGE_*`` chain; without one,
    one line says how to give it."""
    assert azure_endpoint.account_name == "twophase"  # the account of the flights run's abfss:// URLs
    not_azure_cli = {f"AZURE_STORAGE_{name}": "" for name in ("CONNECTION_STRING", "KEY", "SAS_TOKEN")}
    with fresh_container(azure_endpoint, "cli-checkpoints") as c:
        container = c.root.removeprefix("abfss://").split("@", 1)[0]
        spec = FlightsJobSpec.on_store("azure", "cli_job", tmp_path / "w", bucket=container)
        spec.save()
        _publish(spec.checkpoint_dir, azure=c.options)
        args = ["checkpoints", "list", "--json", "--work-dir", spec.work_dir]

        listed = run_twophase(
            args,
            tmp_path,
            {CONNECTION_STRING_ENV: azure_endpoint.connection_string(), **not_azure_cli},
            timeout_s=120,
        )
        body = json_output(listed)
        assert body["checkpoint_dir"] == f"{c.root}/checkpoints/cli_job"
        assert [(e["id"], e["kind"], e["end_of_input"]) for e in body["checkpoints"]] == [
            (1, "checkpoint", False),
            (2, "final", True),
        ]
        assert azure_endpoint.account_key not in listed.stdout + listed.stderr

        shown = run_twophase(
            ["checkpoints", "show", "--work-dir", spec.work_dir],
            tmp_path,
            {CONNECTION_STRING_ENV: azure_endpoint.connection_string(), **not_azure_cli},
            timeout_s=120,
        )
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["kind"] == "final"

        no_account = run_twophase(args, tmp_path, not_azure_cli, timeout_s=120)
        assert one_line_error(no_account) == (
            f"Error: the run's checkpoints are on {spec.checkpoint_dir}: run `twophase services up "
            "--azure` or set TWOPHASE_AZURE_CONNECTION_STRING"
        )


@pytest.mark.slow
def test_a_flights_run_on_gcs_is_read_from_the_emulator_the_demo_uses(
    tmp_path: Path, gcs_endpoint: GcsEndpoint
) -> None:
    """A ``--store gcs`` run's checkpoints on ``gs://`` are opened at the demo's emulator
    (``TWOPHASE_GCS_ENDPOINT`` here), not Application Default Credentials; without one, one line
    says how to give it."""
    bucket = "cli-checkpoints-gcs"
    gcs_endpoint.ensure_bucket(bucket)
    spec = FlightsJobSpec.on_store("gcs", "cli_job", tmp_path / "w", bucket=bucket)
    spec.save()
    _publish(spec.checkpoint_dir, gcs=GcsStorageOptions(project=PROJECT, emulator_host=gcs_endpoint.url))
    not_google = {"STORAGE_EMULATOR_HOST": "", "GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent"}
    args = ["checkpoints", "list", "--json", "--work-dir", spec.work_dir]

    listed = run_twophase(args, tmp_path, {ENDPOINT_ENV: gcs_endpoint.url, **not_google}, timeout_s=120)
    body = json_output(listed)
    assert body["checkpoint_dir"] == f"gs://{bucket}/checkpoints/cli_job"
    assert [(e["id"], e["kind"], e["end_of_input"]) for e in body["checkpoints"]] == [
        (1, "checkpoint", False),
        (2, "final", True),
    ]

    no_emulator = run_twophase(args, tmp_path, {ENDPOINT_ENV: "", **not_google}, timeout_s=120)
    assert one_line_error(no_emulator) == (
        f"Error: the run's checkpoints are on {spec.checkpoint_dir}: run `twophase services up "
        "--gcs` or set TWOPHASE_GCS_ENDPOINT"
    )
