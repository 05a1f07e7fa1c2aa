"""The Azure Blob Storage file sink against Azurite (issue #46 item 3), no mocks: the
conformance kit's random lives of a job (JSON lines files rolling inside an epoch, and Parquet),
then files read back by a reader that is not the writer (the Azure SDK downloading the committed
blobs, pyarrow decoding them), repeated commits, LOST when the staged blocks are gone, and
lingering cleanup of staged blocks no checkpoint holds.

Each test works under its own prefix of one container. Spark through hadoop-azure is not used:
its jars are not in the prepared Maven cache.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from azure.core import MatchConditions
from support import part_file_sinks as kit

from twophase.connectors.azure import AzureBlobSink, AzureBlobSinkConfig, AzureCommittable
from twophase.connectors.azure.listing import list_lingering
from twophase.coordinator.storage import AzureStorageOptions
from twophase.integration.services.azurite import AzureBlobEndpoint
from twophase.sinks.context import LingeringScope
from twophase.sinks.outcome import CommitOutcome

CONTAINER = "files46"


@dataclass
class Prefix:
    """One test's place in the container, and the SDK's view of it (the reader)."""

    endpoint: AzureBlobEndpoint
    prefix: str

    @property
    def client(self) -> Any:
        return self.endpoint.service_client().get_container_client(CONTAINER)

    def location(self) -> str:
        return f"wasbs://{CONTAINER}@{self.endpoint.account_name}.blob.core.windows.net/{self.prefix}"

    def config(self, **fields: Any) -> AzureBlobSinkConfig:
        options = AzureStorageOptions(connection_string=self.endpoint.connection_string())
        return AzureBlobSinkConfig(location=self.location(), storage_options=options, **fields)

    def sink(self, **fields: Any) -> AzureBlobSink:
        return AzureBlobSink("out", self.config(**fields))

    def moved(self, prefix: str) -> Prefix:
        return Prefix(self.endpoint, prefix)

    def committed(self) -> list[str]:
        """Committed blob names under the prefix (List Blobs)."""
        return sorted(self.client.list_blob_names(name_starts_with=self.prefix + "/"))

    def staged_only(self) -> list[str]:
        """Blob names under the prefix that hold staged blocks and no committed blob."""
        every = self.client.list_blobs(name_starts_with=self.prefix + "/", include=["uncommittedblobs"])
        return sorted({b.name for b in every} - set(self.committed()))

    def read_table(self, name: str) -> pa.Table:
        """One committed blob, downloaded with the SDK and decoded with pyarrow."""
        return kit.decode_file(name, self.client.download_blob(name).readall())

    def keys(self) -> list[str]:
        """Every committed record's ``key``."""
        return [k for name in self.committed() for k in self.read_table(name).column("key").to_pylist()]

    def discard(self, name: str) -> None:
        """Drop a blob's staged blocks, as Azure does seven days after they were staged."""
        blob = self.client.get_blob_client(name)
        answer = blob.commit_block_list([])
        blob.delete_blob(etag=answer["etag"], match_condition=MatchConditions.IfNotModified)


@pytest.fixture(scope="module")
def home(azure_endpoint: AzureBlobEndpoint) -> Prefix:
    azure_endpoint.ensure_container(CONTAINER)
    return Prefix(azure_endpoint, "t")


@pytest.fixture
def place(home: Prefix) -> Prefix:
    return home.moved(f"t/{uuid.uuid4().hex[:12]}")


# --- the conformance kit ---------------------------------------------------------------------------


class TestAzureJsonLinesContract(kit.PartFileContract[Prefix]):
    """JSON lines files of at most 60 bytes: several roll within one epoch, each its own blob."""

    def lingering(self, system: Prefix) -> list[str]:
        return system.staged_only()

    def lose(self, system: Prefix, committables: Sequence[Any]) -> bool:
        for c in committables:
            for f in c.files:
                system.discard(f.blob)
        return True


class TestAzureParquetContract(TestAzureJsonLinesContract):
    """Parquet files, one per subtask and checkpoint."""

    file_format = "parquet"


# --- read back, repeated commits, LOST, lingering --------------------------------------------------


def test_partitioned_parquet_is_invisible_until_commit_then_read_back_by_the_sdk(place: Prefix) -> None:
    sink = AzureBlobSink("out", place.config(format="parquet", partition_by=("day",)))
    sink.validate(kit.rows(1).schema)
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(6), kit.rows(4, start=6))
    assert place.committed() == []
    assert len(place.staged_only()) == 2  # one file per day, blocks staged, nothing visible
    decoded = sink.decode(sink.encode(committable))
    assert sink.commit(decoded) is CommitOutcome.COMMITTED
    names = place.committed()
    kit.check_partitioned_read_back(place.prefix, names, [place.read_table(n) for n in names])
    assert place.staged_only() == []


def test_a_repeated_commit_answers_already_committed_from_the_blob(place: Prefix) -> None:
    sink = AzureBlobSink("out", place.config(format="jsonl"))
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(3))
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    again = AzureBlobSink("out", place.config(format="jsonl"))  # another driver process
    assert again.commit_batch([committable, committable]) == [CommitOutcome.ALREADY_COMMITTED] * 2
    assert sorted(place.keys()) == ["k0", "k1", "k2"]


