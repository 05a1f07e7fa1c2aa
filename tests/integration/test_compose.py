"""docker-compose.yml and the Dockerfiles agree with the native launcher's pins and broker settings.

There is no Docker engine here, so the files are parsed, not run.
"""

from __future__ import annotations

import importlib
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from twophase.integration.services import versions
from twophase.integration.services.kafka import server_properties
from twophase.integration.services.maven import JVM_DIR

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "integration" / "docker"
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}

#: broker settings that change behaviour; listener wiring differs by design (container network)
SEMANTIC_KAFKA_SETTINGS = (
    "process.roles",
    "node.id",
    "num.partitions",
    "offsets.topic.replication.factor",
    "offsets.topic.num.partitions",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "transaction.state.log.num.partitions",
    "transaction.max.timeout.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "group.initial.rebalance.delay.ms",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _native_settings() -> dict[str, str]:
    text = server_properties(Path("/data"), 9092, 9093)
    return dict(line.split("=", 1) for line in text.splitlines())


def _dockerfile_args(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", path.read_text(), flags=re.MULTILINE))


def test_services_present(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {
        "kafka",
        "minio",
        "postgres",
        "app",
        "spark-master",
        "spark-worker-1",
        "spark-worker-2",
        "kafka-secured-config",
        "kafka-secured",
        "minio-secured-config",
        "minio-secured",
        "azurite",
        "gcs",
        "yarn",
    }


def test_emulator_images_match_native_pins(compose: dict[str, Any]) -> None:
    assert compose["services"]["azurite"]["image"] == versions.AZURITE_IMAGE
    assert compose["services"]["gcs"]["image"] == versions.FAKE_GCS_IMAGE
    assert "--disableTelemetry" in compose["services"]["azurite"]["command"]


def test_kafka_image_and_settings_match_native_broker(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"] == versions.KAFKA_IMAGE == f"apache/kafka:{versions.KAFKA_VERSION}"
    env = kafka["environment"]
    native = _native_settings()
    for key in SEMANTIC_KAFKA_SETTINGS:
        assert env["KAFKA_" + key.upper().replace(".", "_")] == native[key], key


def test_minio_built_from_the_pinned_module(compose: dict[str, Any]) -> None:
    for service, dockerfile in (("minio", "minio.Dockerfile"), ("app", "app.Dockerfile")):
        build = compose["services"][service]["build"]
        assert build["dockerfile"] == f"integration/docker/{dockerfile}"
        assert build["args"] == {
            "GO_IMAGE": versions.GO_IMAGE,
            "MINIO_MODULE_VERSION": versions.MINIO_MODULE_VERSION,
        }
        text = (DOCKER / dockerfile).read_text()
        assert _dockerfile_args(DOCKER / dockerfile) == build["args"]
        assert f"go install {versions.MINIO_MODULE}@${{MINIO_MODULE_VERSION}}" in text
    app = (DOCKER / "app.Dockerfile").read_text()
    assert f"/bin/minio-{versions.MINIO_COMMIT}/minio" in app


def test_app_toolchain_matches_native_requirements() -> None:
    app = (DOCKER / "app.Dockerfile").read_text()
    assert f"FROM python:{versions.PYTHON_VERSION}-" in app
    assert f"openjdk-{versions.JAVA_VERSION}-" in app


def test_the_images_python_snippets_import_what_exists() -> None:
    """Every ``from X import Y`` in a Dockerfile's ``python -c`` resolves (the import root is
    ``twophase``; a stale ``from integration…`` broke the image's build)."""
    for dockerfile in DOCKER.glob("*.Dockerfile"):
        for module, names in re.findall(r"from ([\w.]+) import ([\w, ]+?);", dockerfile.read_text()):
            imported = importlib.import_module(module)
            for name in names.split(","):
                assert hasattr(imported, name.strip()), f"{dockerfile.name}: {module}.{name.strip()}"


def test_the_spark_cluster_services_run_pysparks_own_master_and_workers(compose: dict[str, Any]) -> None:
    services = compose["services"]
    master = " ".join(services["spark-master"]["command"])
    assert "org.apache.spark.deploy.master.Master" in master and "--port 7077" in master
    for name in ("spark-worker-1", "spark-worker-2"):
        worker = " ".join(services[name]["command"])
        assert "org.apache.spark.deploy.worker.Worker spark://spark-master:7077" in worker
        assert services[name]["depends_on"] == ["spark-master"]


def test_postgres_allows_prepared_transactions_as_the_native_launcher_does(compose: dict[str, Any]) -> None:
    from twophase.integration.services.postgres import DEFAULT_MAX_PREPARED_TRANSACTIONS

    postgres = compose["services"]["postgres"]
    assert postgres["image"].startswith("postgres:")
    assert f"max_prepared_transactions={DEFAULT_MAX_PREPARED_TRANSACTIONS}" in postgres["command"]


def test_ports_bind_localhost_only(compose: dict[str, Any]) -> None:
    published = [port for service in compose["services"].values() for port in service.get("ports", [])]
    assert published
    assert all(str(port).startswith("127.0.0.1:") for port in published)
    assert {str(p).rsplit(":", 1)[1] for p in published} == {
        "9092",
        "9094",
        "9000",
        "9001",
        "8080",
        "5432",
        "10000",
        "4443",
    }


def test_app_points_at_the_compose_services(compose: dict[str, Any]) -> None:
    env = compose["services"]["app"]["environment"]
    kafka_env = compose["services"]["kafka"]["environment"]
    assert f"INTERNAL://{env['TWOPHASE_KAFKA_BOOTSTRAP']}" in kafka_env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["TWOPHASE_S3_ENDPOINT"] == "http://minio:9000"
    minio_env = compose["services"]["minio"]["environment"]
    assert env["TWOPHASE_S3_ACCESS_KEY"] == minio_env["MINIO_ROOT_USER"]
    assert env["TWOPHASE_S3_SECRET_KEY"] == minio_env["MINIO_ROOT_PASSWORD"]
    assert set(compose["services"]["app"]["depends_on"]) == {"kafka", "minio"}


def test_the_secured_profile_runs_the_native_secured_broker_configuration(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    from twophase.integration.services import secured_kafka

    services = compose["services"]
    config, broker = services["kafka-secured-config"], services["kafka-secured"]
    assert config["profiles"] == broker["profiles"] == ["secured"]
    assert broker["image"] == versions.KAFKA_IMAGE
    assert config["command"][-2:] == ["twophase.integration.services.secured_kafka", "/secured"]
    assert broker["command"] == ["bash", "/secured/start.sh"]
    assert broker["depends_on"]["kafka-secured-config"]["condition"] == "service_completed_successfully"
    start = secured_kafka.compose_config(tmp_path, "pw-local")
    settings = dict(line.split("=", 1) for line in (tmp_path / "server.properties").read_text().splitlines())
    native = _native_settings()
    for key in SEMANTIC_KAFKA_SETTINGS:
        assert settings[key] == native[key], key
    assert settings["authorizer.class.name"] == secured_kafka.AUTHORIZER
    assert settings["allow.everyone.if.no.acl.found"] == "false"
    assert "SASL_SSL://127.0.0.1:9094" in settings["advertised.listeners"]
    assert "--add-scram 'SCRAM-SHA-512=[name=sink," in start.read_text()


def test_the_secured_profile_runs_minio_over_tls_with_the_native_certificates(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    from cryptography import x509

    from twophase.integration.services import s3_tls

    services = compose["services"]
    config, minio = services["minio-secured-config"], services["minio-secured"]
    assert config["profiles"] == minio["profiles"] == ["secured"]
    assert config["command"][-2:] == ["twophase.integration.services.s3_tls", "/secured"]
    assert minio["build"] == services["minio"]["build"]
    assert minio["command"] == ["--certs-dir", "/secured/certs"]
    assert minio["depends_on"]["minio-secured-config"]["condition"] == "service_completed_successfully"
    certificates = s3_tls.compose_config(tmp_path)
    assert certificates.certs_dir == tmp_path / "certs" and certificates.ca_bundle == tmp_path / "ca.crt"
    assert {p.name for p in certificates.certs_dir.rglob("*")} == {
        "public.crt",
        "private.key",
        "CAs",
        "ca.crt",
    }
    cert = x509.load_pem_x509_certificate((certificates.certs_dir / "public.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "minio-secured" in names.get_values_for_type(x509.DNSName)


def test_maven_poms_match_pins() -> None:
    kafka = ET.parse(JVM_DIR / "kafka" / "pom.xml").getroot()
    assert kafka.findtext("m:properties/m:kafka.version", namespaces=POM_NS) == versions.KAFKA_VERSION
    # the Spark POM's defaults are the development Spark's jar set (the -D properties override them)
    spark = ET.parse(JVM_DIR / "spark" / "pom.xml").getroot()
    default = versions.SPARK_JARS[(4, 2)]
    props = {
        p: spark.findtext(f"m:properties/m:{p}", namespaces=POM_NS)
        for p in ("delta.artifact", "delta.version")
    }
    assert props == {"delta.artifact": default.delta_artifact, "delta.version": default.delta_version}
    assert spark.findtext("m:properties/m:kafka.source.version", namespaces=POM_NS) == default.kafka_source


def test_spark_jar_properties_follow_the_installed_pyspark() -> None:
    import pyspark

    from twophase.integration.spark import maven_properties, pyspark_jars_dir

    props = maven_properties()
    clients = sorted(jar.name for jar in pyspark_jars_dir().glob("hadoop-client-api-*.jar"))
    assert clients == [f"hadoop-client-api-{props['hadoop.version']}.jar"]
    assert props["scala.binary.version"] == ("2.12" if pyspark.__version__.startswith("3.") else "2.13")


def test_pyspark_version_matches_pin() -> None:
    import pyspark

    assert pyspark.__version__ == versions.SPARK_VERSION
