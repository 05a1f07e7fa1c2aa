"""The flights job against secured services (#27 items 2 and 7): SCRAM-SHA-512 over TLS Kafka with
ACLs, MinIO over TLS, least-privilege credentials for the job, other credentials for the reader.

:func:`secured_flights` starts a native SASL_SSL broker
(:mod:`twophase.integration.services.secured_kafka`) and a native MinIO over TLS
(:mod:`twophase.integration.services.s3_tls`) in a folder of the caller's (keys and data go with
it), and points ``AWS_CA_BUNDLE`` of this process at MinIO's CA while they run. For each run,
:meth:`SecuredFlights.prepare` sets the job up the way ``docs/secured-kafka.md`` and
``docs/secured-s3.md`` say an operator would:

- the topic is created by ``admin`` (the sink's principal may not create topics);
- the sink's principal ``flights_sink`` (SCRAM-SHA-512) gets Write and Describe on the topic and on
  the transactional ids ``twophase-<job id>-*``, nothing else;
- a fresh IAM user gets the least-privilege policy on the run's S3 prefixes only (S3 sink output,
  Delta table, twophase's ``s3://`` checkpoints) in :data:`BUCKET`, created beforehand by root;
- the reader's principal ``flights_reader`` gets Read on the topic and on the read-back consumer
  groups, nothing else.

The job writes with :meth:`SecuredFlights.prepare`'s endpoints; :meth:`SecuredFlights.reader` reads
back (the reader's Kafka principal, the S3 root keys over TLS) and :meth:`SecuredFlights.admin`
lists lingering state (``admin`` sees every transaction; the root keys every upload).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from confluent_kafka.admin._acl import AclOperation
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from twophase.connectors.kafka.internal.naming import default_prefix
from twophase.integration.jobs.flights import FlightsEndpoints
from twophase.integration.jobs.flights_spec import FlightsJobSpec
from twophase.integration.readback import GROUP_PREFIX
from twophase.integration.services import S3Endpoint
from twophase.integration.services.s3_tls import TlsMinioServer, least_privilege_policy
from twophase.integration.services.secured_kafka import SecuredKafka, start_secured_kafka
from twophase.sinks.errors import ConfigError

SINK_USER = "flights_sink"
"""The Kafka sink's principal (SCRAM-SHA-512): the documented ACLs on each run's topic and ids."""
READER_USER = "flights_reader"
"""The read-back principal (SCRAM-SHA-512): Read on each run's topic and the read-back groups."""
BUCKET = FlightsJobSpec.bucket
"""The runs' bucket on the TLS MinIO, created by root (the job's keys may not create buckets)."""


