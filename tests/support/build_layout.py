"""What ``setup.py`` puts in the wheel users install, read from ``setup.py`` itself: its code
folders, its development tooling (left out of that wheel) and the packages it ships."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


@cache
def setup_module() -> ModuleType:
    """``setup.py`` imported under another name (its ``setup()`` call runs only as ``__main__``)."""
    spec = importlib.util.spec_from_file_location("twophase_setup_py", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def code_folders() -> tuple[str, ...]:
    """The folders whose packages install under ``twophase``."""
    folders: tuple[str, ...] = setup_module().CODE_FOLDERS
    return folders


def development() -> tuple[str, ...]:
    """The development tooling's folders and modules, relative to the repository root."""
    paths: tuple[str, ...] = setup_module().DEVELOPMENT
    return paths


def is_development(path: Path) -> bool:
    """Whether ``path`` (absolute, in this checkout) is development tooling."""
    found: bool = setup_module().is_development(path.relative_to(ROOT).as_posix())
    return found


def product_packages() -> set[str]:
    """The packages of the wheel users install."""
    return set(setup_module().product_packages())
