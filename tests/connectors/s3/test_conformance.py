"""The S3 sink passes the conformance kit (:mod:`twophase.sinks.conformance`): its real code
(multipart uploads, in-progress files across checkpoints, lingering cleanup) against the S3 model,
with JSON-lines files that span checkpoints and with small files that roll inside an epoch; a
bucket lifecycle rule aborting the multipart uploads drops pre-committed files (the LOST check)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from support.world import World

from twophase.connectors.s3 import RollingPolicy, S3Sink, S3SinkConfig
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.conformance import SinkContract

PREFIX = "data/s"


class TestS3SpanningFilesContract(SinkContract[World]):
    """JSON-lines files that stay open across checkpoints until end of input (FLIP-147's finish)."""

    rolling = RollingPolicy()

    def new_system(self) -> World:
        self.world = World()
        return self.world

    def make_sink(self, system: World) -> TwoPhaseCommitSink[Any, Any]:
        config = S3SinkConfig(
            bucket="bucket",
            prefix=PREFIX,
            format="jsonl",
            rolling=self.rolling,
            retry_initial_backoff_ms=1,
            retry_max_backoff_ms=2,
        )
        return S3Sink("s", config, client_factory=lambda _c: system.s3, clock=system.clock)  # type: ignore[arg-type,return-value]

    def executor_copy(self, sink: TwoPhaseCommitSink[Any, Any]) -> TwoPhaseCommitSink[Any, Any]:
        return self.make_sink(self.world)  # the model does not pickle

    def read_committed(self, system: World) -> list[str]:
        return list(system.s3_records(PREFIX, "key").elements())

    def lingering(self, system: World) -> list[str]:
        return system.lingering(PREFIX)["s3"]

    def lose(self, system: World, committables: Sequence[Any]) -> bool:
        for c in committables:  # a lifecycle rule (AbortIncompleteMultipartUpload) aborts them
            for f in c.files:
                system.s3.uploads.pop(f.upload_id, None)
        return True


class TestS3SmallFilesContract(TestS3SpanningFilesContract):
    """Files of at most 60 bytes: several roll within one epoch, each its own multipart upload."""

    rolling = RollingPolicy(max_file_bytes=60)
