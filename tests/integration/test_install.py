"""Installing twophase beside a user's Spark replaces nothing (#30).

A venv first gets what a Spark 3.5 user has (pyspark 3.5.7, pandas 2.2.3, pyarrow 17.0.0), then the
wheel as a user installs it with the extras of the connectors the probe imports (Kafka and Delta),
then with the ``spark`` extra too: every package the user had keeps its
version, ``pip check`` is clean and ``import twophase`` works on that Spark. The one exception is
named with its cause: a dependency of a dependency whose own metadata caps it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twophase.integration.spark_shipping import build_wheel

pytestmark = [pytest.mark.slow]

USER_ENV = ("pyspark==3.5.7", "pandas==2.2.3", "pyarrow==17.0.0")
#: What pip may move, and why: botocore (boto3's core) requires python-dateutil<3, while pandas
#: takes the newest; twophase itself states no bound on it.
CAPPED_BY_OTHERS = {"python-dateutil": "botocore requires python-dateutil>=2.1,<3.0.0"}


def _pip(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)


def _installed(venv: Path) -> dict[str, str]:
    listing = _pip(venv, "list", "--format=json")
    assert listing.returncode == 0, listing.stderr
    return {p["name"].lower(): p["version"] for p in json.loads(listing.stdout)}


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
def test_the_wheel_installs_beside_the_users_spark_and_replaces_nothing(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    user = _pip(venv, "install", "--quiet", *USER_ENV)
    assert user.returncode == 0, user.stderr[-2000:]
    before = _installed(venv)
    wheel = build_wheel(development=False)  # the wheel users install
    for target in (f"{wheel}[kafka,delta]", f"{wheel}[spark,kafka,delta]"):
        run = _pip(venv, "install", "--quiet", target)
        assert run.returncode == 0, run.stderr[-2000:]
        after = _installed(venv)
        kept = {name: after.get(name) for name in before if name not in CAPPED_BY_OTHERS}
        assert kept == {name: v for name, v in before.items() if name not in CAPPED_BY_OTHERS}, target
        assert {"pyspark": "3.5.7", "pandas": "2.2.3", "pyarrow": "17.0.0"}.items() <= after.items()
    assert after["twophase"] == "0.1.0"
    check = _pip(venv, "check")
    assert check.returncode == 0, check.stdout
    probe = "import pyspark; from twophase import Job, KafkaSink, DeltaSink; print(pyspark.__version__)"
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert imported.stdout.strip() == "3.5.7"
