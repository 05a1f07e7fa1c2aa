"""S3 files that span checkpoints (JSON lines) through the production runtime, on the S3 model:
an aborted epoch never destroys what the previous durable checkpoint holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from support.harness import TwoPhaseHarness
from support.s3_model import S3Model

from twophase.connectors.s3 import S3Sink
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.sinks.errors import TransactionLostError

MakeSink = Callable[..., S3Sink]


def lines(ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64())})


def committed_ids(fake: S3Model, prefix: str = "data/out") -> list[int]:
    out: list[int] = []
    for key in fake.object_keys():
        if key.startswith(prefix + "/part-") and key.endswith(".jsonl"):
            out.extend(json.loads(line)["id"] for line in fake.objects[("bucket", key)].decode().splitlines())
    return sorted(out)


def pos(n: int) -> dict[str, object]:
    return {"engine": "spark", "query_id": "q", "batch_id": n}


def fail_publish_of(h: TwoPhaseHarness, checkpoint_id: int) -> None:
    def hook(meta: CheckpointMetadata) -> None:
        if meta.checkpoint_id == checkpoint_id:
            raise OSError("checkpoint storage refused the write")

    h.storage.publish_hook = hook


@pytest.mark.parametrize("fail", ["publish", "final_publish"])
def test_an_aborted_epoch_that_rolled_a_resumed_file_keeps_the_durable_state(
    fake: S3Model, make_sink: MakeSink, fail: str
) -> None:
    """#14 scenario 1: a JSON-lines file stays open across checkpoints under one upload id and one
    tail folder. When an epoch rolls such a resumed file (here: the parallelism dropped, so the
    driver finishes partition 1's file) and that epoch is aborted (its checkpoint publish fails),
    the abort must not abort the upload or delete the tails that durable checkpoint 1 holds."""
    sink = make_sink(format="jsonl")  # the default rolling policy keeps small files open
    h = TwoPhaseHarness([sink], job_id="job")
    h.restore()
    h.write_epoch([[lines([1, 2])], [lines([3, 4])]], source_position=pos(1))  # files stay open, tails parked
    assert committed_ids(fake) == []
    if fail == "publish":
        fail_publish_of(h, 2)
        with pytest.raises(Exception, match="refused the write"):
            h.write_epoch([[lines([5])]], source_position=pos(2))  # 1 partition: partition 1 handed over
    else:
        fail_publish_of(h, 2)
        with pytest.raises(Exception, match="refused the write"):
            h.runtime.finish()  # the final checkpoint finishes both files on the driver
    h.storage.publish_hook = None
    h.restart_process()  # restore from checkpoint 1: its in-progress files resume
    h.write_epoch([[lines([5])]], source_position=pos(2))
    h.runtime.finish()
    assert committed_ids(fake) == [1, 2, 3, 4, 5]
    assert fake.uploads == {}
    assert [k for k in fake.object_keys() if "/tails/" in k] == []


def test_s3_model_keeps_s3_multipart_rules(fake: Any) -> None:
    """The model drops parts a completion does not list, and allows gaps in part numbers."""
    upload = fake.create_multipart_upload(Bucket="bucket", Key="k")["UploadId"]
    big = b"x" * (5 * 1024 * 1024)
    e1 = fake.upload_part(Bucket="bucket", Key="k", UploadId=upload, PartNumber=1, Body=big)["ETag"]
    fake.upload_part(Bucket="bucket", Key="k", UploadId=upload, PartNumber=2, Body=b"unlisted")
    e7 = fake.upload_part(Bucket="bucket", Key="k", UploadId=upload, PartNumber=7, Body=b"tail")["ETag"]
    parts = [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 7, "ETag": e7}]
    fake.complete_multipart_upload(
        Bucket="bucket", Key="k", UploadId=upload, MultipartUpload={"Parts": parts}
    )
    assert fake.objects[("bucket", "k")] == big + b"tail"


def test_a_zombie_attempt_overwriting_a_resumed_files_parts_is_caught_before_persist(
    fake: S3Model, make_sink: MakeSink
) -> None:
    """#14 scenario 8 for files that span checkpoints: a zombie attempt resumes the same upload
    and uploads the same part numbers with other bytes; persisting the acknowledged attempt's
    parts would make the completion fail (InvalidPart): the file's durable data lost."""
    from twophase.coordinator.run.restart import RestartStrategy
    from twophase.coordinator.run.runtime_config import RuntimeConfig

    big = 6 * 1024 * 1024 // 8  # ids of ~8 bytes of JSON each: a bit over one 5 MiB part
    sink = make_sink(format="jsonl", part_size_bytes=5 * 1024 * 1024)
    h = TwoPhaseHarness([sink], job_id="job", config=RuntimeConfig(restart=RestartStrategy.fixed_delay(3, 0)))
    h.restore()
    h.write_epoch([[lines(list(range(big)))]], source_position=pos(1))  # part 1 + a tail, in progress
    epoch = h.begin_epoch(1, pos(2))
    second = list(range(big, 2 * big))
    h.run_subtask(epoch, "out", 0, [lines(second)])  # acknowledged: resumes, uploads part 2
    zombie = list(range(10 * big, 11 * big))
    h.run_subtask(epoch, "out", 0, [lines(zombie)], attempt=1, acknowledge=False)  # part 2 again
    with pytest.raises(Exception, match="overwritten by another attempt") as info:
        h.complete(epoch)
    h.runtime.failover(info.value)
    h.write_epoch([[lines(second)]], source_position=pos(2))  # the engine retries the batch
    h.runtime.finish()
    assert committed_ids(fake) == list(range(2 * big))
    assert fake.uploads == {}


def test_a_rewind_to_a_savepoint_whose_in_progress_file_a_later_checkpoint_completed(
    fake: S3Model, make_sink: MakeSink
) -> None:
    """Savepoint A holds a JSON-lines file in progress; the job goes on, the file completes at
    its end; the job is then rewound to A. The file cannot be resumed (its upload and tail are
    gone) but is visible: the rewound job opens a new file, and batch 2 is written again, as
    every sink does after a rewind. Before the fix the resume failed on the missing tail at every
    restart."""
    h = TwoPhaseHarness([make_sink(format="jsonl")], job_id="job")
    h.restore()
    h.write_epoch([[lines([1])]], source_position=pos(1))
    a = h.runtime.stop_with_savepoint(drain=False)
    h.restart_process(savepoint_location=a.location)
    h.write_epoch([[lines([2])]], source_position=pos(2))
    h.runtime.finish()
    assert committed_ids(fake) == [1, 2]
    h.restart_process(savepoint_location=a.location)
    h.write_epoch([[lines([2])]], source_position=pos(2))
    h.runtime.finish()
    assert committed_ids(fake) == [1, 2, 2]
    assert fake.uploads == {}
    assert [k for k in fake.object_keys() if "/tails/" in k] == []


def test_an_in_progress_file_neither_resumable_nor_complete_is_lost_by_name(
    fake: S3Model, make_sink: MakeSink
) -> None:
    h = TwoPhaseHarness([make_sink(format="jsonl")], job_id="job")
    h.restore()
    h.write_epoch([[lines([1])]], source_position=pos(1))
    tails = [{"Key": k} for k in fake.object_keys() if "/tails/" in k]
    assert tails
    fake.delete_objects(Bucket="bucket", Delete={"Objects": tails})
    with pytest.raises(TransactionLostError, match=r"in-progress file s3://bucket/data/out/part-.*1 records"):
        h.write_epoch([[lines([2])]], source_position=pos(2))
