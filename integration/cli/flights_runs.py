"""The flights demo's runs as the operator commands' default job (development tooling).

``twophase demo`` records its work directory under ``<cache>/flights-runs``; in a checkout,
``twophase checkpoints`` and ``twophase lingering`` given no job act on the latest run, or on the
one ``--work-dir`` names. :mod:`twophase.integration.cli.target` reaches this module by name, only
when no job was given and only where it exists: the wheel users install does not hold it.
"""

from __future__ import annotations

from pathlib import Path

import click

from twophase.coordinator.storage import AzureStorageOptions, GcsStorageOptions
from twophase.integration.cli.target import AnySink, JobTarget
from twophase.sinks.errors import ConfigError


def runs_dir() -> Path:
    """Where demo runs live: ``<cache>/flights-runs``."""
    from twophase.integration.services import cache_dir

    return cache_dir() / "flights-runs"


def latest_pointer() -> Path:
    """The file naming the latest demo run's work directory."""
    return runs_dir() / "LATEST"


def resolve_work_dir(work_dir: Path | None) -> Path:
    """``work_dir``, or the latest demo run's.

    Raises:
        ConfigError: no ``work_dir`` and no demo has run yet.
    """
    if work_dir is not None:
        return work_dir
    pointer = latest_pointer()
    if not pointer.is_file():
        raise ConfigError("no flights run yet: run `twophase demo` or pass --work-dir")
    return Path(pointer.read_text().strip())


work_dir_option = click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The flights run's work directory (default: the latest demo run).",
)


def flights_run_target(work_dir: Path | None) -> JobTarget:
    """The flights run in ``work_dir`` (default: the latest) as the job a command acts on, with
    every sink the run names, optional ones (PostgreSQL, Iceberg) included. A ``--store azure`` or
    ``--store gcs`` run's checkpoints are read with the emulator the demo uses
    (:func:`run_store_options`).

    Raises:
        ConfigError: no such run, no demo has run yet, or a ``--store azure|gcs`` run and no
            emulator of that store.
    """
    from twophase.integration.jobs.flights import FlightsJobSpec

    spec = FlightsJobSpec.load(resolve_work_dir(work_dir))
    options = run_store_options(spec.store, spec.checkpoint_dir)

    def sinks() -> list[AnySink]:
        from twophase.integration.jobs.flights import endpoints_from_environment
        from twophase.integration.jobs.flights_sinks import operator_sinks, running_services, with_services

        return operator_sinks(spec, with_services(endpoints_from_environment(), running_services(spec)))

    return JobTarget(
        spec.job_id,
        spec.checkpoint_dir,
        f"flights run {spec.work_dir}",
        sinks,
        azure=options if isinstance(options, AzureStorageOptions) else None,
        gcs=options if isinstance(options, GcsStorageOptions) else None,
    )


def run_store_options(store: str, checkpoint_dir: str) -> AzureStorageOptions | GcsStorageOptions | None:
    """How a flights run on ``store`` reaches its checkpoints: on ``azure`` the connection string of
    ``TWOPHASE_AZURE_CONNECTION_STRING``, else of ``services up --azure``'s Azurite; on ``gcs`` the
    emulator of ``TWOPHASE_GCS_ENDPOINT``, else of ``services up --gcs`` (as the demo); None on
    ``s3``. The Azure options hold the account key; their ``repr`` does not.

    Raises:
        ConfigError: a ``--store azure|gcs`` run and no emulator of that store (nothing is read).
    """
    if store == "s3":
        return None
    from twophase.integration.jobs.flights_stores import SERVICES, running_store
    from twophase.integration.services.gcs_server import PROJECT

    endpoint = running_store(store)
    if endpoint is None:
        raise ConfigError(
            f"the run's checkpoints are on {checkpoint_dir}: run `twophase services up --{store}` "
            f"or set {SERVICES[store].env_var}"
        )
    if store == "gcs":
        return GcsStorageOptions(project=PROJECT, emulator_host=endpoint.url)
    return AzureStorageOptions(connection_string=endpoint.connection_string())
