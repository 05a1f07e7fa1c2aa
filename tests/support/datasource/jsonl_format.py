"""The ``twophase-jsonl`` test format: the facade over
:class:`~support.file_sink.JsonLinesFileSink`.

Options: ``outputDir`` (required; the sink's root folder) and ``sinkName`` (default ``jsonl``), plus
the facade's own (``job``, ``twophaseCheckpointDir``). Lives in ``integration/`` because
``coordinator`` never imports ``integration``.
"""

from __future__ import annotations

from collections.abc import Mapping

from support.file_sink import JsonLinesFileSink
from twophase.coordinator.spark.datasource import TwoPhaseDataSource
from twophase.sinks.errors import ConfigError

FORMAT = "twophase-jsonl"
DEFAULT_SINK_NAME = "jsonl"


def build_jsonl_sink(options: Mapping[str, str]) -> JsonLinesFileSink:
    """The JSON-lines file sink of ``options`` (lower-cased keys).

    Raises:
        ConfigError: ``outputDir`` is missing.
    """
    root = options.get("outputdir", "").strip()
    if not root:
        raise ConfigError('option "outputDir" (the JSON-lines output folder) is required')
    return JsonLinesFileSink(options.get("sinkname", DEFAULT_SINK_NAME), root)


JsonLinesTwoPhase = TwoPhaseDataSource.for_sink(FORMAT, build_jsonl_sink)
"""The data source class to ``spark.dataSource.register``."""
