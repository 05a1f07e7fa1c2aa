"""One driver at a time (issue #43 item 2): driver epochs in checkpoint storage fence a stale driver.

The storage is the real local backend (its conditional create is a link that never overwrites);
the jobs drive the JSON-lines reference sink on the file system, read back by its reader.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from support.clock import ManualClock
from support.file_sink import JsonLinesFileSink, read_committed, staging_files
from support.harness import TwoPhaseHarness, batch
from support.memory_storage import InMemoryCheckpointStorage, MemoryStore

from twophase.coordinator.checkpoint.driver_fence import KEEP_CLAIMS, DriverFence
from twophase.coordinator.run.epoch import Epoch
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.storage.local import LocalCheckpointStorage
from twophase.sinks.errors import DriverFencedError

JOB = "job-1"


def storage_at(tmp_path: Path) -> LocalCheckpointStorage:
    return LocalCheckpointStorage(tmp_path / "checkpoints", JOB)


def test_the_newest_claim_fences_every_older_driver_for_good(tmp_path: Path) -> None:
    clock = ManualClock()
    old, new = DriverFence(JOB, storage_at(tmp_path), clock), DriverFence(JOB, storage_at(tmp_path), clock)
    assert old.claim() == 1
    old.check("publishing checkpoint 1")
    assert new.claim() == 2
    with pytest.raises(DriverFencedError) as fenced:
        old.check("publishing checkpoint 2")
    message = str(fenced.value)
    assert "\n" not in message
    assert "driver epoch 1 of job 'job-1' is fenced by a newer driver (epoch 2 on " in message
    assert message.endswith("stops before publishing checkpoint 2 and leaves the job to it")
    new.check("publishing checkpoint 2")
    with pytest.raises(DriverFencedError):  # a fenced driver's restore in the same process
        old.claim()


def test_drivers_claiming_at_once_get_distinct_epochs(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    rival = DriverFence(JOB, storage_at(tmp_path), ManualClock())
    listed = storage.driver_epochs

    def listing_that_races() -> list[int]:  # the rival claims between our listing and our create
        epochs = listed()
        if rival.epoch is None:
            rival.claim()
        return epochs

    storage.driver_epochs = listing_that_races  # type: ignore[method-assign]
    ours = DriverFence(JOB, storage, ManualClock())
    assert ours.claim() == 2 and rival.epoch == 1
    with pytest.raises(DriverFencedError):
        rival.check("committing checkpoint 1")


def test_old_claims_are_pruned_and_the_newest_always_stays(tmp_path: Path) -> None:
    fences = [DriverFence(JOB, storage_at(tmp_path), ManualClock()) for _ in range(KEEP_CLAIMS + 4)]
    for f in fences:
        f.claim()
    epochs = storage_at(tmp_path).driver_epochs()
    assert epochs[-1] == len(fences) and len(epochs) == KEEP_CLAIMS + 1
    with pytest.raises(DriverFencedError):  # its own claim is gone, the newer ones are not
        fences[0].check("restore")


def test_a_stale_driver_stops_and_the_new_one_commits_exactly_once(tmp_path: Path) -> None:
    out, store, clock = tmp_path / "out", MemoryStore(), ManualClock()

    def driver() -> TwoPhaseHarness:
        storage = InMemoryCheckpointStorage(JOB, store)
        return TwoPhaseHarness([JsonLinesFileSink("a", out)], job_id=JOB, storage=storage, clock=clock)

    old = driver()
    old.restore()
    old.write_epoch([[batch(["a1"])], [batch(["a2"])]])  # checkpoint 1, committed
    new = driver()  # a YARN application-master retry while the old one still runs
    assert new.restore().checkpoint_id == 1

    with pytest.raises(DriverFencedError) as fenced:
        old.write_epoch([[batch(["stale"])]])
    with pytest.raises(DriverFencedError):  # never restarted: the job is the new driver's
        old.runtime.failover(fenced.value)
    assert old.job_state() is JobState.FAILED
    assert [c.checkpoint_id for c in new.checkpoints()] == [1]

    new.write_epoch([[batch(["b1"])], [batch(["b2"])]])
    new.runtime.finish()
    assert sorted(r["key"] for r in read_committed(out, "a")) == ["a1", "a2", "b1", "b2"]
    assert staging_files(out, JOB, "a") == []


def test_a_fenced_driver_aborts_its_own_transactions_even_after_the_newer_one_finished(
    tmp_path: Path,
) -> None:
    """Found by a two-drivers chaos trial: the newer driver ran the job to its end while the older
    one still wrote its first epoch; fenced at its publish, the older one left its transactions to
    the newer driver's lingering cleanup, which had already run for the last time."""
    out, store, clock = tmp_path / "out", MemoryStore(), ManualClock()

    def driver() -> TwoPhaseHarness:
        sink = JsonLinesFileSink("a", out)
        return TwoPhaseHarness([sink], job_id=JOB, storage=InMemoryCheckpointStorage(JOB, store), clock=clock)

    old = driver()
    old.restore()
    new = driver()
    new.restore()
    new.write_epoch([[batch(["new"])]])
    new.runtime.finish()
    # the older driver's retried tasks write only now, after the newer one's last cleanup
    stale = old.begin_epoch(1)
    stale.acknowledge_all(old.write_partitions(stale.plan(), [[batch(["stale"])]]))
    with pytest.raises(DriverFencedError):
        old.complete(stale)
    assert [r["key"] for r in read_committed(out, "a")] == ["new"]
    assert staging_files(out, JOB, "a") == []


