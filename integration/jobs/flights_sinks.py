"""Which sinks a flights run writes to: Kafka, S3 and Delta always offered, plus optional ones.

``twophase demo --sinks kafka,s3,delta,postgres`` writes every record to each sink named and
``twophase verify`` reads each back. The run's manifest keeps the list
(:attr:`~twophase.integration.jobs.flights_spec.FlightsJobSpec.sinks`).

An optional sink needs a service of its own; it is one entry of :data:`OPTIONAL_SINKS`, a loader
of an :class:`OptionalSink`, which says how to find or start the service, prepare it for a run
(e.g. create a table), build the sink and read it back. Adding one is a module with those five
functions and one entry here: PostgreSQL (:mod:`~twophase.integration.jobs.flights_postgres`) and
Apache Iceberg (:mod:`~twophase.integration.jobs.flights_iceberg`, whose endpoint is bound to the
run's S3 and PostgreSQL: :attr:`OptionalSink.bind`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from twophase.integration.jobs.flights_base_sinks import DELTA_SINK, KAFKA_SINK
from twophase.integration.jobs.flights_spec import BASE_SINKS as BASE_SINKS
from twophase.integration.jobs.flights_spec import SINK_CHOICES as SINK_CHOICES
from twophase.integration.jobs.flights_spec import FlightsJobSpec
from twophase.integration.jobs.flights_spec import check_sinks as check_sinks
from twophase.integration.jobs.optional_sink import OptionalSink as OptionalSink
from twophase.integration.verify import (
    Expected,
    SinkReport,
    VerifyReport,
    checkpoint_state,
    expected_input,
    verify_delta,
    verify_kafka,
    verify_s3,
)
from twophase.sinks.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from twophase.integration.jobs.flights_endpoints import FlightsEndpoints
    from twophase.sinks.api import TwoPhaseCommitSink


def _postgres() -> OptionalSink:
    from twophase.integration.jobs.flights_postgres import POSTGRES

    return POSTGRES


def _iceberg() -> OptionalSink:
    from twophase.integration.jobs.flights_iceberg import ICEBERG

    return ICEBERG


OPTIONAL_SINKS: dict[str, Callable[[], OptionalSink]] = {"postgres": _postgres, "iceberg": _iceberg}
"""Sink name → loader of its :class:`OptionalSink` (imported only when a run uses it)."""


def optional_sinks(spec: FlightsJobSpec) -> list[OptionalSink]:
    """The run's optional sinks, in :data:`SINK_CHOICES` order."""
    return [OPTIONAL_SINKS[name]() for name in spec.sinks if name in OPTIONAL_SINKS]


def enter_services(stack: contextlib.ExitStack, spec: FlightsJobSpec) -> dict[str, Any]:
    """Find or start the services of the run's optional sinks for the rest of ``stack``.

    Returns:
        Sink name → its service's endpoint (:attr:`FlightsEndpoints.extra`).
    """
    return {sink.name: stack.enter_context(sink.service()) for sink in optional_sinks(spec)}


def running_services(spec: FlightsJobSpec) -> dict[str, Any]:
    """The running services of the run's optional sinks (for ``verify``: nothing is started).

    Raises:
        ConfigError: one is not running (names how to run it).
    """
    found: dict[str, Any] = {}
    for sink in optional_sinks(spec):
        endpoint = sink.running()
        if endpoint is None:
            raise ConfigError(f"no running {sink.service_name} for sink {sink.name!r}: {sink.how_to_run}")
        found[sink.name] = endpoint
    return found


def with_services(endpoints: FlightsEndpoints, services: dict[str, Any]) -> FlightsEndpoints:
    """``endpoints`` with ``services`` as :attr:`FlightsEndpoints.extra`."""
    return dataclasses.replace(endpoints, extra={**endpoints.extra, **services})


