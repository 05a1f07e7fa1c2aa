"""Scenario helpers for runtime tests driven by :class:`TwoPhaseHarness`: epoch inputs and
positions, the expected committed keys, a harness over fake sinks, and what a fake sink holds."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from support.fakes import FakeExternalSystem, FakeInProgressSink, FakeSink
from support.harness import TwoPhaseHarness, batch
from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.run.runtime_config import RuntimeConfig


def pos(n: int, query: str = "q1") -> dict[str, object]:
    """The source position of Spark batch ``n`` of query ``query``."""
    return {"engine": "spark", "query_id": query, "batch_id": n}


def data(n: int, parts: int = 2, per: int = 2) -> list[list[pa.RecordBatch]]:
    """Epoch n's input: ``parts`` partitions of ``per`` keys each, e.g. 'e1p0r0'."""
    return [[batch([f"e{n}p{p}r{r}" for r in range(per)])] for p in range(parts)]


def expected(epochs: Sequence[int], parts: int = 2, per: int = 2) -> list[str]:
    """Every key epochs ``epochs`` of :func:`data` hold, sorted."""
    return sorted(f"e{n}p{p}r{r}" for n in epochs for p in range(parts) for r in range(per))


def harness(
    *sinks_spec: str, config: RuntimeConfig | None = None
) -> tuple[TwoPhaseHarness, FakeExternalSystem]:
    """A harness over fake sinks named ``sinks_spec`` (``f…``: in-progress files rolling at 3
    records; others: one transaction per epoch) and their shared external system."""
    system = FakeExternalSystem()
    sinks = [
        FakeInProgressSink(name, system, roll_records=3) if name.startswith("f") else FakeSink(name, system)
        for name in (sinks_spec or ("k",))
    ]
    cfg = config or RuntimeConfig(checkpoint=CheckpointConfig(retained_checkpoints=2))
    return TwoPhaseHarness(sinks, config=cfg), system


def records_of(system: FakeExternalSystem, sink: str) -> list[str]:
    """The records committed by sink ``sink``, sorted."""
    return sorted(r for t, recs in system.committed.items() if t.startswith(sink + "-") for r in recs)
