"""A native single-node KRaft broker with a SASL_SSL listener and ACLs, for the secured-Kafka tests.

Like :mod:`twophase.integration.services.kafka` it runs ``kafka.Kafka`` from the cached jars, but:

- clients reach it on ONE listener, ``SASL_SSL://127.0.0.1:<port>``, whose TLS certificate is
  signed by a CA made at start-up (:mod:`twophase.integration.services.certificates`);
- the listener takes SCRAM-SHA-512 (credentials created through the Admin API, KIP-554) and PLAIN
  (users in the listener's JAAS configuration), and OAUTHBEARER with Kafka's unsecured JWS
  validator when asked (KIP-255; the validator Kafka's own tests use);
- ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: a principal may do only
  what an ACL grants (KIP-801). The super users are ``broker`` (inter-broker and controller
  traffic, PLAIN) and ``admin`` (this launcher: topics, ACLs, SCRAM credentials).

Passwords are generated at start-up, live in :class:`SecuredKafka` (masked in its repr) and in the
broker's ``server.properties`` (mode 0600, in a folder of mode 0700); nothing logs them.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)
from confluent_kafka.cimpl import NewTopic

from twophase.integration.services.certificates import TlsFiles, make_tls_files
from twophase.integration.services.kafka import (
    format_storage,
    kafka_jvm,
    new_cluster_id,
    server_properties,
    start_node,
)
from twophase.integration.services.process import HOST, ManagedProcess, free_port, wait_ready
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

LISTENER = "SASL_SSL"
"""The name (and security protocol) of the clients' listener."""
MECHANISMS = ("SCRAM-SHA-512", "PLAIN")
"""SASL mechanisms the clients' listener takes (OAUTHBEARER too when started with ``oauthbearer``)."""
SUPER_USERS = ("broker", "admin")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
READER_GROUP_PREFIX = "twophase-secured-read-"
"""Consumer groups of :meth:`SecuredKafka.read_committed` (readers get Read on this prefix)."""
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class _QuietLog:
    """librdkafka log lines of the launcher's own clients go to DEBUG (refusals are expected while
    the broker starts)."""

    def log(self, level: int, msg: str, *args: object) -> None:
        log.debug("rdkafka: " + msg, *args)


def _jaas(module: str, options: Mapping[str, str]) -> str:
    # JAAS option values are double-quoted strings; generated passwords are URL-safe base64
    return module + " required " + " ".join(f'{k}="{v}"' for k, v in options.items()) + ";"


def secured_server_properties(
    data_dir: Path,
    port: int,
    controller_port: int,
    tls: TlsFiles,
    passwords: Mapping[str, str],
    oauthbearer: bool = False,
) -> str:
    """``server.properties`` of the secured one-node cluster (see the module docstring).

    The transaction and replication settings are the plain broker's
    (:func:`~twophase.integration.services.kafka.server_properties`); listeners, SASL, TLS and the
    authorizer are replaced. ``passwords`` maps every PLAIN user, ``broker`` included, to its
    password. Holds secrets: write it with mode 0600, never log it.
    """
    settings = dict(
        line.split("=", 1) for line in server_properties(data_dir, port, controller_port).splitlines()
    )
    mechanisms = [*MECHANISMS, "OAUTHBEARER"] if oauthbearer else list(MECHANISMS)
    broker_login = {"username": "broker", "password": passwords["broker"]}
    plain_users = {f"user_{name}": password for name, password in passwords.items()}
    settings.update(
        {
            "listeners": f"{LISTENER}://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            "advertised.listeners": f"{LISTENER}://{HOST}:{port}",
            "listener.security.protocol.map": f"CONTROLLER:SASL_PLAINTEXT,{LISTENER}:SASL_SSL",
            "inter.broker.listener.name": LISTENER,
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "sasl.enabled.mechanisms": ",".join(mechanisms),
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": _jaas(
                _PLAIN_MODULE, {**broker_login, "user_broker": passwords["broker"]}
            ),
            f"listener.name.{LISTENER.lower()}.sasl.enabled.mechanisms": ",".join(mechanisms),
            f"listener.name.{LISTENER.lower()}.plain.sasl.jaas.config": _jaas(
                _PLAIN_MODULE, {**broker_login, **plain_users}
            ),
            f"listener.name.{LISTENER.lower()}.scram-sha-512.sasl.jaas.config": f"{_SCRAM_MODULE} required;",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.server_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls.ca_cert),
            "ssl.endpoint.identification.algorithm": "https",
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join(f"User:{u}" for u in SUPER_USERS),
        }
    )
    if oauthbearer:
        # Kafka's default OAUTHBEARER server callback validates unsecured (alg "none") JWS tokens
        settings[f"listener.name.{LISTENER.lower()}.oauthbearer.sasl.jaas.config"] = _jaas(
            _OAUTH_MODULE, {"unsecuredLoginStringClaim_sub": "broker"}
        )
    return "".join(f"{key}={value}\n" for key, value in settings.items())