@dataclass(repr=False)
class SecuredFlights:
    """Running secured services for flights runs (see the module docstring); no secret in ``repr``.

    Attributes:
        kafka: the SASL_SSL broker with ACLs.
        minio: MinIO over TLS (root keys in ``minio.endpoint``).
        users: job id → the endpoint signing with the IAM user :meth:`prepare` made for it.
    """

    kafka: SecuredKafka
    minio: TlsMinioServer
    users: dict[str, S3Endpoint] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"SecuredFlights(kafka={self.kafka.bootstrap!r}, s3={self.minio.endpoint.endpoint_url!r})"

    @property
    def ca_bundle(self) -> str:
        """The PEM file of MinIO's CA (``AWS_CA_BUNDLE``)."""
        return str(self.minio.certificates.ca_bundle)

    def prepare(self, spec: FlightsJobSpec) -> FlightsEndpoints:
        """Create ``spec``'s topic, grant the sink's and the reader's ACLs on it and the job's
        transactional ids, and make an IAM user with the least-privilege policy on the run's S3
        prefixes. Idempotent per job id.

        Returns:
            The endpoints the job writes with: ``flights_sink`` over SCRAM-SHA-512/TLS and the
            IAM user's keys over TLS.

        Raises:
            ConfigError: a location of ``spec`` outside :data:`BUCKET`.
            KafkaException: the broker refused a set-up call.
        """
        prefixes = [spec.s3_prefix, *(_key_prefix(u) for u in (spec.delta_uri, spec.checkpoint_uri))]
        if spec.bucket != BUCKET:
            raise ConfigError(f"secured flights runs live in bucket {BUCKET!r}, not {spec.bucket!r}")
        job_s3 = self.users.get(spec.job_id)
        if job_s3 is None:
            self.kafka.create_topic(spec.topic, spec.kafka_partitions)
            self.kafka.grant_sink(SINK_USER, spec.topic, f"{default_prefix(spec.job_id)}-")
            self.kafka.grant(
                READER_USER,
                [
                    (ResourceType.TOPIC, spec.topic, ResourcePatternType.LITERAL, AclOperation.READ),
                    (ResourceType.GROUP, GROUP_PREFIX, ResourcePatternType.PREFIXED, AclOperation.READ),
                ],
            )
            policy = least_privilege_policy(BUCKET, prefixes)
            job_s3 = self.minio.add_user_with_policy(
                f"job-{uuid.uuid4().hex[:12]}", secrets.token_urlsafe(24), policy
            )
            self.users[spec.job_id] = job_s3
        return FlightsEndpoints(
            self.kafka.bootstrap,
            job_s3,
            kafka_security=self.kafka.client_config(SINK_USER),
            ca_bundle=self.ca_bundle,
        )

    def reader(self) -> FlightsEndpoints:
        """The read-back endpoints: ``flights_reader`` (Read only) and the S3 root keys, over TLS."""
        return FlightsEndpoints(
            self.kafka.bootstrap,
            self.minio.endpoint,
            kafka_security=self.kafka.client_config(READER_USER),
            ca_bundle=self.ca_bundle,
        )

    def admin(self) -> FlightsEndpoints:
        """The endpoints that list lingering state: Kafka's super user ``admin`` (ListTransactions
        shows every id) and the S3 root keys, over TLS."""
        return FlightsEndpoints(
            self.kafka.bootstrap,
            self.minio.endpoint,
            kafka_security=self.kafka.client_config("admin", "PLAIN"),
            ca_bundle=self.ca_bundle,
        )


def _key_prefix(uri: str) -> str:
    """The key prefix of an ``s3://`` location of :data:`BUCKET`.

    Raises:
        ConfigError: a local path or another bucket (the job's keys reach :data:`BUCKET` only).
    """
    parts = urlsplit(uri)
    if parts.scheme != "s3" or parts.netloc != BUCKET:
        raise ConfigError(f"secured flights runs keep their state in s3://{BUCKET}/, not at {uri!r}")
    return parts.path.strip("/")


@contextlib.contextmanager
def secured_flights(folder: Path) -> Iterator[SecuredFlights]:
    """Start the secured broker and MinIO over TLS in ``folder`` (created; removed at the end with
    the keys and data), make :data:`BUCKET`, and set this process's ``AWS_CA_BUNDLE`` to MinIO's
    CA while they run (restored at the end).

    Raises:
        ServiceUnavailableError: a service did not start in time.
    """
    from twophase.integration.services.launcher import start_timeout_s

    folder = folder.resolve()  # the broker and MinIO run in folders of their own
    folder.mkdir(parents=True, exist_ok=True)
    before = os.environ.get("AWS_CA_BUNDLE")
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        kafka = start_secured_kafka((SINK_USER, READER_USER), data_dir=folder / "kafka")
        stack.callback(kafka.stop)
        minio = TlsMinioServer(folder / "minio", start_timeout_s())
        stack.callback(minio.stop)
        minio.start()
        os.environ["AWS_CA_BUNDLE"] = str(minio.certificates.ca_bundle)
        stack.callback(_restore_env, "AWS_CA_BUNDLE", before)
        minio.endpoint.ensure_bucket(BUCKET)
        yield SecuredFlights(kafka, minio)


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
