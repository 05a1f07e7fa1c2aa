"""Shipping twophase to Spark executors as users do: a built wheel sent with the job (issue #17).

:func:`build_wheel` builds the twophase wheel once per state of the sources (``pip wheel`` on a
copy of them) into ``<cache>/wheels/<hash>/``, next to a ``.zip`` copy of it; the project's own
runs ship the development wheel (the flights job runs on their drivers and executors), a user's
pipeline the product wheel (``setup.py``'s ``DEVELOPMENT`` left out). PySpark puts a
``spark.submit.pyFiles`` (``--py-files``) entry on the executors' ``sys.path`` only when its name
ends in ``.zip``, ``.egg`` or ``.jar`` (``SparkContext.PACKAGE_EXTENSIONS``); a ``.whl`` reaches
the executors' work directories but is never importable there. A pure-Python wheel is a zip
archive, so the copy imports as is. :func:`ship_conf` is the Spark conf that ships it.

:func:`executor_python` is, for the cluster test, a Python with the project's runtime dependencies
and without twophase (a venv under ``<cache>/executor-python/<hash of the requirements>/``): on
executors that run it, twophase can only come from the shipped file. It has no pyspark either
(``install_requires`` does not name it): Spark puts its own ``python/lib/pyspark.zip`` first on
every Python worker's ``PYTHONPATH``. The whole environment packed for ``--archives`` is
:mod:`twophase.integration.packing`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twophase.integration.services.cache import cache_dir, file_lock

REPO = Path(__file__).resolve().parents[1]
CODE_ROOTS = ("sinks", "coordinator", "connectors", "integration")
TOP_FILES = ("__init__.py", "py.typed", "setup.cfg", "setup.py", "pyproject.toml", "LICENSE")
SUFFIXES = frozenset({".py", ".typed", ".xml", ".java"})
DEVELOPMENT_WHEEL_VARIABLE = "TWOPHASE_WHEEL_DEVELOPMENT"
"""``setup.py`` keeps the development tooling in the wheel when this variable is ``1``."""
PRUNE_AFTER_S = 7 * 24 * 3600.0
"""Cached wheels and venvs unused this long (seconds) are removed when a new one is built."""


class ShippingError(RuntimeError):
    """Building the wheel or the executors' Python failed; the message holds pip's output."""


def source_files(root: Path = REPO) -> list[Path]:
    """The files the wheel is built from, relative to ``root``, sorted.

    The packaging files and, under the code roots, ``*.py``, ``py.typed``, ``*.xml`` (the Maven
    files packaged as data) and ``*.java`` (the jars setup.py builds into the wheel), without
    ``__pycache__``, ``test_*.py`` and ``conftest.py`` (setup.py leaves tests out of the wheel, so
    they need not trigger a rebuild)."""
    found = [Path(name) for name in TOP_FILES if (root / name).is_file()]
    for code_root in CODE_ROOTS:
        for path in (root / code_root).rglob("*"):
            rel = path.relative_to(root)
            if (
                path.is_file()
                and path.suffix in SUFFIXES
                and "__pycache__" not in rel.parts
                and not (path.name.startswith("test_") or path.name == "conftest.py")
            ):
                found.append(rel)
    return sorted(found)


def sources_hash(root: Path = REPO) -> str:
    """16 hex digits of SHA-256 over the names and contents of :func:`source_files`."""
    digest = hashlib.sha256()
    for rel in source_files(root):
        digest.update(rel.as_posix().encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _run(cmd: Sequence[str], what: str, timeout_s: float, env: Mapping[str, str] | None = None) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    if proc.returncode != 0:
        raise ShippingError(f"{what} failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-4000:]}")


def _prune(parent: Path, keep: Path) -> None:
    """Remove the siblings of ``keep`` unused (by mtime) for :data:`PRUNE_AFTER_S`."""
    for old in parent.iterdir():
        if old != keep and old.is_dir() and time.time() - old.stat().st_mtime > PRUNE_AFTER_S:
            shutil.rmtree(old, ignore_errors=True)


def build_wheel(root: Path = REPO, timeout_s: float = 600.0, *, development: bool = True) -> Path:
    """The twophase wheel for the current sources under ``root``, built at most once per state.

    Built by ``python -m pip wheel --no-deps`` (with build isolation: the build backend comes from
    pip's cache or the index) from a copy of :func:`source_files` plus ``README.md`` (the long
    description, not hashed: docs edits need no new wheel), so the working tree gets no ``build/``
    and the wheel holds exactly what was hashed. Concurrent callers wait on a lock and reuse it.

    Args:
        root: the checkout.
        timeout_s: bound of the build, seconds.
        development: keep the development tooling (``TWOPHASE_WHEEL_DEVELOPMENT=1`` for
            ``setup.py``): what the project's own cluster runs ship. ``False``: the wheel users
            install.

    Returns:
        ``<cache>/wheels/<hash>/twophase-<version>-py3-none-any.whl`` (``<hash>-product`` for the
        product wheel).

    Raises:
        ShippingError: pip failed. subprocess.TimeoutExpired: not built within ``timeout_s`` seconds.
    """
    key = sources_hash(root) + ("" if development else "-product")
    parent = cache_dir() / "wheels"
    final = parent / key
    with file_lock(parent / ".lock"):
        if not final.is_dir():
            with tempfile.TemporaryDirectory(prefix="build-", dir=parent) as tmp:
                src, out = Path(tmp) / "src", Path(tmp) / "out"
                for rel in [*source_files(root), Path("README.md")]:
                    (src / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(root / rel, src / rel)
                pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"]
                env = {**os.environ, DEVELOPMENT_WHEEL_VARIABLE: "1" if development else "0"}
                cmd = [*pip, "--no-deps", "--wheel-dir", str(out), str(src)]
                _run(cmd, "pip wheel", timeout_s, env=env)
                os.replace(out, final)
            _prune(parent, final)
        os.utime(final)
    (wheel,) = final.glob("twophase-*.whl")
    return wheel


def py_file(wheel: Path) -> Path:
    """The wheel copied beside itself under a ``.zip`` name (made once), for ``spark.submit.pyFiles``."""
    target = wheel.with_suffix(".zip")
    if not target.exists():
        tmp = target.with_suffix(".zip.tmp")
        shutil.copyfile(wheel, tmp)
        os.replace(tmp, target)
    return target


def ship_conf(wheel: Path, executor_python: str | None = None) -> dict[str, str]:
    """The Spark conf that ships ``wheel`` to the executors (as its :func:`py_file` copy).

    Args:
        wheel: from :func:`build_wheel`.
        executor_python: the executors' Python (``spark.pyspark.python``), when not the default.
            spark-submit hands it to the driver as ``PYSPARK_PYTHON``, where PySpark reads it;
            a driver started as ``python job.py`` must have ``PYSPARK_PYTHON`` set itself.
    """
    conf = {"spark.submit.pyFiles": str(py_file(wheel))}
    if executor_python is not None:
        conf["spark.pyspark.python"] = executor_python
    return conf


FLIGHTS_CONNECTOR_EXTRAS = ("kafka", "s3", "delta")
"""The connector extras of the sinks the flights job writes to by default."""


def _setup_py(root: Path) -> Any:
    """``root/setup.py`` as a module (its ``setup()`` runs only as ``__main__``)."""
    spec = importlib.util.spec_from_file_location("twophase_setup_py", root / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def extras_require(root: Path = REPO) -> dict[str, list[str]]:
    """Every extra of the checkout ``root`` and its requirements, as ``root/setup.py`` builds them
    (setup.cfg's and each connector's declaration's)."""
    extras: dict[str, list[str]] = _setup_py(root).extras_require(root)
    return extras


def core_requirements(root: Path = REPO) -> list[str]:
    """The core install's requirements (``root/pyproject.toml``'s ``[project] dependencies``)."""
    found: list[str] = _setup_py(root).dependencies(root)
    return found


def runtime_requirements(root: Path = REPO, extras: Sequence[str] = FLIGHTS_CONNECTOR_EXTRAS) -> list[str]:
    """The core install's requirements (:func:`core_requirements`) and those of ``extras`` (by
    default the flights job's connectors'; :func:`extras_require`), once each (no pyspark: the
    platform's Spark provides it, see the module's docstring)."""
    every = extras_require(root)
    return list(dict.fromkeys([*core_requirements(root), *(line for e in extras for line in every[e])]))


def worker_requirements(root: Path = REPO) -> list[str]:
    """:func:`runtime_requirements` plus the ``spark`` extra without pyspark: pandas, which Spark's
    ``mapInArrow`` checks for in the Python that runs it (the platform's Python has it; a venv made
    for Spark's workers needs it too)."""
    extra = extras_require(root)["spark"]
    return [*runtime_requirements(root), *(r for r in extra if not r.startswith("pyspark"))]


def importable(python: Path | str, module: str) -> bool:
    """Whether ``module`` can be found by ``python`` started in its own folder without ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    cmd = [str(python), "-c", code]
    proc = subprocess.run(cmd, cwd=Path(python).parent, env=env, timeout=60, check=False)
    return proc.returncode == 0


def executor_python(requirements: Sequence[str] | None = None, timeout_s: float = 1800.0) -> Path:
    """A Python with ``requirements`` installed and no twophase, made once per requirement set.

    A venv of this interpreter's base Python at ``<cache>/executor-python/<hash>/`` (the hash
    covers the requirements, the Python version and the repository's ``constraints.txt``), filled
    by its own pip with those constraints (the driver's versions); ``.complete`` marks a finished
    one, so a half-made venv from a killed run is made again.

    Args:
        requirements: pip requirement strings; default :func:`worker_requirements`.
        timeout_s: bound of each pip or venv step, seconds.

    Returns:
        The venv's ``bin/python`` (not resolved: the venv is what makes it this environment).

    Raises:
        ShippingError: venv or pip failed, or twophase is importable in the result.
    """
    reqs = list(worker_requirements() if requirements is None else requirements)
    constraints = REPO / "constraints.txt"
    pins = constraints.read_text() if constraints.is_file() else ""
    key = hashlib.sha256("\n".join([sys.version, *reqs, pins]).encode()).hexdigest()[:16]
    parent = cache_dir() / "executor-python"
    venv = parent / key
    python = venv / "bin" / "python"
    with file_lock(parent / ".lock"):
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)], "python -m venv", timeout_s)
            pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            pip += ["-c", str(constraints)] if pins else []
            _run([*pip, *reqs], "pip install (executor Python)", timeout_s)
            if importable(python, "twophase"):
                raise ShippingError(f"{python} imports twophase without the shipped wheel")
            (venv / ".complete").write_text("\n".join(reqs) + "\n")
            _prune(parent, venv)
        os.utime(venv)
    return python