@dataclass(repr=False)
class SecuredKafka:
    """A running secured broker (see the module docstring); :meth:`stop` ends it.

    Attributes:
        bootstrap: ``127.0.0.1:<port>`` of the SASL_SSL listener.
        tls: the CA and server certificate files (clients trust ``tls.ca_cert``).
        data_dir: the broker's folder (logs, storage, configuration).
        process: the broker process.
        oauthbearer: whether the listener also takes OAUTHBEARER (unsecured JWS).
        remove_data_dir: :meth:`stop` deletes ``data_dir``.
    """

    bootstrap: str
    tls: TlsFiles
    data_dir: Path
    process: ManagedProcess
    oauthbearer: bool
    _passwords: dict[str, str] = field(repr=False)
    remove_data_dir: bool = True
    _admin: AdminClient | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"SecuredKafka(bootstrap={self.bootstrap!r}, users={sorted(self._passwords)!r})"

    @property
    def users(self) -> list[str]:
        """Every user name (PLAIN and SCRAM-SHA-512), super users included."""
        return sorted(self._passwords)

    def password(self, user: str) -> str:
        """``user``'s password (a secret: never log it).

        Raises:
            KeyError: no such user.
        """
        return self._passwords[user]

    def client_config(self, user: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """librdkafka settings (the sink's ``client_config``) to log in as ``user``.

        With ``OAUTHBEARER`` (a broker started with ``oauthbearer``), the token callback is
        :func:`twophase.connectors.kafka.oauth.unsecured_jws` with ``principal=<user>``.

        Holds the password: never log it.
        """
        if mechanism == "OAUTHBEARER":
            return {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism,
                "sasl.oauthbearer.config": f"principal={user}",
                "oauth_cb": "twophase.connectors.kafka.oauth:unsecured_jws",
                "ssl.ca.location": str(self.tls.ca_cert),
            }
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": self._passwords[user],
            "ssl.ca.location": str(self.tls.ca_cert),
        }

    def admin(self) -> AdminClient:
        """The confluent-kafka admin client logged in as the super user ``admin`` (PLAIN); one per
        broker, kept alive so that its pending results are not destroyed with it."""
        if self._admin is None:
            conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": _QuietLog()}
            conf.update(self.client_config("admin", "PLAIN"))
            self._admin = AdminClient(conf)
        return self._admin

    # --- set-up through the Admin API --------------------------------------------------------

    def add_scram_users(self, users: Iterable[str], iterations: int = 4096) -> None:
        """Create SCRAM-SHA-512 credentials with each user's password (AlterUserScramCredentials, KIP-554).

        Raises:
            KafkaException: the broker refused.
        """
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(
                user,
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, iterations),
                self._passwords[user].encode(),
            )
            for user in users
        ]
        for future in self.admin().alter_user_scram_credentials(upserts).values():
            future.result()

    def create_topic(self, topic: str, partitions: int = 2) -> None:
        """Create ``topic`` (as ``admin``; replication factor 1) and wait until it is known."""
        futures = self.admin().create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
        for future in futures.values():
            future.result()

    def grant(
        self, user: str, bindings: Iterable[tuple[ResourceType, str, ResourcePatternType, AclOperation]]
    ) -> None:
        """Allow ``User:<user>`` each ``(resource type, name, pattern type, operation)`` from any host.

        Raises:
            KafkaException: the broker refused (CreateAcls).
        """
        acls = [
            AclBinding(rtype, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)
            for rtype, name, pattern, op in bindings
        ]
        for future in self.admin().create_acls(acls).values():
            future.result()

    def grant_sink(self, user: str, topic: str | None, transactional_id_prefix: str | None) -> None:
        """The ACLs ``docs/secured-kafka.md`` says the Kafka sink needs, and nothing more: Write and
        Describe on ``topic``, Write and Describe on transactional ids starting with
        ``transactional_id_prefix`` (KIP-98; IdempotentWrite is not needed since KIP-679)."""
        bindings = []
        if topic is not None:
            bindings += [
                (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, op) for op in _WRITE_DESCRIBE
            ]
        if transactional_id_prefix is not None:
            bindings += [
                (ResourceType.TRANSACTIONAL_ID, transactional_id_prefix, ResourcePatternType.PREFIXED, op)
                for op in _WRITE_DESCRIBE
            ]
        self.grant(user, bindings)

    def grant_reader(self, user: str, topic: str) -> None:
        """Read on ``topic`` and on the consumer groups of :meth:`read_committed` (nothing else)."""
        self.grant(
            user,
            [
                (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, AclOperation.READ),
                (ResourceType.GROUP, READER_GROUP_PREFIX, ResourcePatternType.PREFIXED, AclOperation.READ),
            ],
        )

    # --- checks --------------------------------------------------------------------------------

    def read_committed(
        self, topic: str, user: str, timeout_s: float = 30.0
    ) -> list[tuple[bytes | None, bytes | None]]:
        """Every committed ``(key, value)`` of ``topic``, read as ``user`` by a ``read_committed``
        consumer from the beginning to the last stable offset taken at the start (KIP-98).

        Raises:
            ServiceUnavailableError: metadata, offsets or a fetch failed (one line, no secret).
        """
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"{READER_GROUP_PREFIX}{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "logger": _QuietLog(),
                **self.client_config(user),
            }
        )
        try:
            meta = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
            if meta.error is not None:
                raise ServiceUnavailableError(f"topic {topic!r}: {meta.error.str()}")
            ends = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)[
                    1
                ]
                for p in meta.partitions
            }
            wanted = {p: end for p, end in ends.items() if end > 0}
            consumer.assign([TopicPartition(topic, p, 0) for p in wanted])
            out: list[tuple[bytes | None, bytes | None]] = []
            done: set[int] = set()
            reason = wait_ready(lambda: self._consume(consumer, topic, wanted, out, done), timeout_s, 0.0)
            if reason is not None:
                raise ServiceUnavailableError(f"reading {topic!r} as {user!r}: {reason}")
            return out
        except KafkaException as e:
            raise ServiceUnavailableError(f"reading {topic!r} as {user!r}: {e.args[0].str()}") from None
        finally:
            consumer.close()

    @staticmethod
    def _consume(
        consumer: Consumer,
        topic: str,
        wanted: dict[int, int],
        out: list[tuple[bytes | None, bytes | None]],
        done: set[int],
    ) -> str | None:
        for message in consumer.consume(1000, timeout=1.0):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(error)
            partition, offset = message.partition(), message.offset()
            if partition is None or offset is None or partition in done or offset >= wanted[partition]:
                continue
            out.append((message.key(), message.value()))
        for partition, end in wanted.items():
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= end:
                done.add(partition)
        return (
            None
            if len(done) == len(wanted)
            else f"partitions {sorted(set(wanted) - done)} not read to the end"
        )

    def open_transactions(self, prefix: str) -> list[str]:
        """Ongoing transactional ids starting with ``prefix`` (ListTransactions as ``admin``)."""
        from twophase.connectors.kafka.internal.transport import KafkaPythonTransport

        transport = KafkaPythonTransport.connect(
            {
                "bootstrap_servers": [self.bootstrap],
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "PLAIN",
                "sasl_plain_username": "admin",
                "sasl_plain_password": self._passwords["admin"],
                "ssl_cafile": str(self.tls.ca_cert),
            }
        )
        try:
            rows = transport.list_transactions(["Ongoing"], None)
        finally:
            transport.close()
        return sorted(t for t, _pid, _state in rows if t.startswith(prefix))

    def stop(self) -> None:
        """Stop the broker and remove its folder (when ``remove_data_dir``). Idempotent."""
        self._admin = None
        self.process.stop()
        if self.remove_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


