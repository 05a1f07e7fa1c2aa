"""The job's environment packed for ``spark-submit --archives`` (the standalone-cluster recipe).

:func:`pack_environment` makes, once per state of the sources and requirements, a fresh venv with
the twophase wheel (:func:`~twophase.integration.spark_shipping.build_wheel`) and its runtime
dependencies, plus the wheel's extras and further requirements asked for, installed with the
repository's ``constraints.txt`` (the development versions) when there is one, and packs it with
venv-pack (``venv_pack.pack``) into ``<cache>/packed-envs/<key>/env.tar.gz``.

Shipped as ``--archives env.tar.gz#environment`` with ``spark.pyspark.python=./environment/bin/python``,
each executor unpacks it in its work directory and starts its Python workers from it.

**pyspark is not in it.** Spark starts every Python worker with ``PYTHONPATH`` beginning with
``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip (``PythonUtils.sparkPythonPath``, merged
in ``PythonWorkerFactory``; spark-submit's ``PythonRunner`` does the same for the driver), and
``PYTHONPATH`` comes before site-packages: executors import the Spark installation's own pyspark
whatever the environment holds. The worker's ``SPARK_HOME`` is the Spark that runs the worker
(for a pip-installed pyspark, its package folder, whose ``python/lib`` has both zips). A pyspark
in the archive would be ~450 MB never imported, and could never replace the platform's. So the
wheel is installed without its dependencies, then its ``Requires-Dist`` minus
:data:`PLATFORM_PACKAGES`, and the result is refused if pyspark got in anyway.

venv-pack links the interpreter instead of packing it: every host must have the same Python
(:attr:`PackedEnv.python`) at the same path; the minor version must also be the driver's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from twophase.integration.services.cache import cache_dir, file_lock
from twophase.integration.spark_shipping import (
    FLIGHTS_CONNECTOR_EXTRAS,
    REPO,
    ShippingError,
    _prune,
    _run,
    build_wheel,
    importable,
)

ALIAS = "environment"
"""The folder name the archive is unpacked under (``--archives env.tar.gz#environment``)."""
EXECUTOR_PYTHON = f"./{ALIAS}/bin/python"
"""``spark.pyspark.python`` of the recipe: relative to each executor's work directory."""
PLATFORM_PACKAGES = frozenset({"pyspark", "py4j", "delta-spark"})
"""What the Spark installation provides (pyspark, py4j) or needs pyspark (delta-spark): never packed."""
EXECUTOR_MODULES = (
    "twophase.sinks",
    "twophase.coordinator.spark.job",
    "pyarrow",
    "pandas",
)
"""Imported by the packed Python, with Spark's ``PYTHONPATH``, before the archive is accepted (with
the sink module of each connector whose extra is packed: :func:`executor_modules`)."""
ARCHIVE = "env.tar.gz"
KEEP_ARCHIVES = 3
"""Packed environments kept in the cache (~200 MB each; every change of the sources makes one)."""


@dataclass(frozen=True)
class PackedEnv:
    """A packed environment.

    Attributes:
        archive: the ``.tar.gz`` (in the cache, or where :func:`copy_archive` put it).
        wheel: the twophase wheel installed in it.
        requirements: what was installed besides the wheel (pip requirement strings).
        constraints: the constraints file used, or ``None``.
        python: the interpreter the packed ``bin/python`` links to: it must exist at this path on
            every host (venv-pack does not pack it).
        python_version: ``major.minor.micro`` of that interpreter (driver and executors must share
            the minor version).
        size_bytes: the archive's size.
        unpacked_bytes: the venv's size before packing (what each executor unpacks).
        built_s: seconds the venv and the packing took when it was built (0 for a cached one).
        cached: taken from the cache.
    """

    archive: Path
    wheel: Path
    requirements: tuple[str, ...]
    constraints: Path | None
    python: str
    python_version: str
    size_bytes: int
    unpacked_bytes: int
    built_s: float
    cached: bool


def constraints_file(root: Path = REPO) -> Path | None:
    """``root/constraints.txt`` (the pinned development versions) when it exists."""
    path = root / "constraints.txt"
    return path if path.is_file() else None


def wheel_requirements(wheel: Path, extras: Sequence[str] = ()) -> list[str]:
    """The wheel's ``Requires-Dist`` for a plain install plus ``extras``, in the wheel's order,
    without :data:`PLATFORM_PACKAGES` and without markers (those that do not apply are dropped).

    Raises:
        ShippingError: an extra the wheel does not declare.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        lines = zf.read(meta).decode().splitlines()
    declared = {line.split(":", 1)[1].strip() for line in lines if line.startswith("Provides-Extra:")}
    unknown = sorted(set(extras) - declared)
    if unknown:
        raise ShippingError(
            f"{wheel.name} has no extra {', '.join(unknown)} (it has {', '.join(sorted(declared))})"
        )
    out: list[str] = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            continue
        if canonicalize_name(req.name) in PLATFORM_PACKAGES:
            continue
        req.marker = None
        if str(req) not in out:
            out.append(str(req))
    return out


def _key(wheel: Path, requirements: Sequence[str], constraints: Path | None) -> str:
    digest = hashlib.sha256()
    for part in (
        sys.version,
        getattr(sys, "_base_executable", sys.executable),
        hashlib.sha256(wheel.read_bytes()).hexdigest(),
        *requirements,
        constraints.read_text() if constraints is not None else "",
    ):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _tree_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def spark_python_path() -> str:
    """What Spark puts first on a Python worker's ``PYTHONPATH``: the Spark installation's
    ``python/lib/pyspark.zip`` and py4j zip (``PythonUtils.sparkPythonPath``)."""
    from twophase.integration.services.spark_cluster import spark_home

    lib = spark_home() / "python" / "lib"
    zips = [lib / "pyspark.zip", *sorted(lib.glob("py4j-*-src.zip"))]
    return os.pathsep.join(str(z) for z in zips)


def executor_modules(extras: Sequence[str]) -> list[str]:
    """:data:`EXECUTOR_MODULES` and the sink module of each connector whose extra is in ``extras``
    (the ``flights`` extra brings the libraries of the flights job's connectors), as their
    declarations name them."""
    from twophase.sinks.registry import CONNECTORS

    chosen = set(extras) | (set(FLIGHTS_CONNECTOR_EXTRAS) if "flights" in extras else set())
    sinks = [d.sink.partition(":")[0] for d in CONNECTORS.all().values() if d.extra in chosen]
    return [*EXECUTOR_MODULES, *sinks]


def check_executor_imports(python: Path, modules: Sequence[str] = EXECUTOR_MODULES) -> str:
    """Import ``modules`` with ``python`` started as Spark starts a Python worker (``PYTHONPATH``
    = :func:`spark_python_path` only, in another folder); returns the file pyspark came from.

    Raises:
        ShippingError: an import failed.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = spark_python_path()
    code = f"import pyspark, {', '.join(modules)}; print(pyspark.__file__)"
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run(
            [str(python), "-c", code],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if proc.returncode != 0:
        raise ShippingError(f"{python} cannot import what executors need: {proc.stderr[-3000:]}")
    return proc.stdout.strip()


_PACK = """
import sys, venv_pack
venv_pack.pack(prefix=sys.argv[1], output=sys.argv[2], compress_level=int(sys.argv[3]), force=True)
"""


def _venv_pack(venv: Path, output: Path, compress_level: int, timeout_s: float) -> None:
    """``venv_pack.pack`` in a child of this Python, so that its temporary archive (as big as the
    result) goes to ``output``'s folder, not the system's temporary folder."""
    if importlib.util.find_spec("venv_pack") is None:
        raise ShippingError(
            "venv-pack is not installed in this Python: pip install -c constraints.txt venv-pack "
            "(it is in twophase's dev extra)"
        )
    env = {**os.environ, "TMPDIR": str(output.parent)}
    cmd = [sys.executable, "-c", _PACK, str(venv), str(output), str(compress_level)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise ShippingError(f"venv-pack failed ({proc.returncode}): {proc.stderr[-4000:]}")


def pack_environment(
    extras: Sequence[str] = (),
    requirements: Sequence[str] = (),
    constraints: Path | Literal["repository"] | None = "repository",
    compress_level: int = 4,
    timeout_s: float = 1800.0,
    *,
    development: bool = True,
) -> PackedEnv:
    """The packed environment of the current sources, built at most once per state.

    Args:
        extras: extras of the wheel to install too (e.g. ``flights`` for the flights job's driver).
        requirements: further pip requirements (e.g. the pipeline's own libraries).
        constraints: a constraints file; ``"repository"``: the repository's
            (:func:`constraints_file`), if any; ``None``: none.
        compress_level: gzip level (1–9): 4, venv-pack's default, packs ~580 MB into ~210 MB
            in ~30 s here.
        timeout_s: bound of each venv, pip or packing step, seconds.
        development: install the development wheel (the flights job's driver runs from the
            archive); ``False``: the wheel users install
            (:func:`~twophase.integration.spark_shipping.build_wheel`).

    Returns:
        The archive in ``<cache>/packed-envs/<key>/`` (a key of the Python, the wheel, the
        requirements and the constraints; the :data:`KEEP_ARCHIVES` most recently used are
        kept). Concurrent callers wait on a lock and reuse it.

    Raises:
        ShippingError: the wheel, venv, pip or venv-pack failed; pyspark got into the
            environment; or the packed Python cannot import what executors need.
    """
    wheel = build_wheel(timeout_s=timeout_s, development=development)
    # the spark extra without pyspark: pandas, which Spark's mapInArrow checks for on executors
    reqs = [*wheel_requirements(wheel, tuple(dict.fromkeys(("spark", *extras)))), *requirements]
    cons = constraints_file() if isinstance(constraints, str) else constraints
    key = _key(wheel, reqs, cons)
    parent = cache_dir() / "packed-envs"
    final = parent / key
    with file_lock(parent / ".lock"):
        cached = (final / "packed.json").is_file()
        if not cached:
            _build(final, wheel, reqs, cons, executor_modules(extras), compress_level, timeout_s)
            _prune(parent, final)
            _keep_newest(parent, KEEP_ARCHIVES)
        os.utime(final)
    info = json.loads((final / "packed.json").read_text())
    return PackedEnv(
        archive=final / ARCHIVE,
        wheel=wheel,
        requirements=tuple(reqs),
        constraints=cons,
        python=info["python"],
        python_version=info["python_version"],
        size_bytes=(final / ARCHIVE).stat().st_size,
        unpacked_bytes=int(info["unpacked_bytes"]),
        built_s=0.0 if cached else float(info["built_s"]),
        cached=cached,
    )


def _keep_newest(parent: Path, keep: int) -> None:
    """Remove all but the ``keep`` most recently used packed environments under ``parent``."""
    done = sorted(
        (d for d in parent.iterdir() if (d / "packed.json").is_file()),
        key=lambda d: d.stat().st_mtime,
        reverse=True,
    )
    for old in done[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def _build(
    final: Path,
    wheel: Path,
    reqs: Sequence[str],
    cons: Path | None,
    modules: Sequence[str],
    compress_level: int,
    timeout_s: float,
) -> None:
    started = time.monotonic()
    shutil.rmtree(final, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=final.parent) as tmp:
        venv, out = Path(tmp) / "venv", Path(tmp) / "out"
        out.mkdir()
        _run([sys.executable, "-m", "venv", str(venv)], "python -m venv", timeout_s)
        python = venv / "bin" / "python"
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        pip += ["-c", str(cons)] if cons is not None else []
        _run([*pip, "--no-deps", str(wheel)], "pip install (the wheel)", timeout_s)
        _run([*pip, *reqs], "pip install (its requirements)", timeout_s)
        if importable(python, "pyspark"):
            raise ShippingError(
                f"pyspark got into the packed environment (from {', '.join(reqs)}): the platform's "
                "Spark provides it; drop what requires it"
            )
        check_executor_imports(python, modules)
        base = os.path.realpath(python)
        version = subprocess.run(
            [str(python), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        unpacked = _tree_bytes(venv)
        _venv_pack(venv, out / ARCHIVE, compress_level, timeout_s)
        (out / ARCHIVE).chmod(0o644)
        meta = {
            "wheel": wheel.name,
            "requirements": list(reqs),
            "constraints": str(cons) if cons is not None else None,
            "python": base,
            "python_version": version,
            "unpacked_bytes": unpacked,
            "built_s": round(time.monotonic() - started, 1),
        }
        (out / "packed.json").write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(out, final)


def copy_archive(env: PackedEnv, output: Path) -> PackedEnv:
    """``env`` with its archive copied to ``output`` (a hard link when on the same file system)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(env.archive, tmp)
    except OSError:
        shutil.copyfile(env.archive, tmp)
    os.replace(tmp, output)
    return dataclasses.replace(env, archive=output.resolve())


def archive_conf(archive: Path | str) -> dict[str, str]:
    """The Spark conf that ships a packed environment to executors and runs their Python from it:
    ``spark.archives`` (``--archives``) with the ``#environment`` alias, and
    ``spark.pyspark.python`` relative to each executor's work directory."""
    return {"spark.archives": f"{archive}#{ALIAS}", "spark.pyspark.python": EXECUTOR_PYTHON}


SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def submit_command(
    spark_submit: str,
    conf: Mapping[str, str],
    script: str,
    args: Sequence[str] = (),
    redact: bool = False,
) -> list[str]:
    """``spark-submit --conf k=v ... script args``; with ``redact``, the values of
    ``spark.executorEnv.AWS_*`` keys become ``$AWS_...`` (for printing: no secret on screen)."""
    cmd = [spark_submit]
    for key, value in conf.items():
        name = key.rsplit(".", 1)[-1]
        if redact and key.startswith("spark.executorEnv.") and name in SECRET_ENV:
            value = f"${name}"
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, script, *args]


def shell_line(cmd: Sequence[str]) -> str:
    """``cmd`` as one shell line; ``$AWS_...`` placeholders stay expandable."""
    out = []
    for arg in cmd:
        quoted = shlex.quote(arg)
        for name in SECRET_ENV:
            quoted = quoted.replace(f"${name}", f"'\"${name}\"'")
        out.append(quoted)
    return " ".join(out)
