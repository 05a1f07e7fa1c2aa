"""One boto3 client per store and process: sinks of one store share it, whatever their prefix."""

from __future__ import annotations

from twophase.connectors.s3 import S3SinkConfig
from twophase.connectors.s3.internal.uploads import cached_client
from twophase.sinks.s3_options import S3Options

STORE = S3Options(
    endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="k", secret_access_key="s"
)


def test_sinks_of_one_store_share_a_client_and_other_stores_or_timeouts_do_not() -> None:
    first = cached_client(S3SinkConfig(bucket="lake", prefix="a", storage_options=STORE))
    assert cached_client(S3SinkConfig(bucket="other", prefix="b/c", storage_options=STORE)) is first
    elsewhere = S3Options(
        endpoint_url="http://127.0.0.2:9", region="us-east-1", access_key_id="k", secret_access_key="s"
    )
    assert cached_client(S3SinkConfig(bucket="lake", prefix="a", storage_options=elsewhere)) is not first
    slower = S3SinkConfig(bucket="lake", prefix="a", storage_options=STORE, read_timeout_ms=120_000)
    assert cached_client(slower) is not first
