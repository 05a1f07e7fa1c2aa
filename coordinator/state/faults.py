"""Named fault points for crash testing (DESIGN.md §8).

``TWOPHASE_FAULT=<point>[:<n>]`` makes the process exit at once with status 137 (as if killed by
SIGKILL) the n-th time (default 1st) it reaches ``<point>``. Several points may be given,
comma-separated. Counting is per process, unless ``TWOPHASE_FAULT_STATE`` names a directory: then
hits are counted across every process that shares it (one file per hit, created atomically), so
that an executor-side fault that kills a Python worker fires once, not once per new worker.

The exit is ``os._exit``: no ``finally`` blocks, no atexit hooks, no flushing — a real crash.
With ``TWOPHASE_FAULT_KILL=executor``, an executor-side point kills the whole executor JVM that
runs the task first (SIGKILL to the ancestor process running Spark's executor backend): executor
loss mid-write on a cluster, not only a Python worker's death. With ``TWOPHASE_FAULT_KILL=worker``
it kills the standalone worker that launched that executor and every process under it (its
executors and their Python workers): the loss of a whole worker mid-epoch. With
``TWOPHASE_FAULT_ACTION=pause`` (and a ``TWOPHASE_FAULT_STATE`` directory) the process does not
exit: it holds at the point until told to go on (:func:`paused_marker`, :func:`resume_marker`), so
that a test can act on the world at an exact moment, e.g. restart a database mid-commit.

A point may also carry its own timed pause, ``<point>:<n>:pause=<seconds>``: the n-th arrival
sleeps that long and goes on (nothing to resume it, no exit; with ``TWOPHASE_FAULT_STATE`` the
pause is announced by :func:`paused_marker`, so a test can tell it fired). That holds one attempt
of one task at an exact point, so that Spark's speculation starts a copy of it on another executor
which wins, and the held attempt lives on beside it as a zombie (the ``cluster4z`` chaos trials).
The other points of the same variable still exit (or kill) as usual.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Final

from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

ENV: Final = "TWOPHASE_FAULT"
STATE_ENV: Final = "TWOPHASE_FAULT_STATE"
KILL_ENV: Final = "TWOPHASE_FAULT_KILL"
ACTION_ENV: Final = "TWOPHASE_FAULT_ACTION"
PAUSE_ENV: Final = "TWOPHASE_FAULT_PAUSE_S"
ACTIONS: Final = ("exit", "pause")
"""What ``TWOPHASE_FAULT_ACTION`` may name: exit 137 (the default), or pause at the point."""
DEFAULT_PAUSE_S: Final = 300.0
EXECUTOR_BACKEND: Final = b"CoarseGrainedExecutorBackend"
WORKER_MAIN: Final = b"org.apache.spark.deploy.worker.Worker"
KILLS: Final = ("executor", "worker")
"""What ``TWOPHASE_FAULT_KILL`` may name: the executor JVM, or the whole worker."""
EXIT_STATUS: Final = 137

POINTS: Final = frozenset(
    {
        "before_write",  # executor: transaction begun, nothing written
        "mid_write",  # executor: after the first batch was written
        "after_pre_commit",  # executor: pre-committed, committable not yet returned to the driver
        "before_persist",  # driver: all acknowledgements in, checkpoint not yet persisted
        "after_persist",  # driver: checkpoint persisted, nothing committed yet
        "mid_commit",  # driver: after the first of several commits
        "after_commit",  # driver: all committed, before returning to Spark
        "during_finish",  # driver: end of input, sinks finishing, before the final checkpoint
        "during_final_checkpoint",  # driver: final checkpoint triggered, not yet persisted
        "during_stop_with_savepoint",  # driver: savepoint triggered, not yet persisted
        "during_cancel",  # driver: cancel in progress
    }
)

PAUSE_KEY: Final = "pause="
"""The third field of a timed pause, ``<point>:<n>:pause=<seconds>``."""

_lock = threading.Lock()
_hits: Counter[str] = Counter()


def parse_faults(spec: str) -> dict[str, tuple[int, float | None]]:
    """Parse ``point[:n[:pause=S]][,...]`` into ``{point: (n, pause seconds or None)}``.

    Raises:
        ValueError: an unknown point, a count that is not a positive integer, or a third field
            that is not ``pause=<seconds ≥ 0>``.
    """
    out: dict[str, tuple[int, float | None]] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, rest = part.partition(":")
        count, _, extra = rest.partition(":")
        if name not in POINTS:
            raise ValueError(f"{ENV}: unknown fault point {name!r}; known: {', '.join(sorted(POINTS))}")
        n = int(count) if count else 1
        if n < 1:
            raise ValueError(f"{ENV}: count must be >= 1 in {part!r}")
        pause: float | None = None
        if extra:
            if not extra.startswith(PAUSE_KEY):
                raise ValueError(f"{ENV}: expected {PAUSE_KEY}<seconds> after the count in {part!r}")
            pause = float(extra.removeprefix(PAUSE_KEY))
            if not pause >= 0:  # also refuses nan
                raise ValueError(f"{ENV}: a pause must be >= 0 seconds in {part!r}")
        out[name] = (n, pause)
    return out


def parse(spec: str) -> dict[str, int]:
    """Parse ``point[:n[:pause=S]][,...]`` into ``{point: n}`` (see :func:`parse_faults`).

    Raises:
        ValueError: as :func:`parse_faults`.
    """
    return {name: n for name, (n, _) in parse_faults(spec).items()}


def fault_point(name: str) -> None:
    """Mark that the process reached fault point ``name``; exit 137 (or pause) if ``TWOPHASE_FAULT``
    says so: a timed pause (``point:n:pause=S``) sleeps and returns, whatever ``TWOPHASE_FAULT_ACTION``.

    Raises:
        ValueError: ``name`` is not a known point (a programming error), or the env var is malformed.
    """
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}")
    spec = os.environ.get(ENV)
    if not spec:
        return
    wanted, timed_pause = parse_faults(spec).get(name, (None, None))
    if wanted is None:
        return
    state_dir = os.environ.get(STATE_ENV)
    hit = _shared_hit(state_dir, name) if state_dir else _local_hit(name)
    if hit != wanted:
        return
    if timed_pause is not None:
        _sleep(state_dir, name, hit, timed_pause)
        return
    action = os.environ.get(ACTION_ENV) or "exit"
    if action not in ACTIONS:
        raise ValueError(f"{ACTION_ENV}={action!r}: must be one of {', '.join(ACTIONS)}")
    if action == "pause":
        if not state_dir:
            raise ValueError(f"{ACTION_ENV}=pause needs {STATE_ENV} (where the pause is announced)")
        _pause(state_dir, name, hit)
        return
    log_event(log, logging.WARNING, "fault injected", point=name, hit=hit, pid=os.getpid())
    for handler in logging.getLogger().handlers:
        handler.flush()
    kill = os.environ.get(KILL_ENV) or None
    if kill is not None and kill not in KILLS:
        raise ValueError(f"{KILL_ENV}={kill!r}: must be one of {', '.join(KILLS)}")
    if kill == "executor":
        _sigkill(_ancestor(EXECUTOR_BACKEND))
    elif kill == "worker":
        worker = _ancestor(WORKER_MAIN)
        if worker is not None:
            under = _descendants(worker)  # listed first: killed, the worker's children re-parent
            _sigkill(worker)  # first, so that it cannot launch a replacement executor
            for pid in under:
                _sigkill(pid)
    os._exit(EXIT_STATUS)


def paused_marker(state_dir: str | os.PathLike[str], name: str, hit: int) -> Path:
    """The file a process creates when it holds at the ``hit``-th arrival at point ``name``."""
    return Path(state_dir) / f"{name}.{hit}.paused"


def resume_marker(state_dir: str | os.PathLike[str], name: str, hit: int) -> Path:
    """The file that lets a process held at ``name``'s ``hit``-th arrival go on (created by the test)."""
    return Path(state_dir) / f"{name}.{hit}.resume"


