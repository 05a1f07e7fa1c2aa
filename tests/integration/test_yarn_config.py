"""The YARN service's configuration files and the flights job's YARN conf, without starting YARN
(the cluster itself runs in ``test_yarn.py``, in ``make chaos``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from twophase.integration.jobs.flights_yarn import _redacted, yarn_conf
from twophase.integration.services import S3Endpoint
from twophase.integration.services.yarn import YarnCluster, YarnEndpoint, read_site, site_xml
from twophase.sinks.errors import ConfigError

S3 = S3Endpoint("http://127.0.0.1:9000", "access-id", "secret-value", "us-east-1")


def test_a_site_file_keeps_every_property_escaped(tmp_path: Path) -> None:
    path = tmp_path / "yarn-site.xml"
    props = {"a.b": "x<y&z", "yarn.resourcemanager.webapp.address": "127.0.0.1:8088"}
    path.write_text(site_xml(props))
    assert read_site(path) == props
    assert read_site(tmp_path / "missing.xml") == {}
    (tmp_path / "bad.xml").write_text("<configuration>")
    with pytest.raises(ConfigError, match="not a Hadoop configuration file"):
        read_site(tmp_path / "bad.xml")


def test_a_configuration_folder_names_its_resource_manager(tmp_path: Path) -> None:
    (tmp_path / "yarn-site.xml").write_text(site_xml({"yarn.resourcemanager.hostname": "rm.example"}))
    assert YarnEndpoint.of_conf_dir(tmp_path).web_url == "http://rm.example:8088"
    with pytest.raises(ConfigError, match="names no ResourceManager"):
        YarnEndpoint.of_conf_dir(tmp_path / "elsewhere")


def test_every_daemon_reaches_the_same_resource_manager_and_each_node_has_its_own_folders(
    tmp_path: Path,
) -> None:
    cluster = YarnCluster(tmp_path, S3, nodemanagers=2)
    nodes = [cluster.node_site(0), cluster.node_site(1)]
    rm_keys = [k for k in cluster.cluster_site() if k.startswith("yarn.resourcemanager.") and "address" in k]
    for node in nodes:
        assert all(node[k] == cluster.cluster_site()[k] for k in rm_keys)
        assert node["yarn.nodemanager.vmem-check-enabled"] == "false"
    assert nodes[0]["yarn.nodemanager.local-dirs"] != nodes[1]["yarn.nodemanager.local-dirs"]
    assert nodes[0]["yarn.nodemanager.address"] != nodes[1]["yarn.nodemanager.address"]
    assert cluster.cluster_site()["yarn.resourcemanager.am.max-attempts"] == "2"
    with pytest.raises(ConfigError, match="at least one NodeManager"):
        YarnCluster(tmp_path, S3, nodemanagers=0)


def test_cluster_mode_gives_the_driver_its_environment_and_restarts_it() -> None:
    driver_env = {"TWOPHASE_KAFKA_BOOTSTRAP": "127.0.0.1:9092", "TWOPHASE_S3_SECRET_KEY": "secret-value"}
    conf = yarn_conf(S3, "s3a://b/yarn-envs/x/env.tar.gz", "cluster", "b", driver_env)
    assert conf["spark.master"] == "yarn" and conf["spark.submit.deployMode"] == "cluster"
    assert conf["spark.yarn.maxAppAttempts"] == "2"
    assert conf["spark.yarn.stagingDir"] == "s3a://b/yarn-staging"
    assert conf["spark.archives"] == "s3a://b/yarn-envs/x/env.tar.gz#environment"
    assert conf["spark.yarn.jars"].startswith("local:") and conf["spark.yarn.jars"].endswith("/jars/*")
    assert conf["spark.yarn.appMasterEnv.TWOPHASE_KAFKA_BOOTSTRAP"] == "127.0.0.1:9092"
    assert conf["spark.yarn.appMasterEnv.AWS_SECRET_ACCESS_KEY"] == "secret-value"
    assert "secret-value" not in str(_redacted(conf))
    client = yarn_conf(S3, "s3a://b/e.tar.gz", "client", "b", driver_env)
    assert not any(k.startswith("spark.yarn.appMasterEnv.") for k in client)
    with pytest.raises(ConfigError, match="client or cluster"):
        yarn_conf(S3, "s3a://b/e.tar.gz", "local", "b", driver_env)
