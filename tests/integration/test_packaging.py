"""The distribution installs under ONE root, ``twophase``, and holds product code only.

The repository's top-level folders keep their places; setuptools' ``package_dir`` maps the
repository root to the package ``twophase``. These tests build the real wheel with pip and read it:
the wheel users install holds no development tooling (#45 item 4: no service launcher, chaos or
compat runner, flights demo, verifier or ``setup.py``), its commands offer users only what runs
there, and pip resolves a PostgreSQL-only install without a Kafka, Delta, Iceberg or boto3 library,
showing the license and the project's URLs (#45 item 5).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from support.build_layout import development, product_packages

from twophase.integration.spark_shipping import build_wheel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_path() -> Path:
    """The wheel users install (from a copy: no ``build/`` here, whose stale ``build/lib`` would
    carry deleted modules into a wheel built in place)."""
    return build_wheel(ROOT, development=False)


@pytest.fixture(scope="module")
def wheel(wheel_path: Path) -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel_path)


@pytest.mark.slow
def test_the_wheel_installs_only_the_twophase_root(wheel: zipfile.ZipFile) -> None:
    """Besides ``twophase``: the one module Spark's data source lookup needs at the top level."""
    tops = {PurePosixPath(n).parts[0] for n in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"twophase", "pyspark_twophase.py"}
    module = wheel.read("pyspark_twophase.py").decode()
    assert "DefaultSource = TwophaseDataSource" in module


