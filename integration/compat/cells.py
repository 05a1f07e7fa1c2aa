"""The cells of `make compat`: which pyspark on which Python, and how a cell's venv is made.

A cell is a fresh venv holding the wheel (with its ``flights`` extra), one pyspark (with its
``connect`` extra) and pytest. pip resolves every other dependency within setup.cfg's ranges, except
in the floor cell, where a constraints file holds each ``install_requires`` lower bound, so that the
floors the ranges state are the ones a run used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement


@dataclass(frozen=True)
class Cell:
    """One Spark × Python combination.

    Attributes:
        spark: the pyspark version installed, e.g. ``"3.5.7"``.
        python: the Python minor version, e.g. ``"3.11"``.
        floor: install every ``install_requires`` lower bound (the ranges' floors).
    """

    spark: str
    python: str
    floor: bool = False

    @property
    def name(self) -> str:
        """``spark3.5.7-py3.11`` (``-floor`` for the floor cell)."""
        return f"spark{self.spark}-py{self.python}" + ("-floor" if self.floor else "")


#: Spark 3.5 (EMR 7, Dataproc 2.2, Glue 5, Databricks 15.4 LTS) to 4.3; every Python a Spark
#: supports at least once (Spark 3.5 stops at 3.11 here: its pandas helpers import distutils, gone
#: in 3.12; Spark 4.3 needs Python 3.11 or later).
CELLS: tuple[Cell, ...] = (
    Cell("3.5.3", "3.11", floor=True),
    Cell("3.5.7", "3.10"),
    Cell("4.0.5", "3.10"),
    Cell("4.0.5", "3.13"),
    Cell("4.1.4", "3.11"),
    Cell("4.1.4", "3.13"),
    Cell("4.2.0", "3.11"),
    Cell("4.2.1", "3.12"),
    Cell("4.3.0", "3.12"),
    Cell("4.3.0", "3.13"),
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
    """``name==lower`` for every requirement with a ``>=`` lower bound (the floor cell's pins).

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
    return pins