_WRITE_DESCRIBE = (AclOperation.WRITE, AclOperation.DESCRIBE)


def _try_admin_transactions(bootstrap: str, config: Mapping[str, str], timeout_s: float) -> str | None:
    """``None`` when ``admin`` can ``init_transactions`` (the coordinator works), else why not."""
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"twophase-readiness-{uuid.uuid4().hex}",
            "logger": _QuietLog(),
            "error_cb": lambda err: errors.append(err.str()),
            "socket.connection.setup.timeout.ms": 2000,
            **config,
        }
    )
    try:
        producer.init_transactions(timeout_s)
        return None
    except KafkaException as e:
        return f"{e.args[0].str()}; last client error: {errors[-1]}" if errors else e.args[0].str()
    finally:
        producer.flush(1)


def start_secured_kafka(
    users: Iterable[str],
    data_dir: Path | None = None,
    oauthbearer: bool = False,
    timeout_s: float = 90.0,
) -> SecuredKafka:
    """Make the certificates, start the secured broker, wait until it runs transactions, and
    create SCRAM-SHA-512 credentials for ``users`` (each also a PLAIN user, same password).

    Args:
        users: application user names (``broker`` and ``admin`` are always added as super users).
        data_dir: the broker's folder; default a new temporary one, deleted by :meth:`SecuredKafka.stop`.
        oauthbearer: also take OAUTHBEARER with Kafka's unsecured JWS validator.
        timeout_s: start-up bound (s).

    Raises:
        ServiceUnavailableError: Java or the jars are missing, formatting failed, or the broker
            did not run transactions within ``timeout_s`` (its log's last lines; no secret).
    """
    remove = data_dir is None
    root = Path(tempfile.mkdtemp(prefix="twophase-secured-kafka-")) if data_dir is None else data_dir
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    names = sorted({*SUPER_USERS, *users})
    passwords = {name: secrets.token_urlsafe(18) for name in names}
    try:
        tls = make_tls_files(root / "tls")
        port, controller_port = free_port(), free_port()
        jvm = kafka_jvm(root)
        props = root / "server.properties"
        props.touch(mode=0o600)
        props.write_text(secured_server_properties(root, port, controller_port, tls, passwords, oauthbearer))
        format_storage(jvm, props, new_cluster_id())
        process = start_node("secured-kafka", jvm, props)
    except BaseException:
        if remove:
            shutil.rmtree(root, ignore_errors=True)
        raise
    broker = SecuredKafka(f"{HOST}:{port}", tls, root, process, oauthbearer, passwords, remove)
    try:
        admin_config = broker.client_config("admin", "PLAIN")

        def ready() -> str | None:
            if not process.running():
                raise ServiceUnavailableError(f"secured Kafka exited during start-up: {process.log_tail(3)}")
            return _try_admin_transactions(broker.bootstrap, admin_config, 10.0)

        reason = wait_ready(ready, timeout_s, 0.5)
        if reason is not None:
            raise ServiceUnavailableError(
                f"secured Kafka at {broker.bootstrap} cannot run transactions within {timeout_s:g} s "
                f"({reason})"
            )
        broker.add_scram_users(names)
    except BaseException:
        broker.stop()
        raise
    log_event(
        log, logging.INFO, "secured kafka ready", bootstrap=broker.bootstrap, mechanisms=",".join(MECHANISMS)
    )
    return broker


