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
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from twophase.integration.compat.cells import CELLS, Cell, find_python, floor_constraints
from twophase.integration.services import kafka_service, s3_service
from twophase.integration.services.launcher import given_env
from twophase.integration.spark_shipping import REPO, build_wheel, runtime_requirements

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
        cell = Cell(**data.pop("cell"))
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


def _run(cmd: list[str], log: Path, env: dict[str, str] | None = None, timeout_s: float = 900) -> int:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        return subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, check=False, cwd=REPO
        ).returncode


def make_venv(cell: Cell, python: Path, wheel: Path, folder: Path, log: Path) -> Path | str:
    """The cell's fresh venv with the wheel, its pyspark and pytest; its path, or why it failed."""
    venv = folder / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    # --upgrade-deps: an old interpreter's bundled pip installs pyspark by setup.py, uncached
    if _run([str(python), "-m", "venv", "--upgrade-deps", str(venv)], log) != 0:
        return f"python{cell.python} could not make a venv"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # pyspark's pipelines extra (Spark 4.1+; pip only warns where a Spark lacks it) brings PyYAML
    wants = [f"{wheel}[flights]", f"pyspark[connect,pipelines]=={cell.spark}", _pin("pytest")]
    if cell.floor:
        floors = folder / "floor-constraints.txt"
        floors.write_text("\n".join(floor_constraints(runtime_requirements())) + "\n")
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
        try:
            _run([*pytest, f"--junitxml={junit}", *SUBSET], log, env, CELL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
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


def markdown(results: list[CellResult], wall_s: float, load: tuple[float, float]) -> str:
    """COMPAT.md: how it was made, then one row per cell."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Compatibility",
        "",
        f"Made by `make compat` on {when}: {len(results)} cells, wall time {wall_s / 60:.1f} min, "
        f"load average {load[0]:.2f} at the start and {load[1]:.2f} at the end (2 cores).",
        "Each cell is a fresh venv holding the wheel, that pyspark and pytest; pip resolved the rest",
        "within setup.cfg's ranges, except the floor cell, which installed every `install_requires`",
        "lower bound. The subset (tests marked `compat`) runs against one real Kafka broker and MinIO:",
        "the flights job through the Job API into Kafka, S3 and Delta with a driver crash and restart,",
        '`format("twophase")` (or its refusal by name where the Spark lacks what it needs), Spark',
        "Connect and declarative pipelines where that Spark has them, and the compatibility seam.",
        "Skipped tests are the ones a Spark version cannot have (each says why in the log).",
        "",
        "| cell | Python | pyspark | " + " | ".join(SHOWN) + " | passed | failed | skipped | time |",
        "|---|---|---|" + "---|" * len(SHOWN) + "---|---|---|---|",
    ]
    for r in results:
        shown = [r.versions.get(name, "–") for name in SHOWN]
        counts = [str(r.passed), str(r.failed), str(r.skipped)] if not r.note else [r.note, "", ""]
        name = r.cell.name + (" (earlier run)" if r.earlier else "")
        lines.append(
            f"| {name} | {r.python or r.cell.python} | {r.versions.get('pyspark', r.cell.spark)} | "
            + " | ".join(shown)
            + f" | {' | '.join(counts)} | {r.seconds / 60:.1f} min |"
        )
    return "\n".join(lines) + "\n"


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
        out.write_text(markdown(stored, report_only * 60, (load, load)))
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
    out.write_text(markdown(results, wall, (load_start, os.getloadavg()[0])))
    console.print(f"compat: {len(results)} cells in {wall / 60:.1f} min; table written to {out}")
    sys.exit(0 if all(r.ok for r in results if not r.earlier) else 1)


if __name__ == "__main__":
    main()
