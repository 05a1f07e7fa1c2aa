"""Where heavy, rebuildable things live: outside the repository, shared by every clone.

``$TWOPHASE_CACHE`` (default ``~/.cache/twophase``) holds Kafka's jars, the Spark jars, the MinIO and
fake-gcs-server binaries, Azurite's npm package and, under ``run/``, the state of services started
by ``twophase services up``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from twophase.sinks.errors import ServiceUnavailableError


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


def go_install(module: str, version: str, binary_name: str, what: str) -> Path:
    """The binary ``binary_name`` of Go module ``module@version``, built once with ``go install``
    into ``<cache>/bin/<binary_name>-<version>/`` (a few minutes the first time; later calls, from
    any clone, find it there).

    Raises:
        ServiceUnavailableError: ``go`` is missing or the build fails (the message has Go's last line).
    """
    tag = version.rsplit("-", 1)[-1]
    gobin = cache_dir() / "bin" / f"{binary_name}-{tag}"
    binary = gobin / binary_name
    with file_lock(gobin.parent / f".{binary_name}-{tag}.lock"):
        if binary.is_file():
            return binary
        go = shutil.which("go")
        if go is None:
            raise ServiceUnavailableError(f"Go ('go') is not on PATH; it is needed once to build {what}")
        env = {**os.environ, "GOBIN": str(gobin), "CGO_ENABLED": "0"}
        proc = subprocess.run(
            [go, "install", f"{module}@{version}"], capture_output=True, text=True, env=env, check=False
        )
        if proc.returncode != 0 or not binary.is_file():
            lines = [line for line in proc.stderr.splitlines() if line.strip()] or ["no binary produced"]
            raise ServiceUnavailableError(f"building {what} with go install failed: {lines[-1]}")
    return binary