def test_lost_only_when_the_staged_blocks_are_gone(place: Prefix) -> None:
    sink = AzureBlobSink("out", place.config(format="jsonl"))
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(3))
    for f in committable.files:
        place.discard(f.blob)
    assert sink.commit(committable) is CommitOutcome.LOST
    assert place.committed() == []


def test_a_blob_of_other_blocks_at_the_name_is_lost_not_already_committed(place: Prefix) -> None:
    sink = AzureBlobSink("out", place.config(format="jsonl"))
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(3))
    (f,) = committable.files
    place.client.upload_blob(f.blob, b'{"key": "other"}\n', overwrite=True)
    assert sink.commit(committable) is CommitOutcome.LOST
    assert place.keys() == ["other"]


def test_big_files_are_many_blocks_and_roll_on_size(place: Prefix) -> None:
    mib = 1024 * 1024
    from twophase.connectors.azure.config import RollingPolicy

    sink = AzureBlobSink(
        "out",
        place.config(format="jsonl", block_size_bytes=mib, rolling=RollingPolicy(max_file_bytes=3 * mib)),
    )
    many = kit.padded_rows(40_000)
    committable = kit.pre_committed(sink, kit.writer_ctx(1), many, many)
    assert len(committable.files) >= 2 and max(len(f.block_ids) for f in committable.files) >= 3
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert len(place.keys()) == 80_000


def test_abort_and_lingering_cleanup_discard_only_what_no_checkpoint_holds(place: Prefix) -> None:
    sink = AzureBlobSink("out", place.config(format="jsonl"))
    aborted = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(2))
    sink.abort(aborted)
    sink.abort(aborted)  # idempotent
    held = kit.pre_committed(sink, kit.writer_ctx(2), kit.rows(2))
    orphan = kit.pre_committed(sink, kit.writer_ctx(2, partition=1), kit.rows(2))
    later = kit.pre_committed(sink, kit.writer_ctx(3), kit.rows(2))
    other_job = kit.pre_committed(sink, kit.writer_ctx(2, job="other"), kit.rows(2))
    assert len(place.staged_only()) == 4
    scope = LingeringScope("job", "out", held=(held,), held_in_progress=(), up_to_checkpoint=2)
    assert sink.abort_lingering(scope) == 1
    left = place.staged_only()
    assert not {f.blob for f in orphan.files} & set(left)
    assert {f.blob for c in (held, later, other_job) for f in c.files} == set(left)
    listed = list_lingering(sink, scope)
    assert listed.kind == "azure"
    # the later checkpoint and the other job are out of scope; only the held file is left
    assert [(i.id, i.status.value) for i in listed.items] == [(f.blob, "held") for f in held.files]
    assert sink.commit(held) is CommitOutcome.COMMITTED
    assert sink.commit(orphan) is CommitOutcome.LOST


def test_a_discard_cut_short_after_its_empty_commit_leaves_no_empty_file_for_readers(place: Prefix) -> None:
    """Discarding is two requests: an empty Put Block List created only if no blob exists, then
    Delete Blob of exactly that empty blob. A driver killed between them (kill -9 during a
    restore's lingering cleanup) left a committed zero-byte blob at a data file's name, which the
    listing of staged blocks does not show: every later reader of the prefix met a zero-byte
    ``.parquet`` file (pyarrow and Spark refuse it). The lingering cleanup must find and delete it."""
    sink = AzureBlobSink("out", place.config(format="parquet"))
    orphan = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(3))
    (f,) = orphan.files
    # the discard's first request, as the killed driver sent it; its Delete Blob never came
    place.client.get_blob_client(f.blob).commit_block_list([], match_condition=MatchConditions.IfMissing)
    assert place.committed() == [f.blob]
    scope = LingeringScope[AzureCommittable]("job", "out", up_to_checkpoint=1)
    assert [i.id for i in list_lingering(sink, scope).items] == [f.blob]
    assert sink.abort_lingering(scope) == 1
    assert place.committed() == [] and place.staged_only() == []
    assert sink.commit(orphan) is CommitOutcome.LOST  # aborted means never visible


def test_a_committed_blob_is_never_discarded(place: Prefix) -> None:
    sink = AzureBlobSink("out", place.config(format="jsonl"))
    committable = kit.pre_committed(sink, kit.writer_ctx(1), kit.rows(2))
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    sink.abort(committable)
    assert sorted(place.keys()) == ["k0", "k1"]


def test_a_missing_container_is_a_config_error_before_anything_is_written(home: Prefix) -> None:
    container = home.endpoint
    from twophase.sinks.errors import ConfigError

    options = AzureStorageOptions(connection_string=container.connection_string())
    config = AzureBlobSinkConfig(
        location=f"wasbs://nope-{uuid.uuid4().hex[:8]}@{container.account_name}.blob.core.windows.net/x",
        storage_options=options,
    )
    with pytest.raises(ConfigError, match="does not exist"):
        AzureBlobSink("out", config).validate(kit.rows(1).schema)


def test_the_sink_pickles_without_its_secrets_in_repr(place: Prefix) -> None:
    import pickle

    sink = AzureBlobSink("out", place.config())
    assert place.endpoint.account_key not in repr(sink)
    assert pickle.loads(pickle.dumps(sink)).config == sink.config