def run_sinks(
    spec: FlightsJobSpec, endpoints: FlightsEndpoints, base: Sequence[TwoPhaseCommitSink[Any, Any]]
) -> list[TwoPhaseCommitSink[Any, Any]]:
    """The sinks the run writes to: those of ``base`` (Kafka, S3, Delta) it names, then its
    optional sinks (:func:`build_optional_sinks`: their services are prepared for the run).

    Raises:
        ConfigError, ServiceUnavailableError: as :func:`build_optional_sinks`.
    """
    return [s for s in base if s.name in spec.sinks] + build_optional_sinks(spec, endpoints)


def build_optional_sinks(
    spec: FlightsJobSpec, endpoints: FlightsEndpoints
) -> list[TwoPhaseCommitSink[Any, Any]]:
    """Prepare each optional sink's service for the run and build the sink.

    Raises:
        ConfigError: a service's endpoint is missing from ``endpoints.extra``.
        ServiceUnavailableError: a service cannot be prepared.
    """
    built: list[TwoPhaseCommitSink[Any, Any]] = []
    for sink in optional_sinks(spec):
        endpoint = sink.bound(endpoints)
        sink.prepare(spec, endpoint)
        built.append(sink.build(spec, endpoint))
    return built


def operator_sinks(spec: FlightsJobSpec, endpoints: FlightsEndpoints) -> list[TwoPhaseCommitSink[Any, Any]]:
    """Every sink of the run as the job configures it, for operator commands (``twophase
    lingering``): the base sinks the run names, then its optional sinks, built without preparing
    their services (nothing is created).

    Raises:
        ConfigError: an optional sink's service is missing from ``endpoints.extra``.
    """
    from twophase.integration.jobs.flights_base_sinks import build_sinks

    base = [s for s in build_sinks(spec, endpoints) if s.name in spec.sinks]
    return base + [sink.build(spec, sink.bound(endpoints)) for sink in optional_sinks(spec)]


def verify_optional_sinks(
    spec: FlightsJobSpec, endpoints: FlightsEndpoints, expected: Expected
) -> list[SinkReport]:
    """Read each optional sink of the run back (a missing endpoint is reported, not raised)."""
    reports = []
    for sink in optional_sinks(spec):
        if sink.name not in endpoints.extra:
            reports.append(SinkReport(sink.name, "", error=f"no {sink.service_name}: {sink.how_to_run}"))
        else:
            reports.append(sink.verify(spec, sink.bound(endpoints), expected))
    return reports


def verify_run(
    spec: FlightsJobSpec,
    endpoints: FlightsEndpoints,
    spark: SparkSession | None = None,
    sinks: Sequence[str] | None = None,
    admin: FlightsEndpoints | None = None,
) -> VerifyReport:
    """Verify every sink of a flights run against its input (:mod:`twophase.integration.verify` says how).

    Args:
        spec: the run.
        endpoints: the services it wrote to, with the reader's credentials.
        spark: a session with Delta to read the table with delta-spark; ``None``: deltalake.
        sinks: the sinks to check (default: every sink of the run, ``spec.sinks``); an optional
            sink (PostgreSQL…) is read with its endpoint in ``endpoints.extra``
            (:func:`verify_optional_sinks`).
        admin: the credentials that list lingering state (default ``endpoints``): against a
            secured Kafka a principal that may describe every transactional id of the job.

    Returns:
        The report; read failures are reported per sink (``error``), never raised.
    """
    sinks = spec.sinks if sinks is None else sinks
    expected = expected_input(spec)
    reports: list[SinkReport] = []
    if KAFKA_SINK in sinks:
        reports.append(verify_kafka(spec, endpoints, expected, admin))
    if spec.file_sink in sinks:
        reports.append(verify_s3(spec, endpoints, expected, admin, spark))
    if DELTA_SINK in sinks:
        reports.append(verify_delta(spec, endpoints, expected, spark, admin))
    reports += [r for r in verify_optional_sinks(spec, endpoints, expected) if r.sink in sinks]
    ok, detail = checkpoint_state(spec, endpoints)
    return VerifyReport(spec.job_id, expected.rows, tuple(reports), ok, detail)
