"""``twophase demo --store gcs`` (issue #46 item 5): what is still refused, by name and before
anything starts or is written, and what its help says now runs."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from twophase.integration.cli import main


def test_a_gcs_run_with_its_delta_table_on_gs_is_refused_before_anything_starts(tmp_path: Path) -> None:
    work_dir = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        ["demo", "--store", "gcs", "--days", "1", "--work-dir", str(work_dir), "--delta-uri", "gs://b/delta"],
    )
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: Delta on gs:// is refused"), result.output
    assert "fake-gcs-server#331" in lines[0] and "--delta-uri a local path or s3://" in lines[0]
    assert not work_dir.exists()  # no manifest, no service, no Spark


def test_an_azure_run_still_keeps_its_delta_table_on_its_store(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["demo", "--store", "azure", "--work-dir", str(tmp_path / "r"), "--delta-uri", "/tmp/d"]
    )
    assert result.exit_code == 1 and "keeps the Delta table in its own store" in result.output


def test_the_demo_help_says_what_a_gcs_run_keeps_where() -> None:
    result = CliRunner().invoke(main, ["demo", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "refused for now" not in text
    assert "GCS connector" in text and "gs://" in text and "work directory" in text
