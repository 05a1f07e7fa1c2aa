"""Importing a benchmark module in a test: ``benchmarks/`` is no package of twophase, so its
modules are loaded from the checkout by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
"""The checkout's root (which holds ``benchmarks/``)."""


def load_benchmark(name: str, path: Path) -> ModuleType:
    """The module at ``path`` (under :data:`ROOT`), registered as ``name``.

    Raises:
        ImportError: ``path`` cannot be loaded.
    """
    sys.path.insert(0, str(ROOT))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT))
