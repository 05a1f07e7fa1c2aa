"""Two drivers of one job publishing the same checkpoint id (issue #43 item 2).

The conditional create (link / ``If-None-Match: *``) lets one ``_metadata`` win; the ``_final``
marker, written before it, is a separate object. A losing final publish leaves its ``_final``
beside the winner's plain ``_metadata``; a losing plain publish deletes the winner's ``_final``
(the stale-marker rule). Neither may make the checkpoint unloadable: the kind inside
``_metadata`` is authoritative.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.storage import layout
from twophase.coordinator.storage.local import LocalCheckpointStorage

from .conftest import MakeMeta

CK, FIN = CheckpointKind.CHECKPOINT, CheckpointKind.FINAL


@pytest.fixture
def storage(tmp_path: Path) -> LocalCheckpointStorage:
    return LocalCheckpointStorage(tmp_path / "checkpoints", "job-1")


def test_a_losing_final_publish_leaves_the_winners_plain_checkpoint_loadable(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    storage.publish(make_meta(1, CK))
    storage.publish(make_meta(2, CK))  # the stale driver won the race for id 2
    (storage.job_dir / "chk-2" / layout.FINAL_MARKER_NAME).touch()  # the new driver's final lost
    assert storage.latest() == make_meta(2, CK)
    assert [storage.load(r).kind for r in storage.list_checkpoints()] == [CK, CK]


def test_a_losing_plain_publish_leaves_the_winners_final_checkpoint_loadable(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    storage.publish(make_meta(2, FIN))
    (storage.job_dir / "chk-2" / layout.FINAL_MARKER_NAME).unlink()  # the stale driver's plain publish
    assert storage.latest() == make_meta(2, FIN)
