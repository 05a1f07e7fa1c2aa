"""Shared naming rules: Hive-style partition folders as Spark writes them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twophase.sinks.internal import naming


def test_escape_path_name_matches_spark() -> None:
    assert naming.escape_path_name("a b:c/d=e%f") == "a b%3Ac%2Fd%3De%25f"
    assert naming.escape_path_name("é{x}[y]^#?*'\"\\") == "é%7Bx}%5By%5D%5E%23%3F%2A%27%22%5C"
    assert naming.escape_path_name("tab\there\x7f") == "tab%09here%7F"
    for value in ["a b:c/d=e%f", "é{x}", "\x01"]:
        assert naming.unescape_path_name(naming.escape_path_name(value)) == value


@given(st.text(max_size=40))
def test_escape_round_trips(value: str) -> None:
    escaped = naming.escape_path_name(value)
    assert "/" not in escaped and "=" not in escaped
    assert naming.unescape_path_name(escaped) == value


def test_hive_partition_path() -> None:
    assert naming.hive_partition_path(["p", "q"], ["a/b", None]) == "p=a%2Fb/q=__HIVE_DEFAULT_PARTITION__"
    assert naming.hive_partition_path([], []) == ""
    with pytest.raises(ValueError):
        naming.hive_partition_path(["p"], [])
