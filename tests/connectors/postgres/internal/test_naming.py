"""Gids of the PostgreSQL sink: under PostgreSQL's 200-byte limit, parseable, unique to a job and sink."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twophase.connectors.postgres.internal import naming


def test_gid_parts_round_trip() -> None:
    gid = naming.make_gid("orders", "pg", 7, 3, 1, "0a1b2c3d")
    assert gid.startswith(naming.gid_prefix("orders", "pg"))
    assert gid.endswith(".7.3.1.0a1b2c3d")
    parts = naming.parse_gid(gid)
    assert parts == naming.GidParts(naming.gid_prefix("orders", "pg"), 7, 3, 1, "0a1b2c3d")
    assert naming.parse_gid(gid, naming.gid_prefix("orders", "pg")) == parts


@given(
    job=st.text(min_size=1, max_size=300),
    sink=st.text(min_size=1, max_size=300),
    checkpoint=st.integers(0, 2**62),
    partition=st.integers(0, 2**31 - 1),
    attempt=st.integers(0, 2**31 - 1),
)
def test_any_names_give_a_short_ascii_gid_without_quotes(
    job: str, sink: str, checkpoint: int, partition: int, attempt: int
) -> None:
    gid = naming.make_gid(job, sink, checkpoint, partition, attempt, naming.new_nonce())
    assert len(gid.encode()) <= naming.GID_MAX_BYTES < 200
    assert gid.isascii() and "'" not in gid and "\\" not in gid
    parts = naming.parse_gid(gid, naming.gid_prefix(job, sink))
    assert parts is not None
    assert (parts.checkpoint_id, parts.partition, parts.attempt) == (checkpoint, partition, attempt)


def test_prefixes_differ_where_cut_or_sanitized_names_agree() -> None:
    long_a, long_b = "j" * 50 + "a", "j" * 50 + "b"
    assert naming.gid_prefix(long_a, "s") != naming.gid_prefix(long_b, "s")
    assert naming.gid_prefix("a b", "s") != naming.gid_prefix("a_b", "s")
    assert naming.gid_prefix("job", "s1") != naming.gid_prefix("job", "s2")
    # one job's gids are not another's, even when one prefix's readable part starts the other's
    gid = naming.make_gid("job-1", "pg", 1, 0, 0, "00000000")
    assert naming.parse_gid(gid, naming.gid_prefix("job-10", "pg")) is None
    assert not gid.startswith(naming.gid_prefix("job-10", "pg"))


@pytest.mark.parametrize(
    "gid",
    [
        "",
        "twophase",
        "other-tool-gid",
        "twophase.j.s.0123456789abcdef.1.2.3",
        "twophase.j.s.XYZ.1.2.3.0a1b2c3d",
    ],
)
def test_other_gids_are_not_ours(gid: str) -> None:
    assert naming.parse_gid(gid) is None


def test_bad_parts_are_refused() -> None:
    with pytest.raises(ValueError):
        naming.make_gid("j", "s", -1, 0, 0, "00000000")
    with pytest.raises(ValueError):
        naming.make_gid("j", "s", 1, 0, 0, "not-hex!")
    assert len(naming.new_nonce()) == naming.NONCE_HEX_DIGITS
