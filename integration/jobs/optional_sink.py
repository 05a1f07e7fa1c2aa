"""An optional sink of the flights job (PostgreSQL, Iceberg): how to find or start its service,
prepare it for a run, build the sink and read it back (:class:`OptionalSink`). The registry of
them is :data:`~twophase.integration.jobs.flights_sinks.OPTIONAL_SINKS`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twophase.sinks.errors import ConfigError

if TYPE_CHECKING:
    from twophase.integration.jobs.flights_endpoints import FlightsEndpoints
    from twophase.integration.jobs.flights_spec import FlightsJobSpec
    from twophase.integration.verify import Expected, SinkReport
    from twophase.sinks.api import TwoPhaseCommitSink


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
