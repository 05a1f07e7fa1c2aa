"""Build hook only; metadata, dependencies and tool settings live in setup.cfg.

Test modules live under ``tests/``, outside every package; this hook is the second guard that no
``test_*.py`` or ``conftest.py`` reaches the wheel.
"""

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithoutTests(build_py):
    """``build_py`` that leaves ``test_*.py`` and ``conftest.py`` out of the wheel."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if not (m[1].startswith("test_") or m[1] == "conftest")]


setup(cmdclass={"build_py": BuildPyWithoutTests})
