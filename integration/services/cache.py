"""Where heavy, rebuildable things live: outside the repository, shared by every clone.

``$TWOPHASE_CACHE`` (default ``~/.cache/twophase``) holds Kafka's jars, the Spark jars, the MinIO
binary and, under ``run/``, the state of services started by ``twophase services up``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def cache_dir() -> Path:
    """The cache root, created if missing: ``$TWOPHASE_CACHE`` or ``~/.cache/twophase``."""
    raw = os.environ.get("TWOPHASE_CACHE")
    root = Path(raw).expanduser() if raw else Path.home() / ".cache" / "twophase"
    root.mkdir(parents=True, exist_ok=True)
    return root


def run_dir() -> Path:
    """Directory (mode 0700) of the state file of services started by ``twophase services up``.

    ``$TWOPHASE_RUN_DIR`` overrides it (the CLI tests use this to stay apart from a developer's
    running services); otherwise ``<cache>/run``.
    """
    raw = os.environ.get("TWOPHASE_RUN_DIR")
    path = Path(raw).expanduser() if raw else cache_dir() / "run"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block.

    Several pytest sessions may share the cache; the lock makes one of them build or resolve while
    the others wait and then reuse the result.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
