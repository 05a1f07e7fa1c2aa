"""Where the flights job's services are: Kafka, S3 and the optional sinks' own (a
:class:`FlightsEndpoints`), and how a job process is told about secured Kafka."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from twophase.integration.services import S3Endpoint
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
    """

    kafka_bootstrap: str
    s3: S3Endpoint
    keys_from_environment: bool = False
    kafka_security: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    ca_bundle: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def storage_options(self) -> S3Options:
        """S3 settings of the sinks and checkpoints: the endpoint with its keys, or, with
        :attr:`keys_from_environment`, the endpoint and region only."""
        if self.keys_from_environment:
            return S3Options(endpoint_url=self.s3.endpoint_url, region=self.s3.region)
        return self.s3.s3_options()
