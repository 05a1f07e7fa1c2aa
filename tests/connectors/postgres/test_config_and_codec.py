"""PostgresSinkConfig validation and redaction; the committable's versioned JSON codec."""

from __future__ import annotations

import json
import logging
import pickle
from typing import Any

import pyarrow as pa
import pytest

from twophase.connectors.postgres import PostgresCommittable, PostgresSink, PostgresSinkConfig
from twophase.connectors.postgres.config import redact_conninfo
from twophase.connectors.postgres.internal.committable import CODEC
from twophase.connectors.postgres.internal.naming import make_gid
from twophase.connectors.postgres.internal.schema import TableColumn, TableInfo, check_columns, upsert_key
from twophase.sinks.errors import CommittableDecodeError, ConfigError, SchemaError

SECRET = "s3cr3t-Pa55word"


def test_repr_and_messages_never_show_the_password(caplog: pytest.LogCaptureFixture) -> None:
    config = PostgresSinkConfig(table="t", password=SECRET)
    sink = PostgresSink("pg", config)
    assert SECRET not in repr(config) and "password=***" in repr(config)
    assert SECRET not in repr(sink) and SECRET not in str(sink)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("sink %r config %s", sink, config)
    assert SECRET not in caplog.text
    assert config.redact(f"failed: password={SECRET}") == "failed: password=***"
    assert redact_conninfo(f"host=h password='{SECRET}' user=u") == "host=h password=*** user=u"
    assert "password=None" in repr(PostgresSinkConfig(table="t"))
    # executors need it: it travels pickled with the sink, and only there
    assert pickle.loads(pickle.dumps(sink)).config.password == SECRET
    assert config.connect_kwargs()["password"] == SECRET


def test_committable_json_holds_no_connection_setting() -> None:
    committable = PostgresCommittable(make_gid("job", "pg", 3, 1, 0, "0a1b2c3d"), 42)
    payload = CODEC.to_json(committable)
    assert payload == {
        "kind": "postgres.prepared_transaction",
        "version": 1,
        "body": {"gid": committable.gid, "record_count": 42},
    }
    assert CODEC.loads(json.dumps(payload)) == committable
    assert committable.parts().checkpoint_id == 3 and committable.parts().partition == 1


@pytest.mark.parametrize(
    "payload",
    [
        {"kind": "kafka.transaction", "version": 1, "body": {}},
        {"kind": "postgres.prepared_transaction", "version": 2, "body": {"gid": "g", "record_count": 1}},
        {"kind": "postgres.prepared_transaction", "version": 1, "body": {"gid": "g"}},
        {"kind": "postgres.prepared_transaction", "version": 1, "body": {"gid": "g", "record_count": "1"}},
    ],
)
def test_bad_payloads_are_refused(payload: dict[str, Any]) -> None:
    with pytest.raises(CommittableDecodeError):
        CODEC.from_json(payload)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"table": ""}, "table must be a non-empty name"),
        ({"table": "x" * 64}, "not a valid PostgreSQL name"),
        ({"mode": "merge"}, "mode must be 'append' or 'upsert'"),
        ({"key_columns": ("id",)}, "key_columns is for mode='upsert' only"),
        ({"mode": "upsert", "key_columns": "id"}, "must be a sequence of column names"),
        ({"mode": "upsert", "key_columns": ("id", "id")}, "repeats"),
        ({"mode": "upsert", "key_columns": ("id",), "columns": ("name",)}, "not among columns"),
        ({"columns": ()}, "at least one column"),
        ({"port": 0}, "port must be 1..65535"),
        ({"connect_attempts": 0}, "connect_attempts must be an int >= 1"),
        ({"commit_record_retention": 3}, "commit_record_retention must be an int >= 10"),
        ({"host": " "}, "host must be a non-empty string"),
    ],
)
def test_bad_config_is_a_one_line_config_error(overrides: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"table": "t", **overrides}
    with pytest.raises(ConfigError, match=message) as caught:
        PostgresSinkConfig(**fields)
    assert "\n" not in str(caught.value)


TABLE = TableInfo(
    "public",
    "t",
    (
        TableColumn("id", "int8", True, False),
        TableColumn("name", "text", False, False),
        TableColumn("at", "timestamptz", False, False),
        TableColumn("created", "timestamptz", True, True),
        TableColumn("n", "numeric", False, False),
    ),
    ("id",),
    (frozenset({"id"}), frozenset({"name", "at"})),
)


def test_columns_are_checked_against_the_table() -> None:
    schema = pa.schema(
        {"id": pa.int32(), "name": pa.string(), "at": pa.timestamp("us", "UTC"), "n": pa.int64()}
    )
    assert check_columns(schema, TABLE, None, "t") == (
        ("id", "name", "at", "n"),
        ("int8", "text", "timestamptz", "numeric"),
    )
    assert check_columns(schema, TABLE, ("id",), "t") == (("id",), ("int8",))


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            pa.schema({"id": pa.int64(), "name": pa.int64()}),
            r"type mismatch .*name: data int64 vs table text",
        ),
        (
            pa.schema({"id": pa.int64(), "at": pa.timestamp("us")}),
            r"at: data timestamp\[us\] vs table timestamptz",
        ),
        (pa.schema({"id": pa.float64()}), r"id: data double vs table int8"),
        (pa.schema({"id": pa.int64(), "tags": pa.list_(pa.string())}), r"has no column\(s\) \['tags'\]"),
        (pa.schema({"name": pa.string()}), r"NOT NULL column\(s\) \['id'\] without default"),
        (
            pa.schema({"id": pa.int64(), "n": pa.list_(pa.int64())}),
            r"n: data list<item: int64> vs table numeric",
        ),
        (
            pa.schema({"id": pa.int64(), "n": pa.decimal256(39, 2)}),
            r"n: data decimal256\(39, 2\) is wider than 38 digits, the most binary COPY writes",
        ),
    ],
)
def test_schema_mismatches_are_one_line_schema_errors(schema: pa.Schema, message: str) -> None:
    with pytest.raises(SchemaError, match=message) as caught:
        check_columns(schema, TABLE, None, "t")
    assert "\n" not in str(caught.value)


def test_upsert_key_defaults_to_the_primary_key_and_needs_a_unique_index() -> None:
    assert upsert_key(TABLE, (), ("id", "name"), "t") == ("id",)
    assert upsert_key(TABLE, ("name", "at"), ("id", "name", "at"), "t") == ("name", "at")
    with pytest.raises(ConfigError, match="not covered by a unique index"):
        upsert_key(TABLE, ("name",), ("id", "name"), "t")
    with pytest.raises(ConfigError, match="not among the written columns"):
        upsert_key(TABLE, (), ("name",), "t")
    no_key = TableInfo("public", "t", TABLE.columns, (), ())
    with pytest.raises(ConfigError, match="upsert mode needs a key"):
        upsert_key(no_key, (), ("id",), "t")