def _pause(state_dir: str, name: str, hit: int) -> None:
    """Announce the pause, then wait for the resume marker, at most ``TWOPHASE_FAULT_PAUSE_S`` seconds
    (a test that died must not hang the job forever: it goes on, with a warning)."""
    bound_s = float(os.environ.get(PAUSE_ENV) or DEFAULT_PAUSE_S)
    log_event(log, logging.WARNING, "fault paused", point=name, hit=hit, pid=os.getpid())
    paused_marker(state_dir, name, hit).touch()
    deadline = time.monotonic() + bound_s
    resume = resume_marker(state_dir, name, hit)
    while not resume.exists():
        if time.monotonic() > deadline:
            log_event(log, logging.WARNING, "fault pause expired", point=name, hit=hit, bound_s=bound_s)
            return
        time.sleep(0.05)
    log_event(log, logging.INFO, "fault resumed", point=name, hit=hit, pid=os.getpid())


def _sleep(state_dir: str | None, name: str, hit: int, seconds: float) -> None:
    """A timed pause: announce it (the marker, when hits are shared) and hold ``seconds``."""
    log_event(log, logging.WARNING, "fault paused", point=name, hit=hit, pid=os.getpid(), seconds=seconds)
    if state_dir:
        paused_marker(state_dir, name, hit).touch()
    time.sleep(seconds)
    log_event(log, logging.INFO, "fault pause over", point=name, hit=hit, pid=os.getpid())


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:  # "pid (comm) state ppid ..."
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def _ancestor(marker: bytes) -> int | None:
    """The nearest ancestor of this process whose command line contains ``marker`` (or ``None``)."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker in f.read():
                    return pid
            pid = _parent(pid)
        except (OSError, ValueError, IndexError):
            return None
    return None


def _descendants(root: int) -> list[int]:
    """Every process under ``root`` (children, grandchildren, ...), by the parents in ``/proc``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = _parent(int(entry))
            except (OSError, ValueError, IndexError):
                continue  # the process ended meanwhile
    found: list[int] = []
    frontier = {root}
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found.extend(children)
        frontier = set(children)
    return found


def _sigkill(pid: int | None) -> None:
    if pid is None or pid == os.getpid():
        return  # this process exits by itself, with the fault's status
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(pid, signal.SIGKILL)


def _local_hit(name: str) -> int:
    with _lock:
        _hits[name] += 1
        return _hits[name]


def _shared_hit(state_dir: str, name: str) -> int:
    """Record one hit as a new file ``<name>.<k>`` (O_EXCL, so concurrent processes never share k)."""
    os.makedirs(state_dir, exist_ok=True)
    k = 1
    while True:
        try:
            fd = os.open(os.path.join(state_dir, f"{name}.{k}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            k += 1
            continue
        os.close(fd)
        return k
