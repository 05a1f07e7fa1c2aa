"""Run every benchmark module and print its results as tables (``make bench``).

A benchmark is a module ``benchmarks/bench_<name>.py`` exposing ``run() -> dict``. Shown as:

- top-level scalar entries: one ``metric | value`` table;
- an entry whose value is a dict of dicts (``{"scenarios": {"a": {"median_ms": 1.0, ...}, ...}}``):
  one table titled by the key, a row per inner dict, a column per inner key;
- an entry whose value is a flat dict: a ``metric | value`` table titled by the key.

Usage::

    python -m benchmarks.run                      # all benchmarks
    python -m benchmarks.run -k tasks_to_trigger  # only those whose name contains the text
    python -m benchmarks.run --json out.json      # also write every result as JSON
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

import benchmarks

# Piped output (make bench | tee) would otherwise be cut at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)


def discover() -> list[str]:
    """Names (without the ``bench_`` prefix) of the benchmark modules, sorted."""
    return sorted(
        m.name.removeprefix("bench_")
        for m in pkgutil.iter_modules(benchmarks.__path__)
        if m.name.startswith("bench_")
    )


def _cell(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, Mapping):
        return json.dumps(value, default=str)
    return str(value)


def _key_value_table(title: str, items: Mapping[str, Any]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in items.items():
        table.add_row(key, _cell(value))
    return table


def _rows_table(title: str, rows: Mapping[str, Mapping[str, Any]]) -> Table:
    columns: list[str] = []
    for row in rows.values():
        columns.extend(k for k in row if k not in columns)
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for column in columns:
        table.add_column(column, justify="right")
    for name, row in rows.items():
        table.add_row(name, *(_cell(row.get(column, "")) for column in columns))
    return table


def print_result(name: str, result: Mapping[str, Any], seconds: float | None = None) -> None:
    """Print one benchmark's ``run()`` result as tables (see the module docstring)."""
    header = name if seconds is None else f"{name} ({seconds:.1f} s)"
    console.rule(f"[bold]{header}")
    scalars = {k: v for k, v in result.items() if not isinstance(v, Mapping)}
    if scalars:
        console.print(_key_value_table(name, scalars))
    for key, value in result.items():
        if not isinstance(value, Mapping):
            continue
        if value and all(isinstance(v, Mapping) for v in value.values()):
            console.print(_rows_table(f"{name}: {key}", value))
        else:
            console.print(_key_value_table(f"{name}: {key}", value))


@click.command()
@click.option("-k", "only", multiple=True, help="Run only benchmarks whose name contains this text.")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write results here."
)
def main(only: tuple[str, ...], json_path: Path | None) -> None:
    """Run the benchmarks and print their tables."""
    results: dict[str, Any] = {}
    for name in discover():
        if only and not any(text in name for text in only):
            continue
        module = importlib.import_module(f"benchmarks.bench_{name}")
        run = getattr(module, "run", None)
        if not callable(run):
            console.print(f"[yellow]skipped {name}: no run()[/yellow]")
            continue
        start = time.perf_counter()
        result = run()
        results[name] = result
        print_result(name, result, time.perf_counter() - start)
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
