"""The GCS file sink against fake-gcs-server (issue #46 item 3), no mocks: the conformance kit's
random lives of a job (JSON lines files rolling inside an epoch, and Parquet), then files read
back by a reader that is not the writer (google-cloud-storage downloading the committed objects,
pyarrow decoding them), repeated commits, LOST when the session is gone, abort and what lingering
cleanup can and cannot do.

GCS cannot list resumable upload sessions, so these tests see them the only way there is: a
client factory whose transport records the ``Location`` of every session the sink opens and the
answer to every cancel (in this process, where the kit also runs its "executors"). Three
fake-gcs-server 1.56.1 divergences from GCS shape what can be checked, recorded here and known
upstream; the sink is not bent to them:

- the status query (``PUT`` with ``Content-Range: bytes */*``) finalizes the upload with what it
  holds, even nothing, instead of answering 308 (fsouza/fake-gcs-server#1362, #2354): so no test
  asks a session its status, except :func:`_expire`, which uses exactly that to end one;
- a cancel (``DELETE`` on the session URI) answers 499 but leaves the session open: a later
  finalize still creates the object (#1813, merged as a known trade-off): so an aborted session's
  end is not checked, only that the sink cancelled it;
- a finalized session answers 404 where GCS answers 200 with the object.

Each test works under its own prefix of one bucket. Spark through the GCS connector is not used:
its jar is not in the prepared Maven cache.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
import requests
from support import part_file_sinks as kit

from twophase.connectors.gcs import GcsFileSink, GcsFileSinkConfig
from twophase.connectors.gcs.internal.sessions import GcsClients, build_clients
from twophase.connectors.gcs.listing import list_lingering
from twophase.connectors.objectstore.internal.layout import RollingPolicy
from twophase.coordinator.storage.gcs import GcsStorageOptions
from twophase.integration.services.gcs_server import GcsEndpoint
from twophase.sinks.context import LingeringScope
from twophase.sinks.outcome import CommitOutcome

BUCKET = "gcs46-files"
KiB = 1024
MiB = 1024 * KiB

SESSIONS: dict[str, list[str]] = defaultdict(list)
"""Session URIs the sink opened, by the config's prefix (filled by :class:`RecordingClients`)."""
CANCELS: dict[str, list[tuple[str, int]]] = defaultdict(list)
"""(session URI, HTTP status) of every cancel the sink sent, by the config's prefix."""


class RecordingClients:
    """The sink's own clients, whose transport records every session it opens (the ``Location``
    of an initiating POST). Picklable: the kit ships sinks to its "executors" by pickle."""

    def __call__(self, config: GcsFileSinkConfig) -> GcsClients:
        clients = build_clients(config)

        def record(response: requests.Response, *args: Any, **kwargs: Any) -> None:
            url = response.request.url or ""
            if response.request.method == "POST" and "uploadType=resumable" in url:
                location = response.headers.get("Location")
                if location:
                    SESSIONS[config.prefix].append(location)
            if response.request.method == "DELETE" and "upload_id=" in url:
                CANCELS[config.prefix].append((url, response.status_code))

        clients.transport.hooks["response"].append(record)
        return clients


@dataclass
class Prefix:
    """One test's place in the bucket, and the SDK's view of it (the reader)."""

    endpoint: GcsEndpoint
    prefix: str

    @property
    def bucket(self) -> Any:
        return self.endpoint.client().bucket(BUCKET)

    def config(self, **fields: Any) -> GcsFileSinkConfig:
        options = GcsStorageOptions(emulator_host=self.endpoint.url)
        return GcsFileSinkConfig(location=f"gs://{BUCKET}/{self.prefix}", storage_options=options, **fields)

    def sink(self, **fields: Any) -> GcsFileSink:
        return GcsFileSink("out", self.config(**fields), client_factory=RecordingClients())

    def moved(self, prefix: str) -> Prefix:
        return Prefix(self.endpoint, prefix)

    def committed(self) -> list[str]:
        """Object names under the prefix (``objects.list``)."""
        return sorted(b.name for b in self.endpoint.client().list_blobs(BUCKET, prefix=self.prefix + "/"))

    def sessions(self) -> list[str]:
        """Every session the sink opened under the prefix."""
        return SESSIONS[self.prefix]

    def cancels(self) -> list[tuple[str, int]]:
        """Every cancel the sink sent under the prefix, with GCS's answer."""
        return CANCELS[self.prefix]

    def read_table(self, name: str) -> pa.Table:
        """One committed object, downloaded with the SDK and decoded with pyarrow."""
        return kit.decode_file(name, self.bucket.blob(name).download_as_bytes())

    def keys(self) -> list[str]:
        """Every committed record's ``key``."""
        return [k for name in self.committed() for k in self.read_table(name).column("key").to_pylist()]


