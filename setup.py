"""Build hook only; metadata, dependencies and tool settings live in setup.cfg.

The wheel's packages follow from the layout: every folder with an ``__init__.py`` under the code
folders, as ``twophase.<folder>``, except the test support that still lives under ``integration/``
(:data:`TEST_SUPPORT`). Test suites live under ``tests/``, outside every package; the build hook is
the second guard that no ``test_*.py`` or ``conftest.py`` reaches the wheel.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CODE_FOLDERS = ("sinks", "coordinator", "connectors", "integration")
TEST_SUPPORT = ("integration/kafka", "integration/s3", "integration/delta", "integration/exactly_once")
TEST_SUPPORT += ("integration/datasource", "integration/faults")
"""Folders of test support not yet moved to ``tests/support``: never installed."""


def product_packages() -> list[str]:
    """``twophase`` and every package of the code folders except the test support."""
    found = ["twophase"]
    for top in CODE_FOLDERS:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            folder = init.parent.relative_to(ROOT).as_posix()
            if not any(folder == s or folder.startswith(s + "/") for s in TEST_SUPPORT):
                found.append("twophase." + folder.replace("/", "."))
    return found


class BuildPyWithoutTests(build_py):
    """``build_py`` that leaves ``test_*.py`` and ``conftest.py`` out of the wheel."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if not (m[1].startswith("test_") or m[1] == "conftest")]


setup(packages=product_packages(), cmdclass={"build_py": BuildPyWithoutTests})
