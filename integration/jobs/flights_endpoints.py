"""Where the flights job's services are: Kafka, S3 and the optional sinks' own (a
:class:`FlightsEndpoints`), and how a job process is told about secured Kafka."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from twophase.coordinator.storage.azure_blob import AzureStorageOptions
from twophase.coordinator.storage.gcs import GcsStorageOptions
from twophase.integration.services import S3Endpoint
from twophase.integration.services.azurite import AzureBlobEndpoint
from twophase.integration.services.gcs_server import PROJECT, GcsEndpoint
from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options

KAFKA_SECURITY_ENV = "TWOPHASE_KAFKA_SECURITY"
"""librdkafka security settings of the job's Kafka clients as a JSON object (``security.protocol``,
``sasl.*``, ``ssl.ca.location``): holds a password, so only ever in a job process's environment."""


@dataclass(frozen=True)
class FlightsEndpoints:
    """Where the services are.

    Attributes:
        kafka_bootstrap: ``host:port[,host:port]``.
        s3: the S3 endpoint and credentials (MinIO).
        keys_from_environment: the sinks and checkpoints get the endpoint only, and every process
            takes the keys from its own AWS chain (the driver's environment, the executors'
            ``spark.executorEnv.AWS_*``): no key is pickled into a task. For a cluster.
        kafka_security: librdkafka settings that log the Kafka clients in (``security.protocol``,
            ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``); empty
            for a PLAINTEXT broker. Holds a password: left out of ``repr``.
        ca_bundle: the PEM file of the CAs that sign the S3 endpoint's certificate
            (``AWS_CA_BUNDLE`` of every process), or ``""``.
        extra: optional sink name → its service's endpoint (``postgres``: a ``PostgresEndpoint``;
            :mod:`twophase.integration.jobs.flights_sinks`). May hold passwords: left out of ``repr``.
        azure: the Azure Blob service and account of ``--store azure`` runs (Azurite), or None;
            its key is never in ``repr``.
        gcs: the GCS emulator of ``--store gcs`` runs (fake-gcs-server, reached without
            credentials), or None.
    """

    kafka_bootstrap: str
    s3: S3Endpoint
    keys_from_environment: bool = False
    kafka_security: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    ca_bundle: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    azure: AzureBlobEndpoint | None = None
    gcs: GcsEndpoint | None = None

    def azure_options(self) -> AzureStorageOptions:
        """How the sinks and checkpoints of a ``--store azure`` run reach the account: its
        connection string (account key and Blob endpoint). Holds the key; its ``repr`` does not.

        Raises:
            ConfigError: no Azure endpoint (no ``TWOPHASE_AZURE_CONNECTION_STRING`` and no
                ``services up --azure``).
        """
        if self.azure is None:
            raise ConfigError(
                "a --store azure run needs Azurite: run `twophase services up --azure` or set "
                "TWOPHASE_AZURE_CONNECTION_STRING"
            )
        return AzureStorageOptions(connection_string=self.azure.connection_string())

    def gcs_options(self) -> GcsStorageOptions:
        """How the GCS file sink and the checkpoints of a ``--store gcs`` run reach the emulator:
        its URL and a project id (no credentials are sent to an emulator).

        Raises:
            ConfigError: no GCS endpoint (no ``TWOPHASE_GCS_ENDPOINT`` and no ``services up --gcs``).
        """
        if self.gcs is None:
            raise ConfigError(
                "a --store gcs run needs fake-gcs-server: run `twophase services up --gcs` or set "
                "TWOPHASE_GCS_ENDPOINT"
            )
        return GcsStorageOptions(project=PROJECT, emulator_host=self.gcs.url)

    def store_options(self, store: str) -> S3Options | AzureStorageOptions | GcsStorageOptions:
        """The checkpoint storage's and the file sink's options on ``store`` (``s3``: as
        :meth:`storage_options`; ``azure``: :meth:`azure_options`; ``gcs``: :meth:`gcs_options`).

        Raises:
            ConfigError: as :meth:`azure_options` or :meth:`gcs_options`.
        """
        if store == "azure":
            return self.azure_options()
        return self.gcs_options() if store == "gcs" else self.storage_options()

    def delta_options(self, table_uri: str) -> S3Options | AzureStorageOptions:
        """The Delta table's options, by where it is: on ``abfss://`` :meth:`azure_options`, else
        (a local path, ``s3://``) :meth:`storage_options`. A ``--store gcs`` run keeps its table
        off ``gs://`` (:data:`~twophase.integration.jobs.flights_spec.GCS_DELTA_REFUSED`).

        Raises:
            ConfigError: as :meth:`azure_options`.
        """
        return self.azure_options() if table_uri.startswith("abfss://") else self.storage_options()

    def storage_options(self) -> S3Options:
        """S3 settings of the sinks and checkpoints: the endpoint with its keys, or, with
        :attr:`keys_from_environment`, the endpoint and region only."""
        if self.keys_from_environment:
            return S3Options(endpoint_url=self.s3.endpoint_url, region=self.s3.region)
        return self.s3.s3_options()