SINK_SETTINGS_ENV = "TWOPHASE_SECURED_KAFKA_SINK"
"""JSON settings of :func:`kafka_sinks_from_environment`: ``bootstrap``, ``topic``, ``prefix``,
``name`` and ``client_config`` (holds a password: set it only in a test's own environment)."""


def kafka_sinks_from_environment() -> list[Any]:
    """One Kafka sink from ``$TWOPHASE_SECURED_KAFKA_SINK`` (a ``--sinks`` factory for
    ``twophase lingering`` in the secured-Kafka tests).

    Raises:
        KeyError: the variable or a setting is missing.
    """
    import json
    import os

    from twophase.connectors.kafka.config import KafkaSinkConfig
    from twophase.connectors.kafka.sink import KafkaSink

    settings = json.loads(os.environ[SINK_SETTINGS_ENV])
    config = KafkaSinkConfig(
        bootstrap_servers=settings["bootstrap"],
        topic=settings["topic"],
        transactional_id_prefix=settings["prefix"],
        client_config=settings["client_config"],
    )
    return [KafkaSink(settings["name"], config)]


# --- docker-compose (profile "secured") ------------------------------------------------------------

COMPOSE_HOST = "kafka-secured"
"""The broker's host name on the compose network."""
COMPOSE_PORTS = {"INTERNAL": 19094, LISTENER: 9094, "CONTROLLER": 9095}
"""Container ports: INTERNAL (other containers, ``kafka-secured:19094``), SASL_SSL (the host,
``127.0.0.1:9094``) and the controller."""
COMPOSE_USERS = ("sink", "reader")
PASSWORD_ENV = "TWOPHASE_KAFKA_SECURED_PASSWORD"
"""Every compose user's password (a local-only default when unset)."""
KAFKA_HOME = "/opt/kafka"


