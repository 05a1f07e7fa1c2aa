"""The Glue recipe's zip of wheels (docs/deploy/glue.md, #45 item 3) works as written: its
``pip download`` command, run against the built twophase wheel, gathers wheels for Glue 5's
CPython 3.11 on Linux x86-64 without compiling anything, and a fresh venv installs twophase from
the unzipped files alone (``--no-index --find-links``), as a Glue job in a VPC without internet
access does (AWS Glue, "Using Python libraries with AWS Glue": zip of wheels, Glue 5.0 and later).

The download asks the package index (or pip's cache); without either the test is skipped."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from twophase.integration.spark_shipping import build_wheel

pytestmark = [pytest.mark.slow, pytest.mark.long]  # minutes, and PyPI: `make chaos` runs it, not `make test`

PAGE = Path(__file__).resolve().parents[2] / "docs" / "deploy" / "glue.md"


def _documented_download() -> list[str]:
    """The page's ``pip download`` command, as argv after ``pip``."""
    text = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    (block,) = [b for b in blocks if "pip download" in b]
    (line,) = [ln for ln in block.replace("\\\n", " ").splitlines() if ln.startswith("pip download")]
    return shlex.split(line)[1:]


def _pip(python: Path | str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def test_the_documented_zip_of_wheels_installs_twophase_offline(tmp_path: Path) -> None:
    if sys.version_info[:2] != (3, 11) or sys.platform != "linux":
        pytest.skip("imitates Glue 5's CPython 3.11 on Linux")
    wheel = build_wheel()
    args = _documented_download()
    requirement = next(a for a in args if a.startswith("twophase"))
    assert requirement.endswith(f"=={wheel.name.split('-')[1]}"), "the page names another release"
    wheels = tmp_path / "wheels"
    args[args.index("--dest") + 1] = str(wheels)
    download = _pip(sys.executable, *args, "--find-links", str(wheel.parent))
    if download.returncode != 0 and "Could not fetch URL" in download.stderr + download.stdout:
        pytest.skip("no package index reachable")
    assert download.returncode == 0, download.stdout[-2000:] + download.stderr[-2000:]

    # (cd wheels && zip ../twophase-wheels.zip *.whl), then what Glue does with it
    archive = tmp_path / "twophase-wheels.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(wheels.glob("*.whl")):
            zf.write(path, path.name)
    assert not list(wheels.glob("*.tar.gz")), "a source distribution: Glue cannot compile it"
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(unpacked)

    venv = tmp_path / "glue"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = _pip(python, "install", "--no-index", "--find-links", str(unpacked), requirement)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    probe = "from twophase import KafkaSink, S3Sink; import confluent_kafka, boto3; print('ok')"
    run = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert run.stdout.strip() == "ok", run.stderr[-2000:]