def _expire(place: Prefix, uri: str) -> None:
    """End a session, as GCS does a week after it was opened. fake-gcs-server ends a session only
    by finalizing it, and its status query does that (#1362): so ask the status, and delete the
    object that made, of exactly that generation. A session finalized before answers 404 and
    nothing is deleted."""
    answer = requests.put(uri, headers={"Content-Range": "bytes */*"}, timeout=10)
    if answer.status_code in (200, 201):
        generation = int(answer.json()["generation"])
        place.bucket.blob(answer.json()["name"]).delete(if_generation_match=generation)


@pytest.fixture(scope="module")
def home(gcs_endpoint: GcsEndpoint) -> Prefix:
    gcs_endpoint.ensure_bucket(BUCKET)
    return Prefix(gcs_endpoint, "t")


@pytest.fixture
def place(home: Prefix) -> Prefix:
    return home.moved(f"t/{uuid.uuid4().hex[:12]}")


# --- the conformance kit ---------------------------------------------------------------------------


class TestGcsJsonLinesContract(kit.PartFileContract[Prefix]):
    """JSON lines files of at most 60 bytes: several roll within one epoch, each its own object."""

    def lingering(self, system: Prefix) -> list[str]:
        """Nothing can be shown: GCS cannot list sessions, and fake-gcs-server's status query
        would finalize the ones it asked about (#1362). Unfinalized sessions are invisible, hold
        no object, and expire after seven days (docs/stores/gcs.md); no object but committed
        files is ever under the prefix, which :meth:`read_committed` checks."""
        return []

    def lose(self, system: Prefix, committables: Sequence[Any]) -> bool:
        for c in committables:
            for f in c.files:
                _expire(system, f.session_uri)
        return True


class TestGcsParquetContract(TestGcsJsonLinesContract):
    """Parquet files, one per subtask and checkpoint."""

    file_format = "parquet"


# --- read back, repeated commits, LOST, abort, lingering ------------------------------------------


def test_partitioned_parquet_is_invisible_until_commit_then_read_back_by_the_sdk(place: Prefix) -> None:
    sink = place.sink(format="parquet", partition_by=("day",))
    sink.validate(kit.rows(1).schema)
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(6), kit.rows(4, start=6))
    assert place.committed() == []
    assert len(place.sessions()) == 2  # one session per day, nothing visible
    decoded = sink.decode(sink.encode(committable))
    assert sink.commit(decoded) is CommitOutcome.COMMITTED
    names = place.committed()
    kit.check_partitioned_read_back(place.prefix, names, [place.read_table(n) for n in names])
    for f in committable.files:  # what GCS computed of the object is what the task recorded
        blob = place.bucket.get_blob(f.name)
        assert (blob.size, blob.crc32c, blob.md5_hash) == (f.byte_count, f.crc32c, f.md5)
        assert blob.content_type == "application/vnd.apache.parquet"


def test_a_repeated_commit_answers_already_committed_from_the_object(place: Prefix) -> None:
    sink = place.sink(format="jsonl")
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(3))
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    again = place.sink(format="jsonl")  # another driver process
    assert again.commit_batch([committable, committable]) == [CommitOutcome.ALREADY_COMMITTED] * 2
    assert sorted(place.keys()) == ["k0", "k1", "k2"]


def test_lost_only_when_the_session_is_gone_and_no_object_is_there(place: Prefix) -> None:
    sink = place.sink(format="jsonl")
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(3))
    for f in committable.files:
        _expire(place, f.session_uri)
    assert sink.commit(committable) is CommitOutcome.LOST
    assert place.committed() == []


def test_an_object_put_at_the_name_first_is_never_replaced_and_the_commit_is_lost(place: Prefix) -> None:
    sink = place.sink(format="jsonl")
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(3))
    (f,) = committable.files
    place.bucket.blob(f.name).upload_from_string(b'{"key": "other"}\n')
    assert sink.commit(committable) is CommitOutcome.LOST
    assert place.keys() == ["other"]


def test_an_object_replaced_after_its_commit_is_lost_not_already_committed(place: Prefix) -> None:
    sink = place.sink(format="jsonl")
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(3))
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    (f,) = committable.files
    place.bucket.blob(f.name).upload_from_string(b'{"key": "other"}\n')
    assert sink.commit(committable) is CommitOutcome.LOST


