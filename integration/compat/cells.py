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
class SourceBuild:
    """A package a platform ships for which PyPI has no wheel for the platform's Python, so the
    cell builds one from the release's sdist (the platform builds its own; its flags are not
    published, so the same source release on the same build dependencies stands in for it).

    Attributes:
        requirement: ``name==version`` to build, e.g. ``"pandas==1.5.3"``.
        build_requires: what its build needs installed beside it (it builds without isolation,
            e.g. because its ``setup.py`` imports ``pkg_resources``, gone from new setuptools).
        why: why PyPI's wheels do not serve, for the log and COMPAT.md.
    """

    requirement: str
    build_requires: tuple[str, ...]
    why: str


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
        may_break: a package of the platform whose own requirement ``pip check`` finds unmet after
            the install (a pin on a package twophase had to move), with why and what to do.
        source_builds: packages of ``packages`` the cell builds from source first (cached), where
            PyPI has no wheel for the platform's Python.
    """

    title: str
    source: str
    packages: tuple[str, ...]
    may_move: tuple[tuple[str, str], ...] = ()
    recipe_adds: tuple[str, ...] = ()
    may_break: tuple[tuple[str, str], ...] = ()
    source_builds: tuple[SourceBuild, ...] = ()


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

#: Databricks 16.4 LTS: Spark 3.5.2 on Python 3.12 (3.12.3 there; pyenv's 3.12 here), with the
#: setuptools it ships (pyspark 3.5 imports distutils, gone from Python 3.12). Its library versions
#: are the release notes' "Installed Python libraries" (the same as the runtime's constraints in
#: pietern/databricks-environments, dbr/16.4.x-scala2.12). pandas 1.5.3 has no wheel for Python 3.12
#: on PyPI (Databricks builds its own), so the cell builds one from pandas' sdist on the runtime's
#: numpy, once per machine (cached; about an hour on 2 cores), and installs it from there.
DATABRICKS_16_4 = Platform(
    "Databricks 16.4 LTS",
    "https://docs.databricks.com/aws/en/release-notes/runtime/16.4lts",
    (
        "pyspark==3.5.2",
        "setuptools==74.0.0",
        "pandas==1.5.3",
        "pyarrow==15.0.2",
        "numpy==1.26.4",
        "boto3==1.34.69",
        "botocore==1.34.69",
        "s3transfer==0.10.2",
        "python-dateutil==2.9.0.post0",
        "click==8.1.7",
        "tenacity==8.2.2",
        "packaging==24.1",
        "typing_extensions==4.11.0",
        "urllib3==1.26.16",
        "requests==2.32.2",
    ),
    _BOTO3_MOVES,
    source_builds=(
        SourceBuild(
            "pandas==1.5.3",
            # pandas 1.5.3's setup.py imports pkg_resources (setuptools before 72) and its Cython
            # sources need Cython 0.29 (3.0 changed the semantics they rely on)
            ("setuptools<72", "wheel", "Cython>=0.29.32,<3", "numpy==1.26.4"),
            "PyPI has no pandas 1.5.3 wheel for CPython 3.12 (its first is 2.1.1)",
        ),
    ),
)

_GLUE_MODULES = "https://docs.aws.amazon.com/glue/latest/dg/aws-glue-programming-python-libraries.html"

#: AWS Glue 5.0: Spark 3.5.4 on Python 3.11 (AWS Glue versions, release-notes.html). The packages
#: are "Python modules already provided in AWS Glue" for 5.0, without the plotting stack
#: (matplotlib, seaborn, plotly, kaleido and their pillow, contourpy, cycler, fonttools, kiwisolver,
#: pyparsing), which nothing of twophase's requires, and without the venv's own pip. Glue's s3fs
#: reaches S3 through aiobotocore, which pins botocore below 1.34.132.
GLUE_5_0 = Platform(
    "AWS Glue 5.0",
    _GLUE_MODULES,
    (
        "pyspark==3.5.4",
        "aiobotocore==2.13.1",
        "aiohappyeyeballs==2.3.5",
        "aiohttp==3.10.1",
        "aioitertools==0.11.0",
        "aiosignal==1.3.1",
        "appdirs==1.4.4",
        "attrs==24.2.0",
        "boto3==1.34.131",
        "botocore==1.34.131",
        "certifi==2024.7.4",
        "charset-normalizer==3.3.2",
        "frozenlist==1.4.1",
        "fsspec==2024.6.1",
        "idna==2.10",
        "jmespath==0.10.0",
        "multidict==6.0.5",
        "numpy==1.26.4",
        "packaging==24.1",
        "pandas==2.2.2",
        "pyarrow==17.0.0",
        "python-dateutil==2.9.0.post0",
        "pytz==2024.1",
        "requests==2.32.2",
        "s3fs==2024.6.1",
        "s3transfer==0.10.2",
        "setuptools==59.6.0",
        "six==1.16.0",
        "tenacity==9.0.0",
        "tzdata==2024.1",
        "urllib3==1.25.10",
        "wrapt==1.16.0",
        "yarl==1.9.4",
    ),
    _BOTO3_MOVES,
    may_break=(
        (
            "aiobotocore",
            "Glue 5.0's aiobotocore 2.13.1 (under s3fs) pins botocore<1.34.132, below the 1.35.2 the "
            "S3 checkpoint storage needs: a job that also reads S3 through s3fs/pandas must add a "
            "newer s3fs and aiobotocore to --additional-python-modules",
        ),
    ),
)

#: AWS Glue 5.1: Spark 3.5.6 on Python 3.11 (AWS Glue versions; Migrating to AWS Glue 5.1). The
#: packages are the same page's list for 5.1, without the plotting stack (as for 5.0: matplotlib,
#: seaborn, plotly, kaleido, choreographer, logistro, narwhals, orjson, simplejson, pillow,
#: contourpy, cycler, fonttools, kiwisolver, pyparsing), the test tools (pytest, pytest-timeout,
#: iniconfig, pluggy, Pygments) and the installers (pip, uv, virtualenv, distlib, filelock,
#: platformdirs).
GLUE_5_1 = Platform(
    "AWS Glue 5.1",
    _GLUE_MODULES,
    (
        "pyspark==3.5.6",
        "aiobotocore==2.25.1",
        "aiohappyeyeballs==2.6.1",
        "aiohttp==3.13.2",
        "aioitertools==0.12.0",
        "aiosignal==1.4.0",
        "appdirs==1.4.4",
        "attrs==25.4.0",
        "boto3==1.40.61",
        "botocore==1.40.61",
        "certifi==2025.10.5",
        "charset-normalizer==3.4.4",
        "frozenlist==1.8.0",
        "fsspec==2025.10.0",
        "idna==3.11",
        "jmespath==1.0.1",
        "multidict==6.7.0",
        "numpy==2.3.4",
        "packaging==25.0",
        "pandas==2.3.3",
        "propcache==0.4.1",
        "pyarrow==22.0.0",
        "python-dateutil==2.9.0.post0",
        "pytz==2025.2",
        "requests==2.32.5",
        "s3fs==2025.10.0",
        "s3transfer==0.14.0",
        "setuptools==79.0.1",
        "six==1.17.0",
        "tenacity==9.1.2",
        "typing_extensions==4.15.0",
        "tzdata==2025.2",
        "urllib3==2.5.0",
        "wrapt==1.17.3",
        "yarl==1.22.0",
    ),
)


def dataproc_2_2(spark: str) -> Platform:
    """Dataproc on Compute Engine, image 2.2 (Debian 12): Spark ``spark`` (a 3.5 patch release) on
    Python 3.11 in the image's conda environment.

    The patch release of Spark moves with the sub-minor image, and Google's "2.2.x release
    versions" page, which names it per image, could not be read here: third-party material names
    3.5.0 (the first 2.2 images), 3.5.1 and 3.5.3. So one cell runs each of them. As for
    Serverless, the image pages list no Python library versions, so the cell installs pandas and
    pyarrow as pip resolves them, below pandas 3 (pyspark 3.5's pandas API predates it).
    """
    return Platform(
        "Dataproc 2.2 on Compute Engine",
        "https://cloud.google.com/dataproc/docs/concepts/versioning/dataproc-version-clusters",
        (f"pyspark=={spark}", "pandas<3", "pyarrow"),
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
    Cell("3.5.2", "3.12", platform=DATABRICKS_16_4, label="databricks16.4"),
    Cell("3.5.4", "3.11", platform=GLUE_5_0, label="glue5.0"),
    Cell("3.5.6", "3.11", platform=GLUE_5_1, label="glue5.1"),
    Cell("3.5.3", "3.11", platform=dataproc_2_2("3.5.3"), label="dataproc2.2"),
    Cell("3.5.0", "3.11", platform=dataproc_2_2("3.5.0"), label="dataproc2.2-spark3.5.0"),
    Cell("3.5.1", "3.11", platform=dataproc_2_2("3.5.1"), label="dataproc2.2-spark3.5.1"),
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
