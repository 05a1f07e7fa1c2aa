"""The opt-in Prometheus endpoint: scraped while a job runs, it shows per-sink transactions,
records and commit time and the latest checkpoint; closing the runtime frees the port."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.harness import TwoPhaseHarness
from support.runtime_scenarios import data, expected, harness, records_of

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.sinks.errors import ConfigError


def scrape(h: TwoPhaseHarness) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    endpoint = h.runtime.metrics_endpoint
    assert endpoint is not None
    with urllib.request.urlopen(endpoint.url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_scrape_during_a_run_shows_each_sinks_commits_and_the_latest_checkpoint() -> None:
    config = RuntimeConfig(checkpoint=CheckpointConfig(retained_checkpoints=2), metrics_port=0)
    h, system = harness("k", "f", config=config)
    h.restore()
    h.write_epoch(data(1))
    h.write_epoch(data(2))
    got = scrape(h)  # mid-run: two epochs committed, the job still running

    job = (("job", h.runtime.job_id),)
    k = (*job, ("sink", "k"))
    assert got[("twophase_sink_transactions_total", tuple(sorted((*k, ("outcome", "committed")))))] == 4
    assert got[("twophase_sink_transactions_total", tuple(sorted((*k, ("outcome", "aborted")))))] == 0
    assert got[("twophase_sink_records_committed_total", tuple(sorted(k)))] == 8
    assert ("twophase_sink_commit_seconds_total", tuple(sorted(k))) in got
    assert got[("twophase_checkpoints_completed_total", tuple(sorted((*job, ("kind", "checkpoint")))))] == 2
    assert got[("twophase_last_checkpoint_id", job)] == 2

    h.runtime.finish()
    assert records_of(system, "k") == expected([1, 2])
    final = scrape(h)
    assert final[("twophase_checkpoints_completed_total", tuple(sorted((*job, ("kind", "final")))))] == 1
    endpoint = h.runtime.metrics_endpoint
    assert endpoint is not None
    h.runtime.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(endpoint.url, timeout=2)


def test_metrics_are_off_unless_a_port_is_given_and_the_port_is_checked() -> None:
    h, _ = harness("k")
    assert h.runtime.metrics_endpoint is None
    with pytest.raises(ConfigError, match="metrics_port"):
        RuntimeConfig(metrics_port=70000)
