"""The external systems of a model-based test, which outlive every driver process: a Kafka
cluster, an S3 bucket, a Delta table and the file system holding checkpoints, all in memory, on
one manual clock. Readers return what a consumer would see (records as a multiset) and what lingers.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from support.clock import ManualClock
from support.delta_model import DeltaLogModel
from support.kafka_model import KafkaModel
from support.memory_storage import MemoryStore
from support.s3_model import S3Model


@dataclass
class World:
    """Kafka, S3, Delta and checkpoint storage, sharing one clock (ms).

    Attributes:
        clock: the manual clock every model and runtime reads.
        kafka: the Kafka cluster's transaction state.
        s3: the bucket ``bucket``.
        delta: the Delta table's log.
        store: the checkpoint "file system".
    """

    clock: ManualClock = field(default_factory=ManualClock)
    kafka: KafkaModel = field(init=False)
    s3: S3Model = field(default_factory=S3Model)
    delta: DeltaLogModel = field(default_factory=DeltaLogModel)
    store: MemoryStore = field(default_factory=MemoryStore)

    def __post_init__(self) -> None:
        self.kafka = KafkaModel(clock=self.clock)

    def kafka_records(self, topic: str) -> Counter[str]:
        """Values a read_committed consumer of ``topic`` sees (UTF-8), as a multiset."""
        return Counter(v.decode() for v in self.kafka.committed_values(topic) if v is not None)

    def s3_records(self, prefix: str, column: str) -> Counter[str]:
        """Values of ``column`` in every committed data file under ``prefix`` (JSON lines or
        Parquet; temporary objects under ``_twophase/`` are not data), as a multiset."""
        out: Counter[str] = Counter()
        for key in self.s3.object_keys():
            if not key.startswith(prefix + "/") or "/_twophase/" in key:
                continue
            data = self.s3.objects[("bucket", key)]
            if key.endswith(".jsonl"):
                out.update(str(json.loads(line)[column]) for line in data.decode().splitlines() if line)
            elif key.endswith(".parquet"):
                out.update(str(v) for v in pq.read_table(io.BytesIO(data)).column(column).to_pylist())
            else:
                raise AssertionError(f"unexpected object {key}")
        return out

    def delta_records(self) -> Counter[str]:
        """Records a reader of the Delta table sees, as a multiset."""
        return Counter(self.delta.committed_records())

    def lingering(self, s3_prefix: str) -> dict[str, list[str]]:
        """What an exactly-once run must not leave behind, per system (empty lists when clean):
        Ongoing Kafka transactions, open multipart uploads and temporary objects under
        ``s3_prefix``, and Delta data files no version references."""
        referenced = self.delta.referenced()
        return {
            "kafka": self.kafka.ongoing(),
            "s3": sorted(u.key for u in self.s3.uploads.values())
            + [k for k in self.s3.object_keys() if k.startswith(s3_prefix + "/_twophase/")],
            "delta": sorted(f for f in self.delta.files if f not in referenced),
        }
