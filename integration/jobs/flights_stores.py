"""What the flights job's other stores (``--store azure``, ``--store gcs``; issue #46) share: their
emulators as services, and Spark sessions that read them back with Hadoop's own file systems.

Each store has a native emulator (:class:`~twophase.integration.services.native_service.NativeService`:
Azurite, fake-gcs-server), found like Kafka and S3: an endpoint given in the environment, else
the one ``twophase services up --azure``/``--gcs`` records, else (the demo, the chaos runner) a
temporary one. Spark reads a store back through a Hadoop connector whose jars are resolved with
Maven once per POM (:mod:`~twophase.integration.jobs.connector_jars`) and configured in the
running session's Hadoop configuration only (:func:`configure_readers`): hadoop-azure
(:mod:`~twophase.integration.jobs.flights_azure`), Google's GCS connector
(:mod:`~twophase.integration.jobs.flights_gcs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from twophase.integration.jobs.flights_endpoints import FlightsEndpoints
from twophase.integration.services.azurite import AZURITE, CONNECTION_STRING_ENV
from twophase.integration.services.gcs_server import ENDPOINT_ENV, GCS
from twophase.integration.services.state import recorded_alive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from twophase.integration.services.native_service import NativeService

SERVICES: Mapping[str, NativeService[Any]] = {"azure": AZURITE, "gcs": GCS}
"""The emulator of each store but S3 (MinIO, which every run has), by store name."""


def service_name(store: str) -> str:
    """The emulator's name in messages (``Azurite``, ``fake-gcs-server``)."""
    return SERVICES[store].what


def running_store(store: str) -> Any | None:
    """The endpoint of ``store``'s emulator given in the environment, else of ``twophase services
    up``'s, else None (nothing is started: runs on that store then refuse, saying so).

    Raises:
        ConfigError: the environment's endpoint is malformed.
    """
    service = SERVICES[store]
    given = service.given()
    if given is not None:
        return given
    entry = recorded_alive(service.name)
    return service.recorded(entry) if entry is not None else None


def store_service(store: str) -> AbstractContextManager[Any]:
    """``store``'s emulator for a block: given, recorded, or a temporary one stopped on exit.

    Raises:
        ConfigError, ServiceUnavailableError: it cannot be reached or started.
    """
    return SERVICES[store].service()


def with_store(endpoints: FlightsEndpoints, store: str, endpoint: Any) -> FlightsEndpoints:
    """``endpoints`` with ``endpoint`` as ``store``'s (``azure``/``gcs``); ``s3`` leaves them."""
    return dataclasses.replace(endpoints, **{store: endpoint}) if store in SERVICES else endpoints


def running_stores(endpoints: FlightsEndpoints) -> FlightsEndpoints:
    """``endpoints`` with every store's running emulator (:func:`running_store`) it lacks."""
    for store in SERVICES:
        if getattr(endpoints, store) is None:
            endpoints = with_store(endpoints, store, running_store(store))
    return endpoints


def store_env(endpoints: FlightsEndpoints) -> dict[str, str]:
    """The variables that give a job process the stores' emulators of ``endpoints``
    (``TWOPHASE_AZURE_CONNECTION_STRING``, ``TWOPHASE_GCS_ENDPOINT``). Holds the Azure key: only
    ever in a child process's environment."""
    env = {}
    if endpoints.azure is not None:
        env[CONNECTION_STRING_ENV] = endpoints.azure.connection_string()
    if endpoints.gcs is not None:
        env[ENDPOINT_ENV] = endpoints.gcs.url
    return env


def reader_jars(endpoints: FlightsEndpoints) -> list[str]:
    """The Hadoop connectors' jars of the stores ``endpoints`` has (hadoop-azure, the GCS connector).

    Raises:
        ServiceUnavailableError: as :func:`~twophase.integration.jobs.connector_jars.extra_jars`.
        UnsupportedSparkError: pyspark ships no Hadoop client jar.
    """
    jars = []
    if endpoints.azure is not None:
        from twophase.integration.jobs.flights_azure import hadoop_azure_jars

        jars += hadoop_azure_jars()
    if endpoints.gcs is not None:
        from twophase.integration.jobs.flights_gcs import gcs_connector_jars

        jars += gcs_connector_jars()
    return jars


def configure_readers(spark: SparkSession, endpoints: FlightsEndpoints) -> None:
    """Point ``spark``'s Hadoop connectors at the stores ``endpoints`` has (the running session's
    Hadoop configuration only: the Azure key never enters the Spark configuration)."""
    if endpoints.azure is not None:
        from twophase.integration.jobs.flights_azure import configure_abfs

        configure_abfs(spark, endpoints.azure)
    if endpoints.gcs is not None:
        from twophase.integration.jobs.flights_gcs import configure_gcs

        configure_gcs(spark, endpoints.gcs)


def spark_location(uri: str, endpoints: FlightsEndpoints) -> str:
    """``uri`` as Spark reads it (an ``abfss://`` location of an emulator over HTTP as ``abfs://``,
    :func:`~twophase.integration.jobs.flights_azure.spark_location`); others unchanged."""
    if endpoints.azure is not None:
        from twophase.integration.jobs.flights_azure import spark_location as abfs_location

        return abfs_location(uri, endpoints.azure)
    return uri
