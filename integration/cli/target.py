"""Which job an operator command acts on: its id, its checkpoint directory and its sinks.

The job is given in one of four ways (checked in this order):

1. ``--sinks module:function``: a function of the user's, importable from the current directory
   or the environment, called with no arguments. It returns the job's sinks (a list of
   ``TwoPhaseCommitSink``; then ``--checkpoint-dir`` and ``--job``/``--job-id`` are needed too) or a
   ``twophase.Job`` (which knows its id, checkpoint directory and sinks; the options may repeat them
   but not contradict them).
2. ``-o KEY=VALUE`` (repeated): the options of the job's ``.format("twophase")`` query, as its
   ``.option(key, value)`` calls give them: ``sink`` (a declared connector's kind) and its fields
   build the sink as the data source does; ``job``/``jobId`` and ``twophaseCheckpointDir`` (or
   ``--job``/``--job-id`` and ``--checkpoint-dir``) name the job, ``s3.*`` reach its checkpoints.
3. ``--checkpoint-dir DIR`` with ``--job NAME`` (the id is derived from the name as ``Job`` does)
   or ``--job-id ID``: enough to read checkpoints; commands that need the sinks say so.
4. Nothing: in a checkout, the flights demo's run (``--work-dir``, default the latest ``twophase
   demo`` run: :mod:`twophase.integration.cli.flights_runs`, development tooling); in an install,
   a usage error naming the three ways above.

The user commands stand on the runtime and the connectors: this module imports neither the flights
demo nor the service launchers.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from twophase.coordinator.storage import AzureStorageOptions, GcsStorageOptions, open_storage
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import ConfigError, TwoPhaseError
from twophase.sinks.s3_options import S3Options

AnySink = TwoPhaseCommitSink[Any, Any]
F = TypeVar("F", bound=Callable[..., Any])


FLIGHTS_RUNS = "twophase.integration.cli.flights_runs"
"""The development module whose flights demo runs are the default job in a checkout; reached by
name, since the wheel users install does not hold it."""


def flights_runs_here() -> bool:
    """Whether the flights demo's runs can be the default job here (a checkout, not a wheel)."""
    return importlib.util.find_spec(FLIGHTS_RUNS) is not None


# ------------------------------------------------------------------------------------ any job


@dataclass(frozen=True)
class JobTarget:
    """The job a command acts on.

    Attributes:
        job_id: the job's id (names its checkpoints and transactions).
        checkpoint_dir: its checkpoint directory (a local path, ``s3://``, ``abfss://``, ...).
        origin: how it was given, for messages (``--sinks mod:fn``, ``flights run DIR``, ...).
        load_sinks: builds the job's sinks, or ``None`` when they were not given.
        s3: how to reach checkpoints on ``s3://`` (the query's ``s3.*`` options), or ``None``: the
            standard AWS chain.
        azure: how to reach checkpoints on ``abfss://``/``wasbs://`` (a flights run's account), or
            ``None``: ``AZURE_STORAGE_*``, else ``DefaultAzureCredential``. Holds secrets; its
            ``repr`` does not show them.
        gcs: how to reach checkpoints on ``gs://`` (a flights run's emulator), or ``None``:
            ``STORAGE_EMULATOR_HOST``, else Application Default Credentials.
    """

    job_id: str
    checkpoint_dir: str
    origin: str
    load_sinks: Callable[[], list[AnySink]] | None = None
    s3: S3Options | None = None
    azure: AzureStorageOptions | None = None
    gcs: GcsStorageOptions | None = None

    def storage(self) -> CheckpointStorage:
        """The job's checkpoint storage (writes nothing).

        Raises:
            ConfigError: a bad location or job id.
        """
        return open_storage(
            self.checkpoint_dir,
            self.job_id,
            s3_options=self.s3,
            azure_options=self.azure,
            gcs_options=self.gcs,
        )

    def sinks(self, command: str) -> list[AnySink]:
        """The job's sinks.

        Raises:
            click.UsageError: the sinks were not given (``command`` names what needs them).
        """
        if self.load_sinks is None:
            raise click.UsageError(
                f"{command} needs the job's sinks: pass --sinks module:function (a function returning "
                "the sinks or a twophase.Job) or the query's options (-o sink=...)"
            )
        return self.load_sinks()


