"""``twophase lingering`` and ``checkpoints`` for jobs that are not the flights demo.

The main test runs a user's Kafka + S3 job (:mod:`support.exactly_once.kafka_s3_job`)
in its own process, crashes it with ``TWOPHASE_FAULT`` and cleans up with the CLI (a subprocess, as
a user runs it): exactly what is listed, aborted and recommitted, and what a ``read_committed``
consumer and an S3 listing see afterwards. The other tests use the file sink and need no service.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cli import json_output, one_line_error, run_twophase
from support.exactly_once import kafka_s3_job
from support.exactly_once.support import FAULT_EXIT, REPO, make_input
from support.file_sink import JsonLinesFileSink, read_committed, staging_files

from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import payload_bytes
from twophase.coordinator.storage import open_storage
from twophase.integration.readback import key_values, read_topic, wait_until_stable
from twophase.integration.services import S3Endpoint
from twophase.sinks.context import WriterContext

ROWS = 10
"""Records per input file (one file per micro-batch)."""


def _run_job(root: Path, env: dict[str, str], fault: str | None = None) -> subprocess.CompletedProcess[str]:
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPHASE_FAULT")}
    run_env.update(env, PYSPARK_PYTHON=sys.executable)
    if fault:
        run_env.update(
            TWOPHASE_FAULT=fault, TWOPHASE_FAULT_STATE=str(root / "fault-state" / fault.replace(":", "_"))
        )
    return subprocess.run(
        [sys.executable, "-m", "support.exactly_once.kafka_s3_job"],
        cwd=REPO,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _items(body: dict[str, Any], key: str = "sinks") -> dict[str, list[tuple[str, str]]]:
    return {s["sink"]: [(i["id"], i["status"]) for i in s["items"]] for s in body[key]}


def _s3_ids(s3: S3Endpoint, bucket: str, prefix: str) -> tuple[list[str], Counter[int]]:
    client = s3.boto3_client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))
    ids: Counter[int] = Counter()
    for key in keys:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        ids.update(pq.read_table(io.BytesIO(body)).column("id").to_pylist())
    return keys, ids


def _kafka_records(ids: list[int]) -> list[tuple[bytes | None, bytes | None]]:
    """What the job writes to Kafka for ``ids``: key ``<id>``, value ``v-<id>``."""
    return sorted((str(i).encode(), f"v-{i}".encode()) for i in ids)


@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.long  # make chaos; in make test the five-sink listing and the sink-factory recommit cover it
def test_list_abort_and_recommit_for_a_crashed_kafka_and_s3_job(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    run = uuid.uuid4().hex[:8]  # tmp_path's name repeats across sessions; a running broker keeps topics
    job_id, topic, bucket, prefix = "opjob", f"opjob.{run}", "opjob", f"runs/{run}"
    settings = {
        "root": str(tmp_path), "job": job_id, "topic": topic, "bootstrap": kafka_bootstrap,
        "bucket": bucket, "prefix": prefix,
        "s3": {"endpoint_url": s3_endpoint.endpoint_url, "access_key": s3_endpoint.access_key,
               "secret_key": s3_endpoint.secret_key},
    }  # fmt: skip
    env = {kafka_s3_job.SETTINGS_ENV: json.dumps(settings)}
    factory = ["--sinks", "support.exactly_once.kafka_s3_job:job"]
    ids = make_input(tmp_path, files=3, rows_per_file=ROWS)
    file0, file1 = ids[:ROWS], ids[ROWS : 2 * ROWS]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_twophase([*args], tmp_path, env)

    # 1. a crash before checkpoint 2 is durable: epoch 2's transaction and upload linger
    crashed = _run_job(tmp_path, env, fault="before_persist:2")
    assert crashed.returncode == FAULT_EXIT, crashed.stdout + crashed.stderr
    listed = json_output(cli("checkpoints", "list", "--json", *factory))
    assert (listed["job_id"], [c["id"] for c in listed["checkpoints"]]) == (job_id, [1])

    before = json_output(cli("lingering", "--json", *factory))
    txn2 = f"twophase-{job_id}-events-0-2-0"  # partition 0, pool slot 2 % 4, attempt 0
    items = _items(before)
    assert items["events"] == [(txn2, "lingering")]
    [(upload_key, status)] = items["files"]
    assert status == "lingering" and re.fullmatch(
        rf"{prefix}/part-00000-2-[0-9a-f]{{12}}-[0-9a-f]{{32}}\.parquet", upload_key
    )
    assert (before["recommitted"], before["aborted"], before["after"]) == (None, None, None)

    aborted = json_output(cli("lingering", "--abort", "--json", *factory))
    assert aborted["aborted"] == {"events": 1, "files": 1}
    assert _items(aborted, "after") == {"events": [], "files": []}
    wait_until_stable(kafka_bootstrap, topic)
    assert sorted(key_values(read_topic(kafka_bootstrap, topic))) == _kafka_records(file0)
    keys, s3_ids = _s3_ids(s3_endpoint, bucket, prefix)
    assert len(keys) == 1 and s3_ids == Counter(file0)

    # 2. a crash right after checkpoint 2 is durable: its transactions are held, never aborted
    crashed = _run_job(tmp_path, env, fault="after_persist:1")
    assert crashed.returncode == FAULT_EXIT, crashed.stdout + crashed.stderr
    sinks_only = ["--sinks", "support.exactly_once.kafka_s3_job:sinks",
                  "--checkpoint-dir", str(tmp_path / "chk"), "--job", job_id]  # fmt: skip
    kept = json_output(cli("lingering", "--abort", "--json", *sinks_only))
    assert [c["id"] for c in kept["checkpoints"]] == [2]
    assert kept["aborted"] == {"events": 0, "files": 0}
    held = _items(kept, "after")
    assert held["events"] == [(txn2, "held")]
    assert [status for _, status in held["files"]] == ["held"]
    assert [s["held"] for s in kept["after"]] == [1, 1]
    assert sorted(key_values(read_topic(kafka_bootstrap, topic))) == _kafka_records(file0)

    text = cli("lingering", *sinks_only)  # the table, at 80 columns
    assert text.returncode == 0, text.stderr
    assert txn2 in text.stdout and max(len(line) for line in text.stdout.splitlines()) <= 80

    recommitted = json_output(cli("lingering", "--recommit", "--json", *factory))
    assert recommitted["recommitted"] == {
        "checkpoint_id": 2,
        "sinks": {
            "events": {"committed": 1, "already_committed": 0, "checkpoints": [2]},
            "files": {"committed": 1, "already_committed": 0, "checkpoints": [2]},
        },
        "skipped": [],
    }
    assert _items(recommitted, "after") == {"events": [], "files": []}
    wait_until_stable(kafka_bootstrap, topic)
    assert sorted(key_values(read_topic(kafka_bootstrap, topic))) == _kafka_records(file0 + file1)
    assert _s3_ids(s3_endpoint, bucket, prefix)[1] == Counter(file0 + file1)
    again = json_output(cli("lingering", "--recommit", "--json", *factory))  # idempotent
    assert again["recommitted"]["sinks"]["events"] == {
        "committed": 0,
        "already_committed": 1,
        "checkpoints": [2],
    }

    # 3. the job resumes and finishes: every record exactly once, nothing left behind
    done = _run_job(tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    wait_until_stable(kafka_bootstrap, topic)
    assert sorted(key_values(read_topic(kafka_bootstrap, topic))) == _kafka_records(ids)
    assert _s3_ids(s3_endpoint, bucket, prefix)[1] == Counter(ids)
    final = json_output(cli("lingering", "--json", *factory))
    assert _items(final) == {"events": [], "files": []}
    assert (
        json_output(cli("checkpoints", "list", "--json", *factory))["checkpoints"][-1]["end_of_input"] is True
    )


# ------------------------------------------------------------------------------------ no services


def _file_sink_job(root: Path) -> None:
    """A checkpoint 1 holding one pre-committed file, plus one staging file no checkpoint holds."""
    sink = JsonLinesFileSink("out", root / "out")
    held = sink.begin_transaction(WriterContext("filejob", "out", 1, 0, 0, 1))
    sink.write(held, pa.record_batch({"id": [1, 2, 3]}))
    committable = sink.pre_commit(held)
    assert committable is not None
    stray = sink.begin_transaction(WriterContext("filejob", "out", 2, 0, 0, 1))
    sink.write(stray, pa.record_batch({"id": [4]}))
    assert sink.pre_commit(stray) is not None
    open_storage(str(root / "chk"), "filejob").publish(
        CheckpointMetadata(
            job_id="filejob",
            checkpoint_id=1,
            kind=CheckpointKind.CHECKPOINT,
            timestamp_ms=1_700_000_000_000,
            sinks={
                "out": SinkSnapshot(1, (CommittableRecord(0, 0, payload_bytes(sink.encode(committable)), 1),))
            },
        )
    )
    (root / "filejob.py").write_text(
        "from support.file_sink import JsonLinesFileSink\n\n"
        f"def sinks():\n    return [JsonLinesFileSink('out', {str(root / 'out')!r})]\n\n"
        f"def other():\n    return [JsonLinesFileSink('elsewhere', {str(root / 'out')!r})]\n"
    )


def test_any_sink_recommits_and_aborts_without_listing(tmp_path: Path) -> None:
    _file_sink_job(tmp_path)
    job = ["--sinks", "filejob:sinks", "--checkpoint-dir", str(tmp_path / "chk"), "--job-id", "filejob"]

    body = json_output(
        run_twophase(["lingering", "--recommit", "--abort", "--json", *job], tmp_path, cwd=tmp_path)
    )

    assert body["sinks"] == [
        {"sink": "out", "type": "JsonLinesFileSink", "what": "(cannot be listed)", "listable": False,
         "detail": "", "items": [], "lingering": 0, "held": 0, "undecidable": 0},
    ]  # fmt: skip
    assert body["recommitted"]["sinks"] == {
        "out": {"committed": 1, "already_committed": 0, "checkpoints": [1]}
    }
    assert body["aborted"] == {"out": 1}  # the stray staging file of checkpoint 2
    assert sorted(r["id"] for r in read_committed(tmp_path / "out", "out")) == [1, 2, 3]
    assert staging_files(tmp_path / "out", "filejob", "out") == []


def test_recommit_refuses_a_checkpoint_holding_sinks_it_was_not_given(tmp_path: Path) -> None:
    _file_sink_job(tmp_path)
    job = ["--sinks", "filejob:other", "--checkpoint-dir", str(tmp_path / "chk"), "--job-id", "filejob"]

    line = one_line_error(run_twophase(["lingering", "--recommit", *job], tmp_path, cwd=tmp_path))

    assert "checkpoint 1 of job 'filejob' holds committables of sinks ['out']" in line
    assert "refusing to recommit part of a checkpoint" in line
    assert len(staging_files(tmp_path / "out", "filejob", "out")) == 2  # nothing was touched


def test_abort_refuses_a_job_without_checkpoints_unless_forced(tmp_path: Path) -> None:
    _file_sink_job(tmp_path)
    job = ["--sinks", "filejob:sinks", "--checkpoint-dir", str(tmp_path / "nowhere"), "--job-id", "filejob"]

    line = one_line_error(run_twophase(["lingering", "--abort", *job], tmp_path, cwd=tmp_path))
    assert "job 'filejob' has no checkpoint in this checkpoint directory" in line
    assert len(staging_files(tmp_path / "out", "filejob", "out")) == 2

    forced = json_output(
        run_twophase(["lingering", "--abort", "--force", "--json", *job], tmp_path, cwd=tmp_path)
    )
    assert forced["aborted"] == {"out": 2}


def test_lingering_needs_the_sinks(tmp_path: Path) -> None:
    _file_sink_job(tmp_path)

    result = run_twophase(
        ["lingering", "--checkpoint-dir", str(tmp_path / "chk"), "--job-id", "filejob"],
        tmp_path,
        cwd=tmp_path,
    )

    assert result.returncode == 2
    assert "lingering needs the job's sinks: pass --sinks module:function" in result.stderr
