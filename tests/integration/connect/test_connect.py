"""The ``twophase`` data source from a Spark Connect client, to each sink, exactly once (#18 §4).

The client holds no JVM; the server runs the query and the data source. Nothing registers the
format: the server finds it in the shipped wheel (see ``conftest.py``). Each query reads three
Parquet files, one per micro-batch (``availableNow``), and every record is read back once by a
reader that knows nothing of twophase, with nothing left open.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from support.exactly_once.support import make_input

from twophase.coordinator.spark.compat import DATA_SOURCE_SPARK, spark_version
from twophase.integration.readback import read_topic
from twophase.integration.services.s3 import S3Endpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame  # the parent of Connect's DataFrame
    from pyspark.sql.connect.session import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    # twophase reaches a Connect server through format("twophase"): Spark 4.1 or later
    pytest.mark.skipif(
        spark_version() < DATA_SOURCE_SPARK, reason='format("twophase") needs Spark 4.1 or later'
    ),
]


def stream(remote: SparkSession, root: Path) -> DataFrame:
    return remote.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(str(root / "input"))


def twophase(df: DataFrame, root: Path, sink: str, **options: str) -> DataStreamWriter:
    writer = (
        df.writeStream.format("twophase")
        .option("sink", sink)
        .option("job", f"connect_{sink}")
        .option("twophaseCheckpointDir", str(root / "chk"))
        .option("checkpointLocation", str(root / "spark"))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def run(writer: DataStreamWriter) -> None:
    query = writer.start()
    query.awaitTermination()
    assert query.exception() is None


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
@pytest.mark.compat
def test_delta_through_spark_connect(remote: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    expected = make_input(tmp_path, files=3, rows_per_file=100)
    table_uri = str(tmp_path / "table")
    run(twophase(stream(remote, tmp_path), tmp_path, "delta", table_uri=table_uri))
    table = DeltaTable(table_uri)
    assert Counter(table.to_pyarrow_table().column("id").to_pylist()) == Counter(expected)
    assert table.version() == 2  # one commit per batch: versions 0 (the first creates the table), 1, 2
    on_disk = {p.name for p in Path(table_uri).rglob("*.parquet")}
    assert on_disk == {Path(u).name for u in table.file_uris()}  # no unreferenced data file


@pytest.mark.compat
def test_kafka_through_spark_connect(remote: SparkSession, tmp_path: Path, kafka_bootstrap: str) -> None:
    expected = make_input(tmp_path, files=3, rows_per_file=100)
    topic = f"connect-{uuid.uuid4().hex[:8]}"
    df = stream(remote, tmp_path).selectExpr("CAST(id AS STRING) AS key", "to_json(struct(id)) AS value")
    writer = twophase(
        df, tmp_path, "kafka", bootstrap_servers=kafka_bootstrap, topic=topic, create_topic="true"
    )
    # Kafka's pooled transactional ids cannot take two attempts of one task at once; the data source
    # cannot read spark.speculation, so the query states it is off
    run(writer.option("kafka.linger.ms", "5").option("speculation", "false"))
    records = read_topic(kafka_bootstrap, topic, "read_committed", 60.0)
    assert Counter(json.loads(r.value or b"{}")["id"] for r in records) == Counter(expected)


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
def test_s3_through_spark_connect(remote: SparkSession, tmp_path: Path, s3_endpoint: S3Endpoint) -> None:
    expected = make_input(tmp_path, files=3, rows_per_file=100)
    bucket = "connect-test"
    s3_endpoint.ensure_bucket(bucket)
    prefix = f"runs/{uuid.uuid4().hex[:8]}"
    # the server reaches MinIO through its AWS_* environment: no endpoint or key in any option
    run(twophase(stream(remote, tmp_path), tmp_path, "s3", bucket=bucket, prefix=prefix))
    client = s3_endpoint.boto3_client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    assert len(keys) == 3 and all(k.endswith(".parquet") for k in keys)
    fs = s3_endpoint_filesystem(s3_endpoint)
    ids = [i for k in keys for i in pq.read_table(f"{bucket}/{k}", filesystem=fs).column("id").to_pylist()]
    assert Counter(ids) == Counter(expected)
    assert client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []) == []


def test_a_misspelt_option_fails_the_query_by_name(remote: SparkSession, tmp_path: Path) -> None:
    make_input(tmp_path, files=1, rows_per_file=10)
    writer = twophase(
        stream(remote, tmp_path), tmp_path, "delta", table_uri=str(tmp_path / "t"), tabel_name="x"
    )
    with pytest.raises(Exception, match="tabel_name"):
        run(writer)
    assert not (tmp_path / "t").exists()


def s3_endpoint_filesystem(endpoint: S3Endpoint) -> pafs.S3FileSystem:
    scheme, _, host = endpoint.endpoint_url.partition("://")
    return pafs.S3FileSystem(
        access_key=endpoint.access_key,
        secret_key=endpoint.secret_key,
        region=endpoint.region,
        endpoint_override=host,
        scheme=scheme,
    )