@pytest.mark.parametrize("newer_publishes", [False, True], ids=["pre-committed", "published"])
def test_a_stale_restore_sweep_leaves_a_newer_drivers_transactions_of_every_sink_alone(
    tmp_path: Path, newer_publishes: bool
) -> None:
    """A stale driver's lingering sweep at its restore covers every checkpoint id. Once sink "a"
    is clean, a newer driver claims the job, restores and writes checkpoint 2 to both sinks (and
    publishes it, or not yet); the stale driver, holding only what it listed before the claim,
    must not clean sink "b". Found by the two-drivers model (2026-12-04): the sweep checked the
    fence once, before sink "a" (#42 'first42'), and aborted the newer driver's transaction of
    "b" (LOST at its commit); a sweep that is not routine now checks before each sink."""
    out, store, clock = tmp_path / "out", MemoryStore(), ManualClock()

    def driver() -> TwoPhaseHarness:
        sinks = [JsonLinesFileSink("a", out), JsonLinesFileSink("b", out)]
        return TwoPhaseHarness(sinks, job_id=JOB, storage=InMemoryCheckpointStorage(JOB, store), clock=clock)

    old = driver()
    old.restore()
    old.write_epoch([[batch(["k1"])]])  # checkpoint 1, committed
    new = driver()
    stale_a = old.sink("a")
    assert isinstance(stale_a, JsonLinesFileSink)
    written: list[Epoch] = []

    def newer_driver_runs(_: object) -> None:  # after sink "a"'s cleanup, before sink "b"'s
        stale_a.after_abort_lingering = None
        new.restore()
        epoch = new.begin_epoch(1)
        epoch.acknowledge_all(new.write_partitions(epoch.plan(), [[batch(["k2"])]]))
        if newer_publishes:
            new.complete(epoch, notify=False)
        written.append(epoch)

    stale_a.after_abort_lingering = newer_driver_runs
    # the restart's restore sweeps "a", then "b" (a check per sink fences it before "b")
    with contextlib.suppress(DriverFencedError):
        old.runtime.failover(RuntimeError("a task failed"))
    assert written, "the newer driver never ran inside the stale driver's sweep"
    [epoch] = written
    for sink in ("a", "b"):  # the newer driver's transactions of checkpoint 2 are still there
        assert [f for f in staging_files(out, JOB, sink) if f.startswith("c2-")], sink

    if newer_publishes:
        new.notify(epoch.checkpoint_id)
    else:
        new.complete(epoch)
    with pytest.raises(DriverFencedError):  # whatever its sweep did, the job is the newer driver's
        old.runtime.failover(RuntimeError("another task failed"))
    new.runtime.finish()
    for sink in ("a", "b"):
        assert sorted(r["key"] for r in read_committed(out, sink)) == ["k1", "k2"], sink
        assert staging_files(out, JOB, sink) == []