@pytest.mark.slow
def test_every_product_package_and_no_test_module_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    packages = {str(PurePosixPath(n).parent).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    packages |= {"twophase"} if "twophase/__init__.py" in names else set()
    assert packages == product_packages()
    tests = [n for n in names if PurePosixPath(n).name.startswith("test_") or n.endswith("/conftest.py")]
    assert tests == []
    assert "twophase/py.typed" in names
    # the conformance kit ships: sink authors run it from their own test suites (#25 item 4)
    assert "twophase/sinks/conformance/contract.py" in names
    # the JVM halves of the S3 and Kafka sinks' Spark-staged writes, built by Maven with the wheel
    # (#44 item 4); their sources stay in the checkout
    assert "twophase/connectors/s3/jvm/twophase-s3-staging.jar" in names
    assert "twophase/connectors/kafka/jvm/twophase-kafka-staging.jar" in names
    assert [n for n in names if n.endswith((".java", "/pom.xml")) and "/connectors/" in n] == []


@pytest.mark.slow
def test_the_console_script_points_into_the_root(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "twophase = twophase.integration.cli:main" in wheel.read(entry_points).decode()


@pytest.mark.slow
def test_the_wheel_carries_the_license_and_one_version(wheel: zipfile.ZipFile) -> None:
    """#45 item 5: the Apache-2.0 text beside the metadata; the version is ``__init__.py``'s."""
    from twophase import __version__

    licenses = [n for n in wheel.namelist() if ".dist-info/" in n and PurePosixPath(n).name == "LICENSE"]
    assert len(licenses) == 1 and b"Apache License" in wheel.read(licenses[0])
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    fields = wheel.read(metadata).decode()
    assert f"\nVersion: {__version__}\n" in fields
    assert "License :: OSI Approved :: Apache Software License" in fields


@pytest.mark.slow
def test_the_wheel_holds_no_development_tooling(wheel: zipfile.ZipFile) -> None:
    """What the wheel holds outside the runtime, the sink API and the connectors: the user commands
    and the lingering tool, nothing of setup.py's DEVELOPMENT, nor setup.py itself."""
    names = wheel.namelist()
    held = {n.removeprefix("twophase/") for n in names if n.startswith("twophase/")}
    assert sorted(n for n in held if n.count("/") == 0) == ["__init__.py", "py.typed"]
    assert sorted(n for n in held if n.startswith("integration/")) == [
        f"integration/{n}"
        for n in (
            "__init__.py",
            "cli/__init__.py",
            "cli/__main__.py",
            "cli/checkpoints.py",
            "cli/errors.py",
            "cli/lingering.py",
            "cli/main.py",
            "cli/output.py",
            "cli/target.py",
            "lingering.py",
            "operations.py",
            "py.typed",
        )
    ]
    for path in development():  # the launchers, chaos, compat, the demo, its verifier: none of them
        assert not any(n == path or n.startswith(path + "/") for n in held), path


@pytest.mark.slow
def test_the_project_runs_ship_the_development_wheel() -> None:
    """The flights job runs on the project's own cluster drivers and executors: their wheel keeps it."""
    names = set(zipfile.ZipFile(build_wheel(ROOT)).namelist())
    assert {
        "twophase/integration/jobs/flights.py",
        "twophase/integration/services/launcher.py",
        "twophase/integration/services/jvm/kafka/pom.xml",
        "twophase/integration/chaos/run.py",
    } <= names
    assert "twophase/setup.py" not in names


def _installed_cli(target: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``twophase ARGS`` from the wheel installed in ``target`` (its own dependencies are this
    venv's), started outside the checkout."""
    env = {**os.environ, "PYTHONPATH": str(target)}
    cmd = [sys.executable, "-m", "twophase.integration.cli", *args]
    return subprocess.run(cmd, cwd=target, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_the_installed_commands_offer_users_what_runs_there(wheel_path: Path, tmp_path: Path) -> None:
    """#45 items 4 and 9: from an installed wheel, --help lists the user commands only, the
    development ones are unknown, and a job not given or not there ends with one line, non-zero."""
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
    subprocess.run([*pip, str(wheel_path)], check=True, timeout=300)
    where = subprocess.run(
        [sys.executable, "-c", "import twophase; print(twophase.__file__)"],
        cwd=target,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).parent == target / "twophase"

    top = _installed_cli(target, "--help")
    assert top.returncode == 0, top.stderr
    assert "Commands for your jobs:" in top.stdout and "Development of twophase" not in top.stdout
    listed = {line.split()[0] for line in top.stdout.split("Commands for your jobs:")[1].splitlines() if line}
    assert listed == {"checkpoints", "lingering"}
    for command in ("package", "demo", "services", "verify"):
        gone = _installed_cli(target, command, "--help")
        assert gone.returncode == 2 and f"No such command '{command}'" in gone.stderr
    assert "--work-dir" not in _installed_cli(target, "checkpoints", "list", "--help").stdout

    no_job = _installed_cli(target, "checkpoints", "list")
    assert no_job.returncode == 2 and "which job? Give --checkpoint-dir DIR" in no_job.stderr
    assert no_job.stderr.strip().splitlines()[-1].startswith("Error: which job?")
    mistyped = _installed_cli(
        target, "checkpoints", "list", "--checkpoint-dir", str(tmp_path / "chekpoints"), "--job-id", "j"
    )
    assert mistyped.returncode == 1 and len(mistyped.stderr.strip().splitlines()) == 1, mistyped.stderr
    assert mistyped.stderr.startswith("Error: ")
    version = _installed_cli(target, "--version")
    assert version.returncode == 0 and version.stdout.startswith("twophase, version ")


@pytest.mark.slow
def test_a_postgres_only_install_resolves_without_kafka_delta_iceberg_or_boto3(
    wheel_path: Path, tmp_path: Path
) -> None:
    """pip's own resolver on the built wheel: ``twophase[postgres]`` brings the core and psycopg, and
    pip shows the license, the classifiers and the project's URLs."""
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    run = subprocess.run(
        [*cmd, "--report", str(report), f"{wheel_path}[postgres]"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    install = {
        i["metadata"]["name"].lower(): i["metadata"] for i in json.loads(report.read_text())["install"]
    }
    assert {"twophase", "psycopg", "pyarrow", "tenacity", "click"} <= set(install)
    assert not {"confluent-kafka", "kafka-python", "deltalake", "pyiceberg", "boto3", "botocore"} & set(
        install
    )
    metadata = install["twophase"]
    assert metadata["license"] == "Apache-2.0"
    assert "License :: OSI Approved :: Apache Software License" in metadata["classifier"]
    urls = dict(u.split(", ", 1) for u in metadata["project_url"])
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls)
    assert urls["Changelog"].endswith("/CHANGELOG.md") and (ROOT / "CHANGELOG.md").is_file()
