"""``.format("twophase")`` with ``sink=postgres``: every PostgresSinkConfig field is a string option."""

from __future__ import annotations

import pytest

from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
from twophase.coordinator.spark.default_source import sink_from_options, sink_option_names
from twophase.sinks.errors import ConfigError

SECRET = "facade-s3cr3t"


def test_postgres_options_build_the_sink() -> None:
    sink = sink_from_options(
        {
            "sink": "postgres",
            "sinkname": "orders_db",
            "table": "orders",
            "host": "db",
            "port": "5433",
            "password": SECRET,
            "mode": "upsert",
            "key_columns": "order_id",
            "columns": "order_id,amount",
        }
    )
    assert isinstance(sink, PostgresSink) and sink.name == "orders_db"
    assert sink.config == PostgresSinkConfig(
        table="orders",
        host="db",
        port=5433,
        password=SECRET,
        mode="upsert",
        key_columns=("order_id",),
        columns=("order_id", "amount"),
    )
    assert SECRET not in repr(sink)
    assert "password" in sink_option_names("postgres") and "table" in sink_option_names("postgres")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"table": "t", "tabel": "x"}, r"unknown option\(s\) \['tabel'\] for sink 'postgres'"),
        ({"table": "t", "port": "many"}, "port"),
        ({"table": "t", "key_columns": "id"}, "key_columns is for mode='upsert' only"),
        ({"password": SECRET}, "table"),
    ],
)
def test_bad_postgres_options_are_refused_without_the_password(options: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        sink_from_options({"sink": "postgres", "password": SECRET, **options})
    assert SECRET not in str(caught.value)
