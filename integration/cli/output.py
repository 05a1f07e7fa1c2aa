"""How commands print: rich tables that fit an 80-column terminal, or ``--json``.

- Results go to stdout: a table (or a few) for people, one JSON document with ``--json``.
- Progress (spinners) and notes go to stderr, so ``--json`` output is always parseable.
- Tables are built with :func:`table`: short columns never wrap, long ones fold instead of being
  cut, so no cell is ever truncated to nothing at 80 columns.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

F = TypeVar("F", bound=Callable[..., Any])

OK = "[green]✓[/green]"
FAIL = "[red]✗[/red]"

console = Console()
"""Results (stdout)."""
err_console = Console(stderr=True)
"""Progress and notes (stderr)."""


def json_option(keys: str) -> Callable[[F], F]:
    """The ``--json`` flag; ``keys`` documents the JSON document's stable keys in ``--help``."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help=f"Print one JSON document instead of tables. Keys: {keys}",
    )


def emit_json(document: Any) -> None:
    """Print ``document`` as JSON on stdout (keys in the order given, non-ASCII kept)."""
    click.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))


def show(*renderables: RenderableType | str) -> None:
    """Print tables and lines on stdout."""
    for r in renderables:
        console.print(r)


def note(text: str) -> None:
    """A remark on stderr (never part of the result)."""
    err_console.print(text)


@contextlib.contextmanager
def progress(text: str, quiet: bool = False) -> Iterator[None]:
    """A spinner on stderr while the block runs (none when ``quiet``, e.g. with ``--json``)."""
    if quiet:
        yield
        return
    with err_console.status(text):
        yield


@dataclass(frozen=True)
class Column:
    """A table column.

    Attributes:
        header: the column's title.
        kind: ``key`` (names, ids, states: one line while there is room, folded when the table
            must shrink), ``number`` (right-aligned, never wraps), ``whole`` (never wraps nor
            folds: endpoints) or ``text`` (wraps and folds; shrinks first).
    """

    header: str
    kind: str = "key"


SEPARATOR = 3
"""Columns of a ``box.MINIMAL`` table between two cells: `` │ ``."""
MIN_WIDTH = {"key": 6, "text": 10}
"""The narrowest a shrinking column gets (never below its widest cell)."""


@dataclass(frozen=True)
class FittedTable:
    """A table laid out when it is printed, for the terminal's width: nothing is ever cut.

    Number and whole columns keep their widest cell; when the table is wider than the terminal,
    the widest text or key column loses one character at a time (down to :data:`MIN_WIDTH`) and
    wraps or folds its cells.

    Attributes:
        title / caption: printed above / below.
        columns: the columns.
        rows: the cells (rich markup allowed), one sequence per row.
    """

    title: str | None
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str | None = None

    def widths(self, max_width: int) -> list[int]:
        """Each column's width so that the table fits ``max_width`` where that is possible."""
        widths = [
            max([_width(c.header), *(_width(r[i]) for r in self.rows)]) for i, c in enumerate(self.columns)
        ]
        floors = [
            min(widths[i], max(MIN_WIDTH[c.kind], _longest_word(c.header)))
            if c.kind in MIN_WIDTH
            else widths[i]
            for i, c in enumerate(self.columns)
        ]
        budget = max_width - SEPARATOR * (len(self.columns) - 1)
        while sum(widths) > budget:
            shrinkable = [i for i in range(len(widths)) if widths[i] > floors[i]]
            if not shrinkable:
                break
            # text columns give way before key columns
            widest = max(shrinkable, key=lambda i: (self.columns[i].kind == "text", widths[i]))
            widths[widest] -= 1
        return widths

    def fits(self, max_width: int) -> bool:
        """Whether the columns fit ``max_width`` at all (else the table is printed as records)."""
        return sum(self.widths(max_width)) + SEPARATOR * (len(self.columns) - 1) <= max_width

    def build(self, max_width: int) -> Table:
        """The rich table for a terminal ``max_width`` columns wide: columns if they fit, else one
        block of ``header │ value`` lines per row."""
        if not self.fits(max_width):
            return self._records(max_width)
        t = Table(title=self.title, caption=self.caption, box=box.MINIMAL, show_edge=False, pad_edge=False)
        for c, w in zip(self.columns, self.widths(max_width), strict=True):
            t.add_column(
                c.header,
                width=w,
                justify="right" if c.kind == "number" else "left",
                no_wrap=c.kind in ("number", "whole"),
                overflow="fold",
            )
        for r in self.rows:
            t.add_row(*r)
        return t

    def _records(self, max_width: int) -> Table:
        label = max(_width(c.header) for c in self.columns)
        t = Table(
            title=self.title,
            caption=self.caption,
            box=box.MINIMAL,
            show_edge=False,
            pad_edge=False,
            show_header=False,
        )
        t.add_column("field", width=label, no_wrap=True)
        t.add_column("value", width=max(max_width - label - SEPARATOR, 1), overflow="fold")
        for r in self.rows:
            for c, cell in zip(self.columns, r, strict=True):
                t.add_row(c.header, cell)
            t.add_section()
        return t

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.build(options.max_width)


def table(
    title: str | None,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    caption: str | None = None,
) -> FittedTable:
    """A :class:`FittedTable`: laid out for the terminal when printed, never cutting a cell."""
    return FittedTable(title, tuple(columns), tuple(tuple(r) for r in rows), caption)


def _width(cell: str) -> int:
    # the widest line of the cell as printed (markup such as [green] takes no room)
    return max((Text.from_markup(line).cell_len for line in str(cell).splitlines()), default=0)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)
