"""The columnar metadata path writes the very bytes the per-record path wrote (issue #42).

The coordinator's metadata now carries each sink's committables as Arrow columns taken from its
ledger blocks (:class:`~twophase.coordinator.state.metadata.CommittableRows`), and the committable file
is written from them without a Python object per row. The checkpoint format must not change: for
one scenario (two sinks; a block per intake; a subtask acknowledged one by one, so an exception
held by its lifecycle; a subtask with in-progress state; a checkpoint whose transactions stay
pending into the next one), the manifest and every committable file are byte for byte

- what the same records give as a tuple of :class:`CommittableRecord` (the path before), and
- what land ``caee5e1`` (before this change) wrote for the same scenario: the SHA-256 digests
  below were printed by this module's ``__main__`` run against a ``git archive`` export of
  ``caee5e1`` imported ahead through ``PYTHONPATH`` (2026-12-03).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import replace
from typing import Any

from support.clock import ManualClock
from support.fakes import FakeExternalSystem, FakeSink
from support.harness import batch
from support.memory_storage import InMemoryCheckpointStorage

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.state.acknowledgement import Acknowledgement, acknowledgement_table
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import committable_files
from twophase.sinks.context import WriterContext

JOB = "bytes_job"
RUN = "0badc0de"

LAND_CAEE5E1 = {
    "1/manifest": "71d2c399825fc5cea5da7e517d476c064c0c822111c61ec84b4d1c44e4555594",
    "1/committables-0-0badc0de-0.arrow": "12f87bb3a26168738d3a233f881fa33084a64d7244c70fd8f4cf7e320ecc47a7",
    "1/committables-1-0badc0de-0.arrow": "694d4439333b47d465f319a64bda8ab93f8d412406d5000474bafa17a762947f",
    "2/manifest": "e6976700f5e1f9b388df7a559effaef988b36daa9cca82d61f57af530abc3be1",
    "2/committables-0-0badc0de-0.arrow": "e6f4de8a0ee9e3acf9a86ca9d7a787d4c66b91350b3215d69b818782f56aa525",
    "2/committables-1-0badc0de-0.arrow": "18473d3bde01191514f0ad676051bfabaa7c4979fcf4c7cb99f1875f4fb1d70f",
}
"""SHA-256 of what land ``caee5e1`` encoded for :func:`scenario` (see the module docstring)."""


def _ack(
    sink: FakeSink, checkpoint_id: int, partition: int, state: dict[str, Any] | None = None
) -> Acknowledgement:
    txn = sink.begin_transaction(WriterContext(JOB, sink.name, checkpoint_id, partition, 0, 4))
    sink.write(txn, batch([f"r{checkpoint_id}-{partition}"]))
    return Acknowledgement.of(sink, partition, 0, sink.pre_commit(txn), in_progress=state)


def scenario() -> list[CheckpointMetadata]:
    """The metadata checkpoints 1 and 2 publish (checkpoint 1 never notified, so checkpoint 2
    holds its transactions too; in checkpoint 1 sink b's rows are one block, a slice of the
    intake's sorted table)."""
    system = FakeExternalSystem()
    sinks = [FakeSink("a", system), FakeSink("b", system)]
    clock = ManualClock()
    committer = CommitterOperator(JOB, {s.name: s for s in sinks}, clock=clock, sleep=clock.sleep)
    coord = CheckpointCoordinator(
        JOB, sinks, InMemoryCheckpointStorage(JOB), committer, CheckpointConfig(), clock=clock
    )
    parts = {"a": [0, 1, 2, 3], "b": [0, 1, 2]}
    out: list[CheckpointMetadata] = []
    for cid in (1, 2):
        coord.trigger(CheckpointKind.CHECKPOINT, parts, source_position={"batch_id": cid})
        acks = [
            _ack(s, cid, p, {"open": f"{s.name}{p}"} if (s.name, p) == ("b", 1) else None)
            for s in sinks
            for p in parts[s.name]
            if (s.name, p) != ("a", 2)
        ]
        coord.acknowledge(cid, _ack(sinks[0], cid, 2))  # one by one: an exception from now on
        clock.advance(5)
        coord.acknowledge_table(cid, acknowledgement_table(list(reversed(acks))))
        out.append(coord.build_metadata(coord.pending(cid))[0])
        if cid == 1:
            coord.complete(cid)
    return out


def digests(metadata: CheckpointMetadata) -> dict[str, str]:
    """``<checkpoint id>/<name>`` → the SHA-256 of the manifest's and each file's bytes."""
    encoded = committable_files.encode(metadata, RUN, 0)
    c = metadata.checkpoint_id
    out = {f"{c}/manifest": hashlib.sha256(encoded.manifest).hexdigest()}
    out.update({f"{c}/{name}": hashlib.sha256(data).hexdigest() for name, data in encoded.files})
    return out


def as_records(metadata: CheckpointMetadata) -> CheckpointMetadata:
    """``metadata`` with each sink's committables as a tuple of records (the path before)."""
    sinks = {n: replace(s, committables=tuple(s.committables)) for n, s in metadata.sinks.items()}
    return replace(metadata, sinks=sinks)


def test_the_columns_write_the_bytes_the_records_wrote() -> None:
    one, two = scenario()
    assert [len(s.committables) for s in one.sinks.values()] == [4, 3]
    assert [len(s.committables) for s in two.sinks.values()] == [8, 6]
    for metadata in (one, two):
        assert digests(metadata) == digests(as_records(metadata))


def test_a_checkpoint_counts_its_committables_as_columns_and_as_records() -> None:
    # what the completed checkpoint's log line and metrics report (read from the columns' tables)
    for metadata, n in zip(scenario(), (4 + 3, 8 + 6), strict=True):
        assert metadata.committable_count() == n
        assert as_records(metadata).committable_count() == n


def test_the_bytes_are_land_caee5e1s() -> None:
    assert {k: v for m in scenario() for k, v in digests(m).items()} == LAND_CAEE5E1


if __name__ == "__main__":  # print the digests (run against the release to compare with)
    for metadata in scenario():
        for name, digest in digests(metadata).items():
            sys.stdout.write(f'    "{name}": "{digest}",\n')
