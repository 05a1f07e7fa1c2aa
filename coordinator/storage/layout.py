"""Checkpoint-storage naming scheme as pure functions, shared by the local and S3 backends.

Layout relative to ``<base>/<job-id>/`` (DESIGN.md §5)::

    chk-<n>/_metadata              a checkpoint (kind ``checkpoint`` or ``final``)
    chk-<n>/_final                 empty marker: chk-<n> is a final checkpoint (written before _metadata)
    chk-<n>/_committed             empty marker: every transaction chk-<n> holds is committed
    chk-<n>/committables-*.arrow   a sink's committables, named by its manifest (format v3)
    savepoints/sp-<n>/_metadata    a savepoint
    _drivers/driver-<e>            one driver's claim of the job (driver epoch ``e``; the newest wins)

``<n>`` is the decimal checkpoint id without leading zeros (≥ 1). Ids are ordered numerically,
never lexicographically (``chk-10`` is newer than ``chk-9``). Checkpoints and savepoints share one
id sequence, so an id names at most one of them.

The ``_final`` marker exists so that listing can tell final checkpoints from ordinary ones without
reading every ``_metadata``; the kind stored inside ``_metadata`` stays authoritative and a
mismatch is reported as corruption on load.
"""

from __future__ import annotations

import re

from twophase.coordinator.state.metadata import CheckpointKind
from twophase.sinks.errors import ConfigError

METADATA_NAME = "_metadata"
FINAL_MARKER_NAME = "_final"
COMMITTED_MARKER_NAME = "_committed"
"""Written after every transaction a checkpoint holds was confirmed committed: a restore from it
has nothing to re-commit (Kafka cannot tell a long-committed transaction from an aborted one once
its id was reused or expired)."""
SAVEPOINTS_DIR = "savepoints"
DRIVERS_DIR = "_drivers"
"""Driver epochs: each driver of the job creates ``driver-<e>`` here, conditionally, before it
publishes anything; a driver that sees a newer one is fenced (issue #43)."""
DRIVER_PREFIX = "driver-"
CHECKPOINT_PREFIX = "chk-"
SAVEPOINT_PREFIX = "sp-"
TEMP_INFIX = ".tmp-"
"""Temporary files of an unfinished publish are named ``_metadata.tmp-<random>``; never listed."""

MAX_JOB_ID_LENGTH = 200

_CHK_RE = re.compile(r"chk-([1-9][0-9]*)")
_SP_RE = re.compile(r"sp-([1-9][0-9]*)")
_DRIVER_RE = re.compile(r"driver-([1-9][0-9]*)")


def committed_marker_of(metadata_location: str) -> str:
    """The ``_committed`` marker beside a checkpoint's ``_metadata`` (a location or its directory)."""
    loc = metadata_location.rstrip("/")
    if loc.endswith("/" + METADATA_NAME):
        loc = loc[: -len(METADATA_NAME) - 1]
    return f"{loc}/{COMMITTED_MARKER_NAME}"


def validate_job_id(job_id: str) -> str:
    """Check that ``job_id`` is one safe path segment (local path and S3 key alike) and return it.

    Refused: empty or longer than 200 characters, leading/trailing whitespace, ``/``, ``\\``,
    ``..`` anywhere, ``.`` alone, NUL or any other control character.

    Raises:
        ConfigError: the id is not a safe path segment; the message says why.
    """
    if not isinstance(job_id, str) or not job_id:
        raise ConfigError(f"job id must be a non-empty string, got {job_id!r}")
    problems = []
    if len(job_id) > MAX_JOB_ID_LENGTH:
        problems.append(f"longer than {MAX_JOB_ID_LENGTH} characters")
    if job_id != job_id.strip():
        problems.append("leading or trailing whitespace")
    if "/" in job_id or "\\" in job_id:
        problems.append("contains a path separator")
    if ".." in job_id or job_id == ".":
        problems.append("contains '..' or is '.'")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in job_id):
        problems.append("contains NUL or a control character")
    if problems:
        raise ConfigError(f"job id {job_id!r:.80} is not a safe path segment: {', '.join(problems)}")
    return job_id


def checkpoint_dir_name(checkpoint_id: int) -> str:
    """``chk-<n>``: the directory of a checkpoint or final checkpoint, relative to the job dir."""
    _check_id(checkpoint_id)
    return f"{CHECKPOINT_PREFIX}{checkpoint_id}"


def savepoint_dir_name(checkpoint_id: int) -> str:
    """``sp-<n>``: the directory of a savepoint, relative to ``<job>/savepoints/``."""
    _check_id(checkpoint_id)
    return f"{SAVEPOINT_PREFIX}{checkpoint_id}"


def relative_dir(checkpoint_id: int, kind: CheckpointKind) -> str:
    """The ``/``-separated directory of a checkpoint relative to the job dir.

    ``chk-<n>`` for checkpoint and final kinds, ``savepoints/sp-<n>`` for savepoints.
    """
    if kind is CheckpointKind.SAVEPOINT:
        return f"{SAVEPOINTS_DIR}/{savepoint_dir_name(checkpoint_id)}"
    return checkpoint_dir_name(checkpoint_id)


def parse_checkpoint_dir(name: str) -> int | None:
    """The id of a ``chk-<n>`` directory name, or ``None`` for any other name (temp files, junk)."""
    m = _CHK_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def parse_savepoint_dir(name: str) -> int | None:
    """The id of an ``sp-<n>`` directory name, or ``None`` for any other name."""
    m = _SP_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def driver_epoch_name(epoch: int) -> str:
    """``driver-<e>``: the claim of driver epoch ``epoch``, relative to ``_drivers/``."""
    _check_id(epoch)
    return f"{DRIVER_PREFIX}{epoch}"


def parse_driver_epoch(name: str) -> int | None:
    """The epoch of a ``driver-<e>`` name, or ``None`` for any other name."""
    m = _DRIVER_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is the temporary file of an unfinished (or crashed) publish."""
    return name.startswith(METADATA_NAME + TEMP_INFIX)


def _check_id(checkpoint_id: int) -> None:
    if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int) or checkpoint_id < 1:
        raise ValueError(f"checkpoint id must be an integer >= 1, got {checkpoint_id!r}")
