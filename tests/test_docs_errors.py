"""The error guide (docs/reference/errors.md) says what every public error means and what to do
(#45 item 9): each public error class has a ``### `Name``` section with a **Means:** and a
**Do:** line, and the guide names no class that does not exist.

Public errors are found by reading the sources (nothing is imported): every exception class of a
public module of ``twophase.sinks`` and ``twophase.connectors`` (none under an ``internal``
package, none whose name starts with ``_``), and every exception class the top-level package
exports."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "reference" / "errors.md"
PUBLIC = ("sinks", "connectors")


def _public_modules() -> list[Path]:
    modules = []
    for folder in PUBLIC:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "internal" in parts or (path.name.startswith("_") and path.name != "__init__.py"):
                continue
            modules.append(path)
    return modules


def _classes(paths: list[Path]) -> dict[str, list[str]]:
    """Top-level class name -> the last names of its bases, for every class in ``paths``."""
    classes: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                classes[node.name] = bases
    return classes


def _builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def _exceptions(classes: dict[str, list[str]]) -> set[str]:
    """The classes of ``classes`` that derive from an exception, directly or through each other."""
    found: set[str] = set()
    while True:
        new = {
            name
            for name, bases in classes.items()
            if name not in found and any(b in found or _builtin_exception(b) for b in bases)
        }
        if not new:
            return found
        found |= new


def _top_level_exports() -> set[str]:
    import twophase

    return set(twophase.__all__)  # computed from the connectors' declarations


def _every_class() -> dict[str, list[str]]:
    return _classes([p for d in ("sinks", "coordinator", "connectors") for p in (ROOT / d).rglob("*.py")])


def public_errors() -> set[str]:
    """Every public error class of the product, by name."""
    public = {n for n in _exceptions(_classes(_public_modules())) if not n.startswith("_")}
    exported = _exceptions(_every_class()) & _top_level_exports()
    return public | exported


def guide_sections() -> dict[str, str]:
    """``### `Name``` heading -> the text of its section, for every section of the guide."""
    text = GUIDE.read_text(encoding="utf-8")
    sections: dict[str, str] = {}
    matches = list(re.finditer(r"^### `([A-Za-z_][A-Za-z0-9_]*)`\s*$", text, re.MULTILINE))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        sections[match.group(1)] = text[match.end() : end]
    return sections


def test_the_search_finds_the_known_public_errors() -> None:
    # a guard on the search itself: an AST change that found nothing would pass the test below
    errors = public_errors()
    assert {"TwoPhaseError", "ConfigError", "TransactionLostError", "KafkaAuthorizationError"} <= errors
    assert not any(name.startswith("_") for name in errors)
    assert "IncompleteResponseError" not in errors  # connectors/s3/internal: not public


def test_every_public_error_has_a_section_saying_what_it_means_and_what_to_do() -> None:
    sections = guide_sections()
    missing = sorted(public_errors() - sections.keys())
    assert not missing, f"docs/reference/errors.md has no '### `Name`' section for {missing}"
    incomplete = sorted(
        name
        for name in public_errors()
        if "**Means:**" not in sections[name] or "**Do:**" not in sections[name]
    )
    assert not incomplete, f"sections of docs/reference/errors.md without **Means:** or **Do:**: {incomplete}"


def test_the_guide_names_no_error_that_does_not_exist() -> None:
    unknown = sorted(guide_sections().keys() - _exceptions(_every_class()))
    assert not unknown, f"docs/reference/errors.md has sections for classes that do not exist: {unknown}"
