"""The Kafka sink passes the conformance kit (:mod:`twophase.sinks.conformance`): its real code
(writer, committer, admin calls, lingering cleanup) against the model of Kafka's transaction
coordinator, whose transaction timeout really drops a pre-committed transaction (the LOST check)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from support.world import World

from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.conformance import SinkContract

TOPIC = "events"
CONFIG = KafkaSinkConfig(bootstrap_servers="model:9092", topic=TOPIC, stats_wait_ms=10_000)


class TestKafkaSinkContract(SinkContract[World]):
    """Each life on a new Kafka model (its own clock: the runtime's never moves the broker's)."""

    def new_system(self) -> World:
        self.world = World()
        return self.world

    def make_sink(self, system: World) -> TwoPhaseCommitSink[Any, Any]:
        return KafkaSink("k", CONFIG, clients=system.kafka)

    def executor_copy(self, sink: TwoPhaseCommitSink[Any, Any]) -> TwoPhaseCommitSink[Any, Any]:
        return self.make_sink(self.world)  # the model does not pickle

    def read_committed(self, system: World) -> list[str]:
        return list(system.kafka_records(TOPIC).elements())

    def lingering(self, system: World) -> list[str]:
        return system.kafka.ongoing()

    def lose(self, system: World, committables: Sequence[Any]) -> bool:
        system.clock.advance(CONFIG.transaction_timeout_ms + 1)  # the coordinator aborts them
        system.kafka.advance()
        return True
