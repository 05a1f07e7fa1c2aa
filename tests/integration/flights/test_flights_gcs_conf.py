"""How Spark reaches fake-gcs-server through Google's GCS connector (issue #46 item 5), checked
against the Hadoop that pyspark ships: no Spark session, no service."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
import zipfile

from twophase.integration.jobs.flights_gcs import SIZE_KEYS, gcs_conf
from twophase.integration.services.gcs_server import GcsEndpoint
from twophase.integration.spark import pyspark_jars_dir


def _core_defaults() -> dict[str, str]:
    (jar,) = pyspark_jars_dir().glob("hadoop-client-api-*.jar")
    with zipfile.ZipFile(jar) as z:
        root = ET.fromstring(z.read("core-default.xml"))
    return {p.findtext("name", ""): (p.findtext("value") or "").strip() for p in root.iter("property")}


def test_every_gs_size_hadoop_gives_with_a_suffix_is_set_in_bytes() -> None:
    """Hadoop 3.5's defaults give ``fs.gs.block.size=64m`` (for its own hadoop-gcp); Google's
    connector parses it with ``getLong`` and fails to start (``NumberFormatException: "64m"``, seen
    on the first ``--store gcs`` demo). A suffixed ``fs.gs.*`` size not in SIZE_KEYS would again."""
    suffixed = {
        k
        for k, v in _core_defaults().items()
        if k.startswith("fs.gs.") and re.fullmatch(r"\d+[kmgtp]", v, re.I)
    }
    assert suffixed <= set(SIZE_KEYS), sorted(suffixed - set(SIZE_KEYS))


def test_the_connector_reaches_the_emulator_unauthenticated_with_its_own_file_system() -> None:
    conf = gcs_conf(GcsEndpoint("http://127.0.0.1:4443"))
    assert conf["fs.gs.storage.root.url"] == "http://127.0.0.1:4443/"
    assert conf["fs.gs.auth.type"] == "UNAUTHENTICATED"
    # Hadoop 3.5's core-default.xml names its own hadoop-gcp here; the shaded jar is Google's
    assert conf["fs.gs.impl"] == "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem"
