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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twophase.sinks.errors import ConfigError

if TYPE_CHECKING:
    from twophase.integration.jobs.flights import FlightsEndpoints
    from twophase.integration.jobs.flights_spec import FlightsJobSpec
    from twophase.integration.verify import Expected, SinkReport
    from twophase.sinks.api import TwoPhaseCommitSink

BASE_SINKS = ("kafka", "s3", "delta")
"""The sinks whose services every run has (Kafka and S3), in the order they are attached."""


@dataclass(frozen=True)
class OptionalSink:
    """An optional sink of the flights job and its service.

    Attributes:
        name: the sink's name in the job and in ``--sinks``.
        service_name: the service, for messages (``PostgreSQL``).
        how_to_run: how a user gets the service running for ``verify`` (one sentence).
        service: a context manager yielding the service's endpoint: the given or running one, else
            one started for the block (the demo's).
        running: the given or running service's endpoint, or ``None`` (nothing is started).
        prepare: ``prepare(spec, endpoint)`` readies the service for the run (idempotent: a resumed
            run calls it again). Raises ``ServiceUnavailableError``.
        build: ``build(spec, endpoint)`` the sink (driver side; nothing contacted).
        verify: ``verify(spec, endpoint, expected)`` reads the sink back (never raises: errors go
            into the report).
        bind: ``bind(endpoint, endpoints)``: the endpoint completed with the run's other services
            (``endpoints``: S3, the other optional sinks' in :attr:`FlightsEndpoints.extra`) before
            ``prepare``, ``build`` and ``verify`` see it (never raises); ``None``: the endpoint as
            found. Iceberg's table lives on the run's S3, its catalog on the run's PostgreSQL
            when the run has one.
    """

    name: str
    service_name: str
    how_to_run: str
    service: Callable[[], contextlib.AbstractContextManager[Any]]
    running: Callable[[], Any | None]
    prepare: Callable[[FlightsJobSpec, Any], None]
    build: Callable[[FlightsJobSpec, Any], TwoPhaseCommitSink[Any, Any]]
    verify: Callable[[FlightsJobSpec, Any, Expected], SinkReport]
    bind: Callable[[Any, FlightsEndpoints], Any] | None = None

    def bound(self, endpoints: FlightsEndpoints) -> Any:
        """This sink's endpoint in ``endpoints.extra``, bound to the run's other services.

        Raises:
            ConfigError: ``endpoints.extra`` has no endpoint for this sink (names how to run it).
        """
        if self.name not in endpoints.extra:
            raise ConfigError(f"sink {self.name!r} needs {self.service_name}: {self.how_to_run}")
        endpoint = endpoints.extra[self.name]
        return endpoint if self.bind is None else self.bind(endpoint, endpoints)


def _postgres() -> OptionalSink:
    from twophase.integration.jobs.flights_postgres import POSTGRES

    return POSTGRES


def _iceberg() -> OptionalSink:
    from twophase.integration.jobs.flights_iceberg import ICEBERG

    return ICEBERG


OPTIONAL_SINKS: dict[str, Callable[[], OptionalSink]] = {"postgres": _postgres, "iceberg": _iceberg}
"""Sink name → loader of its :class:`OptionalSink` (imported only when a run uses it)."""

SINK_CHOICES = (*BASE_SINKS, *OPTIONAL_SINKS)
"""Every name ``--sinks`` accepts."""


def check_sinks(sinks: Iterable[str]) -> tuple[str, ...]:
    """``sinks`` as a tuple in :data:`SINK_CHOICES` order, each once.

    Raises:
        ConfigError: an unknown name, or none at all.
    """
    names = [s.strip() for s in sinks if s.strip()]
    unknown = [s for s in names if s not in SINK_CHOICES]
    if unknown:
        raise ConfigError(f"unknown sink(s) {unknown}: choose from {','.join(SINK_CHOICES)}")
    if not names:
        raise ConfigError(f"no sink given: choose from {','.join(SINK_CHOICES)}")
    return tuple(s for s in SINK_CHOICES if s in names)


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
    from twophase.integration.jobs.flights import build_sinks

    base = [s for s in build_sinks(spec, endpoints) if s.name in spec.sinks]
    return base + [sink.build(spec, sink.bound(endpoints)) for sink in optional_sinks(spec)]


def verify_optional_sinks(
    spec: FlightsJobSpec, endpoints: FlightsEndpoints, expected: Expected
) -> list[SinkReport]:
    """Read each optional sink of the run back (a missing endpoint is reported, not raised)."""
    from twophase.integration.verify import SinkReport

    reports = []
    for sink in optional_sinks(spec):
        if sink.name not in endpoints.extra:
            reports.append(SinkReport(sink.name, "", error=f"no {sink.service_name}: {sink.how_to_run}"))
        else:
            reports.append(sink.verify(spec, sink.bound(endpoints), expected))
    return reports
