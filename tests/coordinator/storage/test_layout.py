"""The checkpoint-storage naming scheme (coordinator/storage/layout.py) and retention planning."""

from __future__ import annotations

import pytest

from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.storage import layout
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.common import plan_retention, sort_refs
from twophase.sinks.errors import ConfigError

CK, FIN, SP = CheckpointKind.CHECKPOINT, CheckpointKind.FINAL, CheckpointKind.SAVEPOINT


@pytest.mark.parametrize("job_id", ["job-1", "orders_v2", "Flights.2013", "a", "x" * 200, "job:with:colons"])
def test_safe_job_ids_accepted(job_id: str) -> None:
    assert layout.validate_job_id(job_id) == job_id


@pytest.mark.parametrize(
    ("job_id", "why"),
    [
        ("", "non-empty"),
        ("a/b", "path separator"),
        ("..", r"'\.\.'"),
        ("a..b", r"'\.\.'"),
        (".", r"'\.\.' or is '\.'"),
        ("a\\b", "path separator"),
        ("nul\x00byte", "control character"),
        ("tab\there", "control character"),
        (" padded", "whitespace"),
        ("x" * 201, "longer than 200"),
    ],
)
def test_unsafe_job_ids_refused(job_id: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        layout.validate_job_id(job_id)


def test_directory_names_and_parsing() -> None:
    assert layout.relative_dir(7, CK) == "chk-7"
    assert layout.relative_dir(7, FIN) == "chk-7"
    assert layout.relative_dir(12, SP) == "savepoints/sp-12"
    assert layout.parse_checkpoint_dir("chk-10") == 10
    assert layout.parse_savepoint_dir("sp-3") == 3
    for junk in ("chk-", "chk-0", "chk-07", "chk-1a", "chk-1.tmp", "sp-1", "_metadata", "chk--1"):
        assert layout.parse_checkpoint_dir(junk) is None, junk
    assert layout.parse_savepoint_dir("chk-3") is None
    assert layout.is_temp_name("_metadata.tmp-0a1b")
    assert not layout.is_temp_name("_metadata")
    with pytest.raises(ValueError, match=">= 1"):
        layout.checkpoint_dir_name(0)


def _ref(cid: int, kind: CheckpointKind) -> CheckpointRef:
    return CheckpointRef(cid, kind, f"loc-{cid}")


def test_sort_is_numeric_and_tolerates_equal_ids() -> None:
    refs = [_ref(10, CK), _ref(9, CK), _ref(100, SP), _ref(2, FIN)]
    assert [r.checkpoint_id for r in sort_refs(refs)] == [2, 9, 10, 100]


def test_retention_keeps_newest_non_savepoints() -> None:
    refs = [_ref(1, CK), _ref(2, SP), _ref(3, CK), _ref(4, FIN), _ref(5, CK), _ref(6, SP)]
    assert [r.checkpoint_id for r in plan_retention(refs, 2)] == [1, 3]
    assert [r.checkpoint_id for r in plan_retention(refs, 1)] == [1, 3, 4]
    assert plan_retention(refs, 3) == [_ref(1, CK)]
    assert plan_retention(refs, 10) == []
    assert plan_retention([_ref(1, SP), _ref(2, SP)], 1) == []


def test_final_checkpoint_survives_until_a_later_checkpoint_exists() -> None:
    assert plan_retention([_ref(1, CK), _ref(2, FIN), _ref(3, SP)], 1) == [_ref(1, CK)]


@pytest.mark.parametrize("keep", [0, -1])
def test_retention_keep_must_be_positive(keep: int) -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        plan_retention([_ref(1, CK)], keep)
