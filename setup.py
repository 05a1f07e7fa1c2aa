"""Build hook only; metadata, dependencies and tool settings live in setup.cfg.

The wheel's packages follow from the layout: every folder with an ``__init__.py`` under the code
folders, as ``twophase.<folder>``. Test suites and their support live under ``tests/``, outside
every package; the build hook is the second guard that no ``test_*.py`` or ``conftest.py`` reaches
the wheel.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CODE_FOLDERS = ("sinks", "coordinator", "connectors", "integration")


def product_packages() -> list[str]:
    """``twophase`` and every package of the code folders."""
    found = ["twophase"]
    for top in CODE_FOLDERS:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            found.append("twophase." + init.parent.relative_to(ROOT).as_posix().replace("/", "."))
    return found


class BuildPyWithoutTests(build_py):
    """``build_py`` that leaves ``test_*.py`` and ``conftest.py`` out of the wheel."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if not (m[1].startswith("test_") or m[1] == "conftest")]


setup(packages=product_packages(), cmdclass={"build_py": BuildPyWithoutTests})
