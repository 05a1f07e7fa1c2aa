"""Object key naming of the S3 sink: pure functions."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twophase.connectors.objectstore.internal.naming import TOKEN_HEX
from twophase.connectors.s3.internal import naming
from twophase.sinks.errors import ConfigError

TOKEN = naming.job_token("job-1", "out")
FILE_ID = "0123456789abcdef0123456789abcdef"


def test_job_token_is_stable_and_distinct_per_job_and_sink() -> None:
    assert naming.job_token("job-1", "out") == TOKEN
    assert len(TOKEN) == TOKEN_HEX and int(TOKEN, 16) >= 0
    others = {
        naming.job_token("job-2", "out"),
        naming.job_token("job-1", "out2"),
        naming.job_token("job-1o", "ut"),
    }
    assert TOKEN not in others and len(others) == 3


def test_data_key_layout() -> None:
    key = naming.data_key("warehouse/events", "day=1/kind=a", 3, 42, TOKEN, FILE_ID, "parquet")
    assert key == f"warehouse/events/day=1/kind=a/part-00003-42-{TOKEN}-{FILE_ID}.parquet"
    assert naming.data_key("", "", 0, 1, TOKEN, FILE_ID, "jsonl") == f"part-00000-1-{TOKEN}-{FILE_ID}.jsonl"


@given(
    prefix=st.sampled_from(["", "a", "a/b=c/d"]),
    path=st.sampled_from(["", "day=1", "x=%2F/y=__HIVE_DEFAULT_PARTITION__"]),
    partition=st.integers(0, 99_999),
    checkpoint=st.integers(0, 10**12),
)
def test_data_key_round_trip(prefix: str, path: str, partition: int, checkpoint: int) -> None:
    file_id = uuid.uuid4().hex
    key = naming.data_key(prefix, path, partition, checkpoint, TOKEN, file_id, "csv")
    parsed = naming.parse_data_key(prefix, key)
    assert parsed == naming.DataKey(path, partition, checkpoint, TOKEN, file_id)


def test_parse_data_key_rejects_foreign_keys() -> None:
    good = naming.data_key("p", "", 1, 2, TOKEN, FILE_ID, "csv")
    assert naming.parse_data_key("p", good) is not None
    assert naming.parse_data_key("q", good) is None  # other prefix
    assert naming.parse_data_key("p", "p/part-00001.csv") is None  # Spark's own file name
    assert naming.parse_data_key("p", "p/_twophase/x/part-00001-2-" + TOKEN + "-" + FILE_ID + ".csv") is None
    assert naming.parse_data_key("p", "px/" + good[2:]) is None


def test_data_key_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        naming.data_key("p", "", -1, 1, TOKEN, FILE_ID, "csv")
    with pytest.raises(ValueError):
        naming.data_key("p", "", 1, 1, TOKEN, "not-a-uuid", "csv")
    with pytest.raises(ValueError):
        naming.data_key("p", "", 1, 1, "XYZ", FILE_ID, "csv")
    with pytest.raises(ValueError, match="1024"):
        naming.data_key("p", "c=" + "v" * 1100, 1, 1, TOKEN, FILE_ID, "csv")


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("", ""),
        ("/", ""),
        ("a", "a"),
        ("/a/b/", "a/b"),
        ("x/dt=2024-01-01/y_(1)!*'.z", "x/dt=2024-01-01/y_(1)!*'.z"),
    ],
)
def test_prefix_normalized(raw: str, normalized: str) -> None:
    assert naming.normalize_prefix(raw) == normalized


@pytest.mark.parametrize(
    "bad",
    [
        "a b",
        "a#b",
        "a\\b",
        "a{b}",
        "a^b",
        "a%20b",
        "a`b",
        "a[b]",
        'a"b',
        "a<b>",
        "a~b",
        "a|b",
        "a\nb",
        "é",
        "a?b",
    ],
)
def test_prefix_illegal_characters_raise_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="illegal characters"):
        naming.normalize_prefix(bad)


@pytest.mark.parametrize("bad", ["a//b", "a/./b", "../a", "a/_twophase/b", "x" * 513])
def test_prefix_illegal_segments_raise_config_error(bad: str) -> None:
    with pytest.raises(ConfigError):
        naming.normalize_prefix(bad)


@pytest.mark.parametrize("bad", ["", "ab", "Upper", "-ab", "ab-", "a..b", "a_b", "192.168.1.1", "x" * 64])
def test_bucket_names_validated(bad: str) -> None:
    with pytest.raises(ConfigError, match="bucket"):
        naming.validate_bucket(bad)
    assert naming.validate_bucket("my-bucket.1") == "my-bucket.1"


def test_hive_partition_path_formats_and_escapes_values() -> None:
    cols = ("s", "n", "b", "d", "ts", "none", "empty")
    values = ("a/b=c%", 7, True, dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5), None, "")
    assert naming.hive_partition_path(cols, values) == (
        "s=a%2Fb%3Dc%25/n=7/b=true/d=2024-01-02/ts=2024-01-02 03%3A04%3A05/"
        "none=__HIVE_DEFAULT_PARTITION__/empty=__HIVE_DEFAULT_PARTITION__"
    )
    assert naming.hive_partition_path((), ()) == ""
    with pytest.raises(ValueError):
        naming.hive_partition_path(("a",), ())


def test_tail_keys_live_under_the_hidden_temp_folder_and_round_trip() -> None:
    key = naming.tail_key("p/q", TOKEN, FILE_ID, 7, 1, "beef")
    assert key == f"p/q/_twophase/{TOKEN}/tails/{FILE_ID}/7-1-beef.tail"
    assert key.startswith(naming.tail_prefix("p/q", TOKEN, FILE_ID))
    assert key.startswith(naming.tails_root("p/q", TOKEN))
    assert naming.parse_tail_key("p/q", TOKEN, key) == naming.TailKey(FILE_ID, 7, 1)
    assert naming.parse_tail_key("p/q", naming.job_token("other", "out"), key) is None
    assert naming.parse_data_key("p/q", key) is None
    assert naming.tail_key("", TOKEN, FILE_ID, 1, 0, "ab").startswith(f"_twophase/{TOKEN}/")