def test_big_files_are_many_chunks_with_a_tail_and_roll_on_size(place: Prefix) -> None:
    sink = place.sink(format="jsonl", chunk_size_bytes=MiB, rolling=RollingPolicy(max_file_bytes=3 * MiB))
    many = kit.padded_rows(40_000)
    committable = kit.pre_committed(sink, kit.writer_ctx(1), many, many)
    assert len(committable.files) >= 2
    assert all(f.persisted_bytes >= 2 * MiB and 0 < len(f.tail) < 256 * KiB for f in committable.files)
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert len(place.keys()) == 80_000
    for f in committable.files:
        assert place.bucket.get_blob(f.name).md5_hash == f.md5


def test_an_object_deleted_after_its_commit_is_lost(place: Prefix) -> None:
    sink = place.sink(format="jsonl")
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(3))
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    place.bucket.blob(committable.files[0].name).delete()
    assert sink.commit(committable) is CommitOutcome.LOST
    assert place.committed() == []


def test_abort_cancels_the_sessions_and_never_touches_a_committed_object(place: Prefix) -> None:
    sink = place.sink(format="jsonl")
    aborted = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(2))
    sink.abort(aborted)
    sink.abort(aborted)  # idempotent
    uri = aborted.files[0].session_uri
    # GCS answers a cancel 499, then 404/410; fake-gcs-server 499 both times (#1813)
    assert [status for url, status in place.cancels()] == [499, 499]
    assert all(url == uri for url, _ in place.cancels())
    assert place.committed() == []
    committed = kit.pre_committed(sink, kit.writer_ctx(2), kit.rows(2))
    assert sink.commit(committed) is CommitOutcome.COMMITTED
    sink.abort(committed)
    assert sorted(place.keys()) == ["k0", "k1"]
    assert sink.commit(committed) is CommitOutcome.ALREADY_COMMITTED


def test_abort_open_cancels_the_task_s_sessions(place: Prefix) -> None:
    sink = place.sink(format="jsonl", chunk_size_bytes=MiB)
    txn = sink.begin_transaction(kit.writer_ctx(1))
    many = kit.padded_rows(20_000)
    sink.write(txn, many)  # over a chunk: the session is open and holds data
    assert len(place.sessions()) == 1
    sink.abort_open(txn)
    sink.abort_open(txn)
    assert [url for url, _ in place.cancels()] == place.sessions()
    assert place.committed() == []


def test_lingering_cleanup_cannot_list_sessions_and_says_so(place: Prefix) -> None:
    sink = place.sink(format="jsonl")
    held = kit.pre_committed(sink, kit.writer_ctx(2), kit.rows(2))
    orphan = kit.pre_committed(
        sink, kit.writer_ctx(2, partition=1), kit.rows(2)
    )  # its driver died: nobody knows its URI
    scope = LingeringScope("job", "out", held=(held,), held_in_progress=(), up_to_checkpoint=2)
    assert sink.abort_lingering(scope) == 0
    assert place.cancels() == []  # nothing can be listed, and the held session is kept
    listed = list_lingering(sink, scope)
    assert listed.kind == "gcs" and "cannot list" in listed.detail
    assert [(i.id, i.status.value) for i in listed.items] == [(f.name, "held") for f in held.files]
    assert all("upload_id" in i.detail and held.files[0].session_uri not in i.detail for i in listed.items)
    assert place.committed() == []
    assert sink.commit(held) is CommitOutcome.COMMITTED
    assert sink.commit(orphan) is CommitOutcome.COMMITTED  # still within its week


def test_a_missing_bucket_is_a_config_error_before_anything_is_written(home: Prefix) -> None:
    bucket = home.endpoint
    from twophase.sinks.errors import ConfigError

    config = GcsFileSinkConfig(
        location=f"gs://nope-{uuid.uuid4().hex[:8]}/x",
        storage_options=GcsStorageOptions(emulator_host=bucket.url),
    )
    with pytest.raises(ConfigError, match="does not exist"):
        GcsFileSink("out", config).validate(kit.rows(1).schema)


def test_the_sink_pickles_and_its_committable_never_shows_a_session(place: Prefix) -> None:
    import pickle

    sink = place.sink(format="jsonl")
    assert pickle.loads(pickle.dumps(sink)).config == sink.config
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(2))
    uri = committable.files[0].session_uri
    assert uri not in repr(committable) and uri not in repr(sink)
    sink.abort(committable)
