"""``.format("twophase")`` with ``sink=iceberg``: every IcebergSinkConfig field is a string option."""

from __future__ import annotations

from twophase.connectors.iceberg import IcebergSink, IcebergSinkConfig
from twophase.coordinator.spark.default_source import sink_from_options, sink_option_names
from twophase.sinks.s3_options import S3Options

SECRET = "facade-s3cr3t"


def test_iceberg_options_build_the_sink() -> None:
    sink = sink_from_options(
        {
            "sink": "iceberg",
            "sinkname": "lake",
            "table": "db.orders",
            "catalog_uri": "/tmp/catalog.db",
            "catalog_password": SECRET,
            "warehouse": "s3://bucket/wh",
            "create_table": "true",
            "partition_by": "region,day(ts)",
            "lingering_grace_ms": "5000",
            "s3.endpoint_url": "http://127.0.0.1:9000",
            "s3.secret_access_key": SECRET,
            "s3.access_key_id": "key",
        }
    )
    assert isinstance(sink, IcebergSink) and sink.name == "lake"
    assert sink.config == IcebergSinkConfig(
        table="db.orders",
        catalog_uri="/tmp/catalog.db",
        catalog_password=SECRET,
        warehouse="s3://bucket/wh",
        create_table=True,
        partition_by=("region", "day(ts)"),
        lingering_grace_ms=5000,
        storage_options=S3Options(
            endpoint_url="http://127.0.0.1:9000", access_key_id="key", secret_access_key=SECRET
        ),
    )
    assert SECRET not in repr(sink)
    assert {"table", "catalog_uri", "partition_by"} <= set(sink_option_names("iceberg"))
