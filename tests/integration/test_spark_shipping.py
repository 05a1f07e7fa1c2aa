"""The wheel shipped to Spark executors: keyed by the sources, complete for executor code, and
importable only from the shipped file in the executors' Python (issue #17)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from twophase.integration.spark_shipping import (
    REPO,
    build_wheel,
    executor_python,
    py_file,
    runtime_requirements,
    ship_conf,
    source_files,
    sources_hash,
)


def _tree(root: Path) -> Path:
    for rel in ("setup.cfg", "sinks/__init__.py", "sinks/py.typed", "integration/services/jvm/settings.xml"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    return root


def test_the_hash_follows_the_wheels_sources_only(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before = sources_hash(root)
    (root / "sinks" / "test_x.py").write_text("tests are not in the wheel")
    (root / "sinks" / "conftest.py").write_text("")
    (root / "sinks" / "__pycache__").mkdir()
    (root / "sinks" / "__pycache__" / "m.py").write_text("")
    (root / "README.md").write_text("docs")
    assert sources_hash(root) == before
    assert [p.as_posix() for p in source_files(root)] == [
        "integration/services/jvm/settings.xml",
        "setup.cfg",
        "sinks/__init__.py",
        "sinks/py.typed",
    ]
    (root / "sinks" / "__init__.py").write_text("changed")
    assert sources_hash(root) != before


def test_runtime_requirements_are_setup_cfgs_ranges() -> None:
    reqs = runtime_requirements()
    assert not any(r.startswith("pyspark") for r in reqs)  # the platform's Spark provides it
    assert all(">=" in r and "==" not in r and not r.startswith("#") for r in reqs)


@pytest.mark.slow
def test_the_wheel_is_built_once_and_shipped_under_a_zip_name() -> None:
    wheel = build_wheel()
    started = time.monotonic()
    assert build_wheel() == wheel
    assert time.monotonic() - started < 5  # cached: only the sources are hashed
    python = "/opt/env/bin/python"
    conf = ship_conf(wheel, python)
    assert conf == {"spark.submit.pyFiles": str(py_file(wheel)), "spark.pyspark.python": python}
    assert conf["spark.submit.pyFiles"].endswith(".zip")  # PySpark adds only .zip/.egg/.jar to sys.path
    assert zipfile.ZipFile(py_file(wheel)).namelist() == zipfile.ZipFile(wheel).namelist()


@pytest.mark.slow
def test_the_executors_python_imports_twophase_only_from_the_shipped_file(tmp_path: Path) -> None:
    python = executor_python()
    shipped = py_file(build_wheel())
    # what executors load: the sinks, the fault points (executor kill)
    modules = (
        "twophase.sinks.errors",
        "twophase.coordinator.state.faults",
    )
    code = f"import twophase, {', '.join(modules)}; print(twophase.__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    bare = subprocess.run([str(python), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert bare.returncode != 0 and "No module named 'twophase'" in bare.stderr
    local = tmp_path / shipped.name  # as an executor has it: a copy in its work directory
    shutil.copyfile(shipped, local)
    env["PYTHONPATH"] = str(local)
    ok = subprocess.run([str(python), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert Path(ok.stdout.strip()) == local / "twophase" / "__init__.py"
    assert not Path(ok.stdout.strip()).is_relative_to(REPO)
