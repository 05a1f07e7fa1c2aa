"""The S3 sink's protocol against an in-memory fake S3: parts, rolling, spanning files, commit
outcomes, lingering cleanup and transitions. Real S3 behaviour is tested against MinIO."""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from twophase.connectors.objectstore.internal.outcomes import combine_outcomes
from twophase.connectors.s3 import PendingFile, RollingPolicy, S3Committable, S3Sink, S3SinkConfig
from twophase.connectors.s3.config import MIN_PART_BYTES, MiB
from twophase.connectors.s3.internal.committable import COMMITTABLE_CODEC, IN_PROGRESS_CODEC, UploadedPart
from twophase.connectors.s3.internal.naming import job_token, parse_data_key, tails_root
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import (
    CommittableDecodeError,
    ConfigError,
    IllegalTransitionError,
    LingeringCleanupError,
    S3AccessDeniedError,
    SchemaError,
    TransactionLostError,
)
from twophase.sinks.outcome import CommitOutcome
from twophase.sinks.s3_options import S3Options

MakeSink = Callable[..., S3Sink]
MakeError = Callable[[str, int, str], ClientError]
NEVER_ROLL = RollingPolicy(max_file_bytes=10**12, rollover_interval_ms=None, inactivity_interval_ms=None)


def ctx(
    checkpoint: int, partition: int = 0, attempt: int = 0, state: JsonObject | None = None
) -> WriterContext:
    return WriterContext("job-1", "out", checkpoint, partition, attempt, 2, restored_state=state)


def lines(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"v": [json.dumps({"id": i}) for i in range(start, start + n)]})


def ids_in(data: bytes) -> list[int]:
    return [json.loads(line)["id"] for line in data.decode().splitlines()]


