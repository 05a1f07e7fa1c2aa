"""The distribution installs under ONE root, ``twophase``, and holds product code only.

The repository's top-level folders keep their places; setuptools' ``package_dir`` maps the
repository root to the package ``twophase``. These tests build the real wheel with pip and read it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path, PurePosixPath

import pytest

from twophase.integration.spark_shipping import build_wheel

ROOT = Path(__file__).resolve().parents[2]
CODE_ROOTS = ("sinks", "coordinator", "connectors", "integration")


@pytest.fixture(scope="module")
def wheel() -> zipfile.ZipFile:
    """The wheel as ``make compat`` and the cluster builds ship it (from a copy: no ``build/`` here,
    whose stale ``build/lib`` would carry deleted modules into a wheel built in place)."""
    return zipfile.ZipFile(build_wheel(ROOT))


def _product_packages() -> set[str]:
    """Every package of the code folders: what ships follows from the layout, no list."""
    found = {"twophase"}
    for root in CODE_ROOTS:
        for init in (ROOT / root).rglob("__init__.py"):
            found.add("twophase." + init.parent.relative_to(ROOT).as_posix().replace("/", "."))
    return found


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
    assert packages == _product_packages()
    tests = [n for n in names if PurePosixPath(n).name.startswith("test_") or n.endswith("/conftest.py")]
    assert tests == []
    assert "twophase/py.typed" in names
    assert "twophase/integration/services/jvm/kafka/pom.xml" in names
    # the conformance kit ships: sink authors run it from their own test suites (#25 item 4)
    assert "twophase/sinks/conformance/contract.py" in names


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