def target_options(f: F) -> F:
    """Add ``--work-dir``, ``--checkpoint-dir``, ``--job``, ``--job-id``, ``--sinks`` and ``-o`` to a
    command."""
    options = [
        click.option(
            "--work-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            hidden=not flights_runs_here(),
            help="The flights demo run's work directory (default: the latest demo run).",
        ),
        click.option(
            "--checkpoint-dir", default=None, help="The job's checkpoint directory (local or s3://)."
        ),
        click.option(
            "--job", "job_name", default=None, help="The job's name (its id is derived as Job does)."
        ),
        click.option("--job-id", default=None, help="The job's id (instead of --job)."),
        click.option(
            "--sinks",
            "sinks_factory",
            default=None,
            metavar="MODULE:FUNCTION",
            help="A function returning the job's sinks (a list) or a twophase.Job; importable from "
            "the current directory or the environment.",
        ),
        click.option(
            "-o",
            "--option",
            "query_options",
            multiple=True,
            metavar="KEY=VALUE",
            help='An option of the job\'s .format("twophase") query (repeat it): sink and its '
            "fields build the sink as the data source does; job/jobId, twophaseCheckpointDir and "
            "s3.* name the job and reach its checkpoints.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def resolve_target(
    work_dir: Path | None,
    checkpoint_dir: str | None,
    job_name: str | None,
    job_id: str | None,
    sinks_factory: str | None,
    query_options: tuple[str, ...] = (),
) -> JobTarget:
    """The job the options of :func:`target_options` name (see the module docstring).

    Raises:
        click.UsageError: options that do not go together, or are missing.
        ConfigError: the factory cannot be imported or returned something else; no demo run; a
            query option the data source would refuse (``MissingExtraError`` for a connector whose
            extra is not installed).
    """
    from twophase.coordinator.spark.checks import check_job_id, job_id_from_name

    if job_name is not None and job_id is not None:
        raise click.UsageError("give --job NAME or --job-id ID, not both")
    explicit_id = job_id_from_name(job_name) if job_name is not None else None
    if job_id is not None:
        explicit_id = check_job_id(job_id)
    if work_dir is not None and (sinks_factory or checkpoint_dir or explicit_id or query_options):
        raise click.UsageError(
            "--work-dir names a flights run; it does not go with --sinks, -o, --checkpoint-dir or --job"
        )
    if sinks_factory is not None and query_options:
        raise click.UsageError("give --sinks or -o options, not both")
    if sinks_factory is not None:
        return _from_factory(sinks_factory, checkpoint_dir, explicit_id)
    if query_options:
        return _from_query_options(query_options, checkpoint_dir, explicit_id)
    if checkpoint_dir is not None or explicit_id is not None:
        if checkpoint_dir is None or explicit_id is None:
            raise click.UsageError("--checkpoint-dir and --job/--job-id go together")
        return JobTarget(explicit_id, checkpoint_dir, f"--checkpoint-dir {checkpoint_dir}")
    if not flights_runs_here():
        raise click.UsageError(
            "which job? Give --checkpoint-dir DIR with --job NAME (or --job-id ID), the query's "
            "options (-o sink=... -o job=... -o twophaseCheckpointDir=...), or --sinks module:function"
        )
    target: JobTarget = importlib.import_module(FLIGHTS_RUNS).flights_run_target(work_dir)
    return target


def load_factory(spec: str) -> Callable[[], Any]:
    """The function ``module:function`` names (``function`` may be dotted: ``module:obj.method``).

    The current directory is importable, as with ``python -m``.

    Raises:
        click.BadParameter: not of the form ``module:function``.
        ConfigError: the module cannot be imported, or the name is missing or not callable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"{spec!r} is not module:function", param_hint="--sinks")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"--sinks {spec}: cannot import {module_name!r}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"--sinks {spec}: {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"--sinks {spec}: {attr!r} is not callable")
    factory: Callable[[], Any] = obj
    return factory


def _call(factory: Callable[[], Any], spec: str) -> Any:
    try:
        return factory()
    except TwoPhaseError:
        raise
    except Exception as e:
        raise ConfigError(f"--sinks {spec}: the factory raised {type(e).__name__}: {e}") from e


def _from_factory(spec: str, checkpoint_dir: str | None, explicit_id: str | None) -> JobTarget:
    from twophase import Job

    factory = load_factory(spec)
    produced = _call(factory, spec)
    origin = f"--sinks {spec}"
    if isinstance(produced, Job):
        if explicit_id is not None and explicit_id != produced.job_id:
            raise click.UsageError(
                f"the job id {explicit_id!r} contradicts the job's {produced.job_id!r} ({origin})"
            )
        if checkpoint_dir is not None and checkpoint_dir != produced.checkpoint_dir:
            raise click.UsageError(
                f"--checkpoint-dir {checkpoint_dir} contradicts the job's "
                f"{produced.checkpoint_dir} ({origin})"
            )
        job_sinks = list(produced.sinks)
        return JobTarget(produced.job_id, produced.checkpoint_dir, origin, lambda: job_sinks)
    if not isinstance(produced, list | tuple) or not all(isinstance(s, TwoPhaseCommitSink) for s in produced):
        raise ConfigError(
            f"{origin}: expected a list of TwoPhaseCommitSink or a twophase.Job, "
            f"got {type(produced).__name__}"
        )
    if checkpoint_dir is None or explicit_id is None:
        raise click.UsageError(f"{origin} returned sinks only: pass --checkpoint-dir and --job/--job-id too")
    sinks = list(produced)
    return JobTarget(explicit_id, checkpoint_dir, origin, lambda: sinks)


def _from_query_options(
    pairs: tuple[str, ...], checkpoint_dir: str | None, explicit_id: str | None
) -> JobTarget:
    from twophase.coordinator.spark.facade_options import (
        OPTION_CHECKPOINT_DIR,
        OPTION_JOB_ID,
        FacadeSettings,
        lower_keys,
    )
    from twophase.coordinator.spark.option_sinks import OPTION_SINK, sink_from_options

    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="-o/--option")
        options[key.strip()] = value
    options = lower_keys(options)
    for key, given in ((OPTION_CHECKPOINT_DIR, checkpoint_dir), (OPTION_JOB_ID, explicit_id)):
        if given is not None and options.get(key, given) != given:
            raise click.UsageError(f"-o {key}={options[key]} contradicts the command's own option {given!r}")
        if given is not None:
            options[key] = given
    settings = FacadeSettings.from_options(options)
    origin = "-o options" + (f" (sink {options[OPTION_SINK]})" if OPTION_SINK in options else "")
    load = (lambda: [sink_from_options(options)]) if OPTION_SINK in options else None
    return JobTarget(settings.job_id, settings.checkpoint_dir, origin, load, settings.s3)
