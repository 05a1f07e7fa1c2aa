"""The cells of `make compat`: which pyspark on which Python, and how a cell's venv is made.

A cell is a fresh venv holding the wheel (with its ``flights`` extra), one pyspark (with its
``connect`` extra) and pytest. pip resolves every other dependency within setup.cfg's ranges, except
in the floor cell, where a constraints file holds each lower bound of ``install_requires`` and of the
``spark`` extra, so that the floors the ranges state are the ones a run used.

A platform cell mimics a managed platform's Python instead: its Python version and the versions of
the packages its release notes list are installed first, then plain ``twophase`` (with the extras
that exist among ``kafka``, ``s3`` and ``postgres``) as a user installs it on that platform; ``pip
freeze`` before and after shows which of the platform's packages moved, and only the ones the
platform names with a reason may.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement


@dataclass(frozen=True)
class Platform:
    """A managed platform's Python environment, as its release notes document it.

    Attributes:
        title: the platform release, e.g. ``"Databricks 15.4 LTS"``.
        source: the URL of the release notes the versions are taken from.
        packages: ``name==version`` of what the platform ships (pyspark included), installed before
            twophase.
        may_move: a package twophase must move there, with why (e.g. boto3, whose conditional PUT
            the S3 checkpoint storage needs).
        recipe_adds: what the platform's recipe (docs/deploy) installs beside twophase because the
            platform's Python lacks it (pandas, which Spark's ``mapInArrow`` needs, where the
            platform ships none).
    """

    title: str
    source: str
    packages: tuple[str, ...]
    may_move: tuple[tuple[str, str], ...] = ()
    recipe_adds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cell:
    """One Spark × Python combination.

    Attributes:
        spark: the pyspark version installed, e.g. ``"3.5.7"``.
        python: the Python minor version, e.g. ``"3.11"``.
        floor: install every ``install_requires`` lower bound (the ranges' floors).
        platform: the platform environment the cell mimics (a platform cell), else ``None``.
        label: the platform cell's name, e.g. ``"databricks15.4"``.
    """

    spark: str
    python: str
    floor: bool = False
    platform: Platform | None = None
    label: str = ""

    @property
    def name(self) -> str:
        """``spark3.5.7-py3.11`` (``-floor`` for the floor cell; the label for a platform cell)."""
        if self.label:
            return self.label
        return f"spark{self.spark}-py{self.python}" + ("-floor" if self.floor else "")


_BOTO3_MOVES = (
    ("boto3", "the S3 checkpoint storage's conditional PUT (If-None-Match) needs botocore 1.35.2"),
    ("botocore", "boto3's own pin moves with it"),
    ("s3transfer", "boto3's own pin moves with it"),
)

#: Databricks 15.4 LTS: Spark 3.5.0 on Python 3.11 (3.11.0 there; pyenv's 3.11 here), pandas 1.5.3.
DATABRICKS_15_4 = Platform(
    "Databricks 15.4 LTS",
    "https://docs.databricks.com/aws/en/release-notes/runtime/15.4lts",
    (
        "pyspark==3.5.0",
        "pandas==1.5.3",
        "pyarrow==14.0.1",
        "numpy==1.23.5",
        "boto3==1.34.39",
        "botocore==1.34.39",
        "s3transfer==0.10.1",
        "python-dateutil==2.8.2",
        "click==8.0.4",
        "tenacity==8.2.2",
        "packaging==23.2",
        "typing_extensions==4.10.0",
    ),
    _BOTO3_MOVES,
)

_EMR_SPARK = "https://docs.aws.amazon.com/emr/latest/ReleaseGuide/Spark-release-history.html"
_EMR_ADDS = ("pandas>=1.5.3,<3",)  # EMR's Python 3.11 has no pandas; the EMR recipe installs it

#: EMR 7.0: Spark 3.5.0; PySpark's default Python is 3.9, so the recipe points it at Python 3.11,
#: which holds no pandas or pyarrow of EMR's.
EMR_7_0 = Platform("EMR 7.0", _EMR_SPARK, ("pyspark==3.5.0",), recipe_adds=_EMR_ADDS)
#: The current EMR 7.x, 7.13.0: Spark 3.5.6 (3.5.6-amzn-2), Python 3.11 as for 7.0.
EMR_7_13 = Platform("EMR 7.13", _EMR_SPARK, ("pyspark==3.5.6",), recipe_adds=_EMR_ADDS)

#: Dataproc Serverless runtime 2.2: Spark 3.5.1 on Python 3.12 in a conda environment (conda 24.1).
#: The runtime notes list no Python library versions, so the cell installs what such an
#: environment holds as pip resolves it: setuptools (pyspark 3.5 imports distutils, which Python
#: 3.12 has no more), pandas and pyarrow (with the NumPy 2 that today's pyarrow requires).
#: Resolved today, pandas brings python-dateutil 4, which boto3's botocore caps below 3.
DATAPROC_SERVERLESS_2_2 = Platform(
    "Dataproc Serverless 2.2",
    "https://cloud.google.com/dataproc-serverless/docs/concepts/versions/spark-runtime-versions",
    ("pyspark==3.5.1", "setuptools", "pandas<3", "pyarrow"),
    (("python-dateutil", "botocore (boto3) requires python-dateutil<3; pandas takes the newest"),),
)

#: Spark 3.5.0 (the floor: Databricks 15.4 LTS, EMR 7.0) to 4.3; every Python a Spark supports at
#: least once (Spark 3.5 cells stop at 3.11 unless the platform installs setuptools: its pandas
#: helpers import distutils, gone in 3.12; Spark 4.3 needs Python 3.11 or later). Then the platform
#: cells.
CELLS: tuple[Cell, ...] = (
    Cell("3.5.0", "3.11", floor=True),
    Cell("3.5.7", "3.10"),
    Cell("4.0.5", "3.10"),
    Cell("4.0.5", "3.13"),
    Cell("4.1.4", "3.11"),
    Cell("4.1.4", "3.13"),
    Cell("4.2.0", "3.11"),
    Cell("4.2.1", "3.12"),
    Cell("4.3.0", "3.12"),
    Cell("4.3.0", "3.13"),
    Cell("3.5.0", "3.11", platform=DATABRICKS_15_4, label="databricks15.4"),
    Cell("3.5.0", "3.11", platform=EMR_7_0, label="emr7.0"),
    Cell("3.5.6", "3.11", platform=EMR_7_13, label="emr7.13"),
    Cell("3.5.1", "3.12", platform=DATAPROC_SERVERLESS_2_2, label="dataproc-serverless2.2"),
)

#: The development environment's cell: what `make test` runs.
DEFAULT_CELL = Cell("4.2.0", "3.11")


def find_python(minor: str) -> Path | None:
    """An interpreter of Python ``minor`` (e.g. ``"3.12"``): pyenv's, else ``pythonX.Y`` on PATH
    when it really is that version; ``None`` when the machine has none."""
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    for candidate in sorted(Path(root, "versions").glob(f"{minor}.*/bin/python{minor}"), reverse=True):
        if candidate.is_file():
            return candidate
    found = shutil.which(f"python{minor}")
    if found is None:
        return None
    probe = subprocess.run([found, "--version"], capture_output=True, text=True, check=False)
    return Path(found) if probe.returncode == 0 and probe.stdout.split()[-1].startswith(minor + ".") else None


def floor_constraints(install_requires: list[str]) -> list[str]:
    """``name==lower`` for every requirement with a ``>=`` lower bound (the floor cell's pins), and
    NumPy below 2 (pyarrow before 16 and pandas before 2.2.2 are built against NumPy 1).

    Raises:
        ValueError: a requirement has no ``>=`` bound (the range would state no floor).
    """
    pins = []
    for line in install_requires:
        req = Requirement(line)
        floors = [s.version for s in req.specifier if s.operator == ">="]
        if not floors:
            raise ValueError(f"{req.name} states no lower bound in install_requires; give it '>='")
        pins.append(f"{req.name}=={floors[0]}")
    return [*pins, "numpy<2"]