def compose_config(directory: Path, password: str, uid: int | None = None) -> Path:
    """Write the compose broker's files into ``directory`` (a volume shared with the
    ``apache/kafka`` container): the CA and certificate (for ``kafka-secured``, ``127.0.0.1`` and
    ``localhost``), ``server.properties`` as :func:`secured_server_properties` makes it with a
    second SASL_SSL listener for the compose network, and ``start.sh``, which formats the storage
    with the SCRAM-SHA-512 users (``kafka-storage format --add-scram``) and starts the broker.

    Args:
        password: every user's password (PLAIN and SCRAM), ``broker`` and ``admin`` included.
        uid: owner of the files (the image's ``appuser``, 1000) when running as root.

    Returns:
        The path of ``start.sh``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    tls = make_tls_files(directory / "tls", hosts=(COMPOSE_HOST, HOST, "localhost"))
    names = sorted({*SUPER_USERS, *COMPOSE_USERS})
    passwords = {name: password for name in names}
    data = directory / "data"
    data.mkdir(exist_ok=True)
    text = secured_server_properties(
        data, COMPOSE_PORTS[LISTENER], COMPOSE_PORTS["CONTROLLER"], tls, passwords, True
    )
    settings = dict(line.split("=", 1) for line in text.splitlines())
    internal = LISTENER.lower()
    ports = COMPOSE_PORTS
    settings.update(
        {
            "controller.quorum.voters": f"1@{COMPOSE_HOST}:{ports['CONTROLLER']}",
            "listeners": f"INTERNAL://:{ports['INTERNAL']},{LISTENER}://:{ports[LISTENER]},"
            f"CONTROLLER://:{ports['CONTROLLER']}",
            "advertised.listeners": f"INTERNAL://{COMPOSE_HOST}:{ports['INTERNAL']},{LISTENER}://{HOST}:{ports[LISTENER]}",
            "listener.security.protocol.map": (
                f"CONTROLLER:SASL_PLAINTEXT,INTERNAL:SASL_SSL,{LISTENER}:SASL_SSL"
            ),
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    for key in [k for k in settings if k.startswith(f"listener.name.{internal}.")]:
        settings["listener.name.internal." + key.removeprefix(f"listener.name.{internal}.")] = settings[key]
    (directory / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    scram = " ".join(f"--add-scram 'SCRAM-SHA-512=[name={n},password={passwords[n]}]'" for n in names)
    start = directory / "start.sh"
    start.write_text(
        "#!/bin/bash\nset -euo pipefail\n"
        f"{KAFKA_HOME}/bin/kafka-storage.sh format --ignore-formatted --cluster-id {new_cluster_id()} "
        f"--config {directory}/server.properties {scram}\n"
        f"exec {KAFKA_HOME}/bin/kafka-server-start.sh {directory}/server.properties\n"
    )
    for path in [directory, *directory.rglob("*")]:
        path.chmod(0o700 if path.is_dir() or path == start else 0o600)
        if uid is not None:
            os.chown(path, uid, uid)
    return start


if __name__ == "__main__":
    # docker-compose's kafka-secured-config service: python -m ... <volume folder>
    compose_config(
        Path(sys.argv[1]),
        os.environ.get(PASSWORD_ENV) or "twophase-local-only",
        uid=1000 if os.geteuid() == 0 else None,
    )