def test_parquet_files_become_visible_only_on_commit(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(partition_by=("day",))
    table = pa.table({"id": list(range(10)), "day": [i % 2 for i in range(10)]})
    sink.validate(table.schema)
    txn = sink.begin_transaction(ctx(3, partition=1))
    sink.write(txn, table.to_batches()[0])
    committable = sink.pre_commit(txn)
    assert sink.snapshot_in_progress(txn) is None
    assert committable is not None and len(committable.files) == 2
    assert fake.object_keys() == []  # nothing visible before commit
    assert COMMITTABLE_CODEC.loads(COMMITTABLE_CODEC.dumps(committable)) == committable

    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert sink.commit(committable) is CommitOutcome.ALREADY_COMMITTED
    assert fake.uploads == {}
    got = {}
    for key in fake.object_keys():
        parsed = parse_data_key("data/out", key)
        assert parsed is not None
        assert (parsed.partition, parsed.checkpoint_id, parsed.token) == (1, 3, job_token("job-1", "out"))
        got[parsed.partition_path] = pq.read_table(io.BytesIO(fake.objects[("bucket", key)]))[
            "id"
        ].to_pylist()
    assert got == {"day=0": [0, 2, 4, 6, 8], "day=1": [1, 3, 5, 7, 9]}


def test_empty_transaction_yields_no_committable_and_no_upload(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl")
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, pa.record_batch({"v": pa.array([], pa.string())}))
    assert sink.pre_commit(txn) is None and sink.snapshot_in_progress(txn) is None
    assert "create_multipart_upload" not in fake.calls


def test_parts_are_part_size_except_the_last(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(
        format="jsonl", json_column="v", part_size_bytes=5 * MiB, rolling=RollingPolicy(on_checkpoint=True)
    )
    txn = sink.begin_transaction(ctx(1))
    big = "x" * (1024 * 1024)
    rows = [json.dumps({"id": i, "pad": big}) for i in range(12)]  # ~12 MiB
    for i in range(0, 12, 3):
        sink.write(txn, pa.record_batch({"v": rows[i : i + 3]}))
    committable = sink.pre_commit(txn)
    assert committable is not None
    (f,) = committable.files
    sizes = [p.size for p in f.parts]
    assert sizes[:-1] == [5 * MiB, 5 * MiB] and 0 < sizes[-1] < 5 * MiB
    assert sum(sizes) == f.byte_count and f.record_count == 12
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert ids_in(fake.objects[("bucket", f.key)]) == list(range(12))


def test_parquet_flushed_at_close_is_still_split_into_parts(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(part_size_bytes=5 * MiB, parquet_compression="none", parquet_row_group_bytes=10**9)
    txn = sink.begin_transaction(ctx(1))
    big = pa.array(range(1_600_000), pa.int64())  # ~12 MiB uncompressed, one row group at close
    sink.write(txn, pa.record_batch({"id": big}))
    committable = sink.pre_commit(txn)
    assert committable is not None
    (f,) = committable.files
    assert [p.size for p in f.parts][:2] == [5 * MiB, 5 * MiB] and len(f.parts) == 3
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert pq.read_table(io.BytesIO(fake.objects[("bucket", f.key)]))["id"].to_pylist() == big.to_pylist()


def test_sink_pickles_without_clients_and_keeps_its_config() -> None:
    keys = S3Options(access_key_id="a", secret_access_key="s")
    sink = S3Sink("out", S3SinkConfig(bucket="bucket", prefix="p", storage_options=keys))
    clone = pickle.loads(pickle.dumps(sink))
    assert clone.name == "out" and clone.config == sink.config
    assert "'s'" not in repr(clone)


def test_size_rolling_within_an_epoch_makes_several_files(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl", rolling=RollingPolicy(max_file_bytes=20, inactivity_interval_ms=None))
    txn = sink.begin_transaction(ctx(1))
    for start in range(0, 12, 3):
        sink.write(txn, pa.record_batch({"id": list(range(start, start + 3))}))
    committable = sink.pre_commit(txn)
    state = sink.snapshot_in_progress(txn)
    assert committable is not None and len(committable.files) == 4 and state is None  # 3 rows > 20 bytes
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert sorted(i for k in fake.object_keys() for i in ids_in(fake.objects[("bucket", k)])) == list(
        range(12)
    )


def run_epoch(
    sink: S3Sink, checkpoint: int, batch: pa.RecordBatch | None, state: JsonObject | None
) -> tuple[S3Committable | None, JsonObject | None]:
    txn = sink.begin_transaction(ctx(checkpoint, state=state))
    if batch is not None:
        sink.write(txn, batch)
    committable = sink.pre_commit(txn)
    return committable, sink.snapshot_in_progress(txn)


def test_json_lines_file_spans_checkpoints_through_tails_and_finishes(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl", json_column="v", rolling=NEVER_ROLL)
    committable, state = run_epoch(sink, 1, lines(0, 3), None)
    assert committable is None and state is not None
    (f1,) = IN_PROGRESS_CODEC.from_json(state).files
    assert (
        f1.parts == ()
        and f1.tail_key is not None
        and f1.tail_key.startswith(tails_root("data/out", job_token("job-1", "out")))
    )
    assert fake.object_keys() == [f1.tail_key]  # only the hidden tail exists

    committable, state = run_epoch(sink, 2, lines(3, 4), state)
    assert committable is None and state is not None
    (f2,) = IN_PROGRESS_CODEC.from_json(state).files
    assert (f2.key, f2.upload_id) == (f1.key, f1.upload_id)  # the same file continues
    assert f2.tail_key != f1.tail_key and f2.record_count == 7
    assert ("bucket", f1.tail_key) in fake.objects  # older checkpoints keep their tail

    txn = sink.begin_transaction(ctx(3, state=state))
    sink.write(txn, lines(7, 2))
    final = sink.finish(txn)
    assert final is not None and [f.key for f in final.files] == [f1.key]
    assert final.files[0].tail_prefix is not None and final.files[0].record_count == 9
    assert sink.commit(final) is CommitOutcome.COMMITTED
    assert fake.object_keys() == [f1.key]  # tails deleted after commit
    assert ids_in(fake.objects[("bucket", f1.key)]) == list(range(9))
    assert fake.uploads == {}


def test_big_rest_at_a_checkpoint_is_uploaded_as_a_part_not_a_tail(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl", json_column="v", part_size_bytes=8 * MiB, rolling=NEVER_ROLL)
    pad = "y" * MiB
    batch = pa.record_batch({"v": [json.dumps({"id": i, "p": pad}) for i in range(6)]})  # ~6 MiB
    _, state = run_epoch(sink, 1, batch, None)
    assert state is not None
    (f,) = IN_PROGRESS_CODEC.from_json(state).files
    assert f.tail_key is None and len(f.parts) == 1 and f.parts[0].size >= MIN_PART_BYTES
    txn = sink.begin_transaction(ctx(2, state=state))
    sink.write(txn, pa.record_batch({"v": [json.dumps({"id": 6})]}))
    final = sink.finish(txn)
    assert final is not None and sink.commit(final) is CommitOutcome.COMMITTED
    assert ids_in(fake.objects[("bucket", f.key)]) == list(range(7))


def test_untouched_restored_file_is_carried_over_without_s3_calls(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl", partition_by=("day",), rolling=NEVER_ROLL)
    _, state = run_epoch(sink, 1, pa.record_batch({"id": [1, 2], "day": [1, 2]}), None)
    assert state is not None
    fake.calls.clear()
    committable, state2 = run_epoch(sink, 2, pa.record_batch({"id": [3], "day": [2]}), state)
    assert committable is None and state2 is not None
    by_path = {f.partition_path: f for f in IN_PROGRESS_CODEC.from_json(state2).files}
    old = {f.partition_path: f for f in IN_PROGRESS_CODEC.from_json(state).files}
    assert by_path["day=1"] == old["day=1"]  # untouched: same tail, same upload
    assert by_path["day=2"].record_count == 2 and by_path["day=2"].tail_key != old["day=2"].tail_key
    assert fake.calls.count("get_object") == 1  # only day=2's tail was read back


def test_inactive_restored_file_rolls_at_the_checkpoint(fake: Any, make_sink: MakeSink, clock: Any) -> None:
    policy = RollingPolicy(max_file_bytes=10**12, rollover_interval_ms=None, inactivity_interval_ms=60_000)
    sink = make_sink(format="csv", rolling=policy)
    _, state = run_epoch(sink, 1, pa.record_batch({"id": [1, 2]}), None)
    clock.now_ms += 60_000
    committable, state2 = run_epoch(sink, 2, None, state)
    assert state2 is None and committable is not None
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert fake.objects[("bucket", committable.files[0].key)] == b'"id"\n1\n2\n'


def test_max_open_files_rolls_the_least_recently_written(fake: Any, make_sink: MakeSink, clock: Any) -> None:
    sink = make_sink(format="jsonl", partition_by=("k",), max_open_files=2, rolling=NEVER_ROLL)
    txn = sink.begin_transaction(ctx(1))
    for i, k in enumerate(["a", "b", "a", "c"]):
        clock.now_ms += 1
        sink.write(txn, pa.record_batch({"id": [i], "k": [k]}))
    assert len(txn.rolled) == 1 and "k=b" in txn.rolled[0].key
    final = sink.finish(txn)
    assert final is not None and len(final.files) == 3
    assert sink.commit(final) is CommitOutcome.COMMITTED
    assert sorted(i for k in fake.object_keys() for i in ids_in(fake.objects[("bucket", k)])) == [0, 1, 2, 3]


def test_abort_open_aborts_only_uploads_it_created(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl", partition_by=("day",), rolling=NEVER_ROLL)
    _, state = run_epoch(sink, 1, pa.record_batch({"id": [1], "day": [1]}), None)
    (held,) = IN_PROGRESS_CODEC.from_json(state).files  # type: ignore[arg-type]
    txn = sink.begin_transaction(ctx(2, state=state))
    sink.write(txn, pa.record_batch({"id": [2, 3], "day": [1, 2]}))  # resumes day=1, opens day=2
    assert len(fake.uploads) == 2
    sink.abort_open(txn)
    sink.abort_open(txn)  # idempotent
    assert list(fake.uploads) == [held.upload_id]  # the checkpoint's upload survives
    assert ("bucket", held.tail_key) in fake.objects
    # a retry of epoch 2 resumes it again
    _, state2 = run_epoch(sink, 2, pa.record_batch({"id": [2], "day": [1]}), state)
    txn = sink.begin_transaction(ctx(3, state=state2))
    final = sink.finish(txn)
    assert final is not None and sink.commit(final) is CommitOutcome.COMMITTED
    assert ids_in(fake.objects[("bucket", held.key)]) == [1, 2]


def test_abort_open_after_snapshot_deletes_the_tails_it_wrote(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl", rolling=NEVER_ROLL)
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, lines(0, 1))
    sink.pre_commit(txn)
    sink.snapshot_in_progress(txn)
    assert len(fake.object_keys()) == 1
    sink.abort_open(txn)
    assert fake.object_keys() == [] and fake.uploads == {}


def test_illegal_transitions_raise(make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl")
    txn = sink.begin_transaction(ctx(1))
    with pytest.raises(IllegalTransitionError):
        sink.snapshot_in_progress(txn)  # before pre_commit
    sink.pre_commit(txn)
    with pytest.raises(IllegalTransitionError):
        sink.write(txn, lines(0, 1))
    with pytest.raises(IllegalTransitionError):
        sink.pre_commit(txn)
    with pytest.raises(IllegalTransitionError):
        sink.finish(txn)
    sink.snapshot_in_progress(txn)
    with pytest.raises(IllegalTransitionError):
        sink.snapshot_in_progress(txn)
    finished = sink.begin_transaction(ctx(1))
    sink.finish(finished)
    with pytest.raises(IllegalTransitionError):
        sink.write(finished, lines(0, 1))


def test_restored_state_of_another_sink_is_refused(make_sink: MakeSink) -> None:
    other = make_sink("other", format="jsonl", rolling=NEVER_ROLL)
    txn = other.begin_transaction(WriterContext("job-1", "other", 1, 0, 0, 1))
    other.write(txn, lines(0, 1))
    other.pre_commit(txn)
    state = other.snapshot_in_progress(txn)
    with pytest.raises(ConfigError, match="does not belong"):
        make_sink(format="jsonl").begin_transaction(ctx(2, state=state))
    with pytest.raises(CommittableDecodeError):
        make_sink(format="jsonl").begin_transaction(ctx(2, state={"kind": "kafka.transaction", "version": 1}))
    with pytest.raises(ConfigError, match="cannot resume"):
        make_sink("other", format="parquet").begin_transaction(
            WriterContext("job-1", "other", 2, 0, 0, 1, state)
        )
    with pytest.raises(ConfigError, match="does not belong"):
        make_sink("other", format="csv").begin_transaction(WriterContext("job-1", "other", 2, 0, 0, 1, state))


def committed_file(sink: S3Sink, n: int = 3) -> S3Committable:
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, pa.record_batch({"id": list(range(n))}))
    committable = sink.pre_commit(txn)
    assert committable is not None
    return committable


def test_recover_after_commit_whose_answer_was_lost(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink()
    committable = committed_file(sink)
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert sink.recover_and_commit(committable) is CommitOutcome.ALREADY_COMMITTED


def test_upload_gone_and_object_missing_or_different_is_lost(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink()
    committable = committed_file(sink)
    (f,) = committable.files
    fake.uploads.clear()  # e.g. expired by a bucket lifecycle rule
    assert sink.recover_and_commit(committable) is CommitOutcome.LOST
    fake.objects[("bucket", f.key)] = b"not the same size"
    assert sink.recover_and_commit(committable) is CommitOutcome.LOST


def test_changed_parts_are_lost(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink()
    committable = committed_file(sink)
    (f,) = committable.files
    fake.upload_part(
        Bucket="bucket",
        Key=f.key,
        UploadId=f.upload_id,
        PartNumber=1,
        Body=b"overwritten",
        ChecksumAlgorithm="CRC32",
    )
    assert sink.commit(committable) is CommitOutcome.LOST


def test_transient_errors_are_retried_with_tenacity(
    fake: Any, make_sink: MakeSink, make_error: MakeError
) -> None:
    sink = make_sink(max_attempts=3)
    committable = committed_file(sink)
    fake.fail(
        "complete_multipart_upload", make_error("SlowDown", 503, "c"), make_error("InternalError", 200, "c")
    )
    fake.calls.clear()
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert fake.calls.count("complete_multipart_upload") == 3


def test_persisting_transient_errors_give_retry_then_commit_later(
    fake: Any, make_sink: MakeSink, make_error: MakeError
) -> None:
    sink = make_sink(max_attempts=2)
    committable = committed_file(sink)
    fake.fail(
        "complete_multipart_upload", make_error("503", 503, "c"), EndpointConnectionError(endpoint_url="x")
    )
    assert sink.commit(committable) is CommitOutcome.RETRY
    assert sink.commit(committable) is CommitOutcome.COMMITTED


def test_denied_commit_is_fatal(fake: Any, make_sink: MakeSink, make_error: MakeError) -> None:
    sink = make_sink()
    committable = committed_file(sink)
    fake.fail("complete_multipart_upload", make_error("AccessDenied", 403, "c"))
    assert sink.commit(committable) is CommitOutcome.FATAL


def test_outcomes_of_several_files_combine_to_the_worst() -> None:
    c, a, r, lost, fatal = (
        CommitOutcome.COMMITTED,
        CommitOutcome.ALREADY_COMMITTED,
        CommitOutcome.RETRY,
        CommitOutcome.LOST,
        CommitOutcome.FATAL,
    )
    assert combine_outcomes([a, a]) is a
    assert combine_outcomes([a, c]) is c
    assert combine_outcomes([c, r, a]) is r
    assert combine_outcomes([r, lost]) is lost
    assert combine_outcomes([lost, fatal, c]) is fatal
    with pytest.raises(ValueError):
        combine_outcomes([])


def test_abort_is_idempotent_and_abort_in_progress_keeps_the_upload(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl", rolling=NEVER_ROLL)
    committable = committed_file(make_sink())
    sink_parquet = make_sink()
    sink_parquet.abort(committable)
    sink_parquet.abort(committable)
    assert fake.uploads == {}
    _, state = run_epoch(sink, 1, lines(0, 2), None)
    (f,) = IN_PROGRESS_CODEC.from_json(state).files  # type: ignore[arg-type]
    sink.abort_in_progress(state)  # type: ignore[arg-type]
    assert ("bucket", f.tail_key) not in fake.objects
    assert f.upload_id in fake.uploads  # left to abort_lingering, which knows what is held


def test_abort_lingering_touches_exactly_what_no_checkpoint_holds(
    fake: Any, make_sink: MakeSink, make_error: MakeError
) -> None:
    sink = make_sink(format="jsonl", rolling=NEVER_ROLL)
    other_job = S3Sink("out", sink.config, client_factory=lambda _c: fake)
    # held by a retained checkpoint: a committable and an in-progress file (upload + tail)
    held_txn = sink.begin_transaction(ctx(1, partition=0))
    sink.write(held_txn, lines(0, 1))
    sink.pre_commit(held_txn)
    held_state = sink.snapshot_in_progress(held_txn)
    held_commit = sink.begin_transaction(ctx(1, partition=1))
    sink.write(held_commit, lines(1, 1))
    held_committable = sink.finish(held_commit)
    # lingering: a failed attempt of checkpoint 1 (upload + tail), and a crash in checkpoint 2
    failed = sink.begin_transaction(ctx(1, partition=0, attempt=1))
    sink.write(failed, lines(2, 1))
    sink.pre_commit(failed)
    sink.snapshot_in_progress(failed)
    crashed = sink.begin_transaction(ctx(2, partition=1))
    sink.write(crashed, lines(3, 1))
    # newer work that may still run (checkpoint 3), and another job's upload under the same prefix
    running = sink.begin_transaction(ctx(3, partition=1))
    sink.write(running, lines(4, 1))
    foreign = other_job.begin_transaction(WriterContext("job-2", "out", 1, 0, 0, 1))
    other_job.write(foreign, lines(5, 1))
    # unrelated objects in the bucket
    fake.put_object(Bucket="bucket", Key="data/out/part-00000.jsonl", Body=b"x")
    fake.create_multipart_upload(Bucket="bucket", Key="elsewhere/part-1.csv")
    assert held_state is not None and held_committable is not None
    uploads_before, keys_before = set(fake.uploads), set(fake.object_keys())

    scope = LingeringScope[S3Committable](
        "job-1", "out", held=(held_committable,), held_in_progress=(held_state,), up_to_checkpoint=2
    )
    assert sink.abort_lingering(scope) == 2
    gone_uploads = uploads_before - set(fake.uploads)
    assert gone_uploads == {failed.created.popitem()[0], crashed.created.popitem()[0]}
    assert keys_before - set(fake.object_keys()) == set(failed.tails_written)
    assert sink.abort_lingering(scope) == 0  # nothing left to do
    with pytest.raises(CommittableDecodeError):  # unknown held state: abort nothing
        sink.abort_lingering(LingeringScope("job-1", "out", held_in_progress=({"kind": "?"},)))


def test_abort_lingering_places_a_staged_write_s_unrecorded_upload_by_its_file_name(
    fake: Any, make_sink: MakeSink
) -> None:
    """#44 item 4: an attempt killed while Spark's writer had a file open leaves an upload that no
    ``.pending`` record names; the write's marker records the id Spark named its files after, so
    the cleanup aborts that write's uploads (what a retained checkpoint holds excepted) and no
    other write's, nor a newer checkpoint's."""
    sink = make_sink(format="parquet")
    token = job_token("job-1", "out")
    root = f"data/out/_twophase/{token}/staged"
    fake.put_object(Bucket="bucket", Key=f"{root}/twophase-{token}-2-ab12", Body=b"twophase-x\nfile-id-2\n")
    fake.put_object(Bucket="bucket", Key=f"{root}/twophase-{token}-3-cd34", Body=b"twophase-y\nfile-id-3\n")

    def upload(key: str) -> str:
        return str(fake.create_multipart_upload(Bucket="bucket", Key=f"data/out/{key}")["UploadId"])

    killed = upload("part-00003-file-id-2-c000.snappy.parquet")  # no record: only its name places it
    in_partition = upload("day=1/part-00004-file-id-2-c000.snappy.parquet")
    held = upload("part-00000-file-id-2-c000.snappy.parquet")
    newer = upload("part-00001-file-id-3-c000.snappy.parquet")  # checkpoint 3: out of scope
    foreign = upload("part-00003-file-id-9-c000.snappy.parquet")  # a write no marker of ours names
    held_file = PendingFile(
        "bucket", "data/out/part-00000-file-id-2-c000.snappy.parquet", held, (UploadedPart(1, "e", 5),), 5, 0
    )
    held_committable = S3Committable((held_file,))
    scope = LingeringScope[S3Committable]("job-1", "out", held=(held_committable,), up_to_checkpoint=2)
    assert sink.abort_lingering(scope) == 2
    assert set(fake.uploads) == {held, newer, foreign} and not {killed, in_partition} & set(fake.uploads)
    assert [k for k in fake.object_keys() if "/staged/" in k] == [f"{root}/twophase-{token}-3-cd34"]


def test_abort_lingering_goes_on_past_a_failed_abort_and_names_it(
    fake: Any, make_sink: MakeSink, make_error: MakeError
) -> None:
    """#26 item 3 for S3: one AbortMultipartUpload refused must not leave the other uploads and the
    orphaned tails in place (an open upload costs storage; a tail would be resumed by no one)."""
    sink = make_sink(format="jsonl", rolling=NEVER_ROLL)
    uploads = []
    for partition, attempt in ((0, 0), (1, 0), (0, 1)):
        txn = sink.begin_transaction(ctx(1, partition=partition, attempt=attempt))
        sink.write(txn, lines(partition, 1))
        sink.pre_commit(txn)
        sink.snapshot_in_progress(txn)
        uploads.append(txn.created.popitem()[0])
    assert set(uploads) <= set(fake.uploads) and fake.object_keys() != []
    fake.fail("abort_multipart_upload", make_error("InvalidRequest", 400, "AbortMultipartUpload"))
    scope = LingeringScope[S3Committable]("job-1", "out", up_to_checkpoint=1)
    with pytest.raises(LingeringCleanupError, match="1 of 3 lingering uploads") as raised:
        sink.abort_lingering(scope)
    assert "InvalidRequest" in str(raised.value)
    assert len(set(uploads) & set(fake.uploads)) == 1  # the two others were aborted
    assert [k for k in fake.object_keys() if "/tails/" in k] == []  # and the tails deleted
    assert sink.abort_lingering(scope) == 1  # the refused one, once S3 takes it


def test_abort_lingering_refused_by_the_policy_still_names_the_action(
    fake: Any, make_sink: MakeSink, make_error: MakeError
) -> None:
    """Access denied is one fix for every upload (the IAM policy): after trying them all, the
    first refusal itself is raised, naming the action and the key."""
    sink = make_sink(format="jsonl", rolling=NEVER_ROLL)
    for partition in (0, 1):
        txn = sink.begin_transaction(ctx(1, partition=partition))
        sink.write(txn, lines(partition, 1))
        sink.pre_commit(txn)
    denied = make_error("AccessDenied", 403, "AbortMultipartUpload")
    fake.fail("abort_multipart_upload", denied, denied)
    uploads = sorted((u.key, upload) for upload, u in fake.uploads.items())
    with pytest.raises(S3AccessDeniedError, match="s3:AbortMultipartUpload on s3://bucket/") as refused:
        sink.abort_lingering(LingeringScope[S3Committable]("job-1", "out", up_to_checkpoint=1))
    assert fake.calls.count("abort_multipart_upload") == 2  # both were tried
    # and what it left is listed: both uploads stay open (#45 item 8)
    assert sorted(refused.value.left) == [f"s3://bucket/{key} (upload {upload})" for key, upload in uploads]
    assert "left behind (2): s3://bucket/" in str(refused.value)


def test_validate_reports_missing_bucket_and_denied_access(
    fake: Any, make_sink: MakeSink, make_error: MakeError
) -> None:
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(ConfigError, match="does not exist"):
        make_sink(bucket="missing").validate(schema)
    fake.fail("head_bucket", make_error("403", 403, "HeadBucket"))
    with pytest.raises(ConfigError, match="denied"):
        make_sink().validate(schema)
    with pytest.raises(SchemaError):
        make_sink(partition_by=("nope",)).validate(schema)


def test_vanished_tail_or_upload_is_loud(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl", rolling=NEVER_ROLL)
    _, state = run_epoch(sink, 1, lines(0, 1), None)
    (f,) = IN_PROGRESS_CODEC.from_json(state).files  # type: ignore[arg-type]
    del fake.objects[("bucket", f.tail_key)]
    txn = sink.begin_transaction(ctx(2, state=state))
    with pytest.raises(TransactionLostError, match="tail"):
        sink.write(txn, lines(1, 1))
    big = make_sink(format="jsonl", json_column="v", part_size_bytes=5 * MiB, rolling=NEVER_ROLL)
    _, state = run_epoch(big, 1, lines(0, 1), None)
    fake.uploads.clear()
    txn = big.begin_transaction(ctx(2, state=state))
    with pytest.raises(TransactionLostError, match="vanished"):
        # parts upload in the background: the error surfaces at the latest when the file's state
        # is taken (snapshot), before the subtask acknowledges the checkpoint
        big.write(txn, pa.record_batch({"v": ["z" * (6 * MiB)]}))
        big.pre_commit(txn)
        big.snapshot_in_progress(txn)
    sync = make_sink(
        format="jsonl", json_column="v", part_size_bytes=5 * MiB, rolling=NEVER_ROLL, uploads_in_flight=0
    )
    _, state = run_epoch(sync, 1, lines(0, 1), None)
    fake.uploads.clear()
    txn = sync.begin_transaction(ctx(2, state=state))
    with pytest.raises(TransactionLostError, match="vanished"):
        sync.write(txn, pa.record_batch({"v": ["z" * (6 * MiB)]}))


def test_pending_file_invariants() -> None:
    with pytest.raises(ValueError):
        PendingFile("b", "k", "u", (), 0, 0)


@pytest.mark.parametrize(("fmt", "safe"), [("parquet", True), ("jsonl", False), ("csv", False)])
def test_only_formats_whose_files_never_span_checkpoints_are_speculation_safe(
    make_sink: Callable[..., S3Sink], fmt: str, safe: bool
) -> None:
    """#14 scenario 7: two attempts of a row-format subtask resume the same upload and write over
    each other's parts, so speculation must be refused for them; Parquet opens a new upload per
    attempt."""
    from twophase.coordinator.spark.checks import check_speculation

    sink = make_sink(format=fmt)
    assert sink.speculation_safe is safe
    if safe:
        check_speculation("true", [sink])
    else:
        with pytest.raises(ConfigError, match=r"spark\.speculation is on"):
            check_speculation("true", [sink])


def test_a_batch_decides_each_committable_from_its_own_objects(fake: Any, make_sink: MakeSink) -> None:
    """#42 item 3: one checkpoint's committables completed from one pool, each decided as ``commit``
    decides it, in input order: committed before, fresh, and gone."""
    sink = make_sink()
    before, fresh, gone, fresh_too = (committed_file(sink, n) for n in (1, 2, 3, 4))
    assert sink.commit(before) is CommitOutcome.COMMITTED
    (g,) = gone.files
    del fake.uploads[g.upload_id]  # expired by a lifecycle rule: nothing at its key either
    batch = [before, fresh, gone, fresh_too]
    assert sink.commit_batch(batch) == [
        CommitOutcome.ALREADY_COMMITTED,
        CommitOutcome.COMMITTED,
        CommitOutcome.LOST,
        CommitOutcome.COMMITTED,
    ]
    assert sink.recover_and_commit_batch([fresh, before, fresh_too]) == [CommitOutcome.ALREADY_COMMITTED] * 3


def test_a_batch_with_one_thread_commits_in_order(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink()
    sink.commit_concurrency = 1
    batch = [committed_file(sink, n) for n in (1, 2)]
    fake.calls.clear()
    assert sink.commit_batch(batch) == [CommitOutcome.COMMITTED] * 2
    assert fake.calls.count("complete_multipart_upload") == 2
