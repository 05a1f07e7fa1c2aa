"""The chaos job wrapper's Spark settings: read from the environment, laid over the job's own."""

from __future__ import annotations

import pytest

from twophase.integration.chaos.job_with_conf import CONF_ENV, conf_from_env, laid_over
from twophase.sinks.errors import ConfigError


def test_settings_are_read_from_the_environment() -> None:
    assert conf_from_env({}) == {}
    assert conf_from_env({CONF_ENV: '{"spark.speculation": "true"}'}) == {"spark.speculation": "true"}
    for bad in ("{", '["spark.speculation"]', '{"spark.speculation": true}'):
        with pytest.raises(ConfigError, match=CONF_ENV):
            conf_from_env({CONF_ENV: bad})


def test_the_settings_win_over_the_job_conf() -> None:
    def job_conf(master: str, *, events: bool = False) -> dict[str, str]:
        return {"spark.master": master, "spark.speculation": "false", "events": str(events)}

    conf = laid_over(job_conf, {"spark.speculation": "true"})
    assert conf("spark://h:1", events=True) == {
        "spark.master": "spark://h:1",
        "spark.speculation": "true",
        "events": "True",
    }
    assert conf.__name__ == "job_conf"


def test_the_job_session_reads_the_cluster_conf_from_its_module() -> None:
    """The wrapper replaces ``flights_cluster.cluster_conf``: the session must look it up there."""
    import inspect

    from twophase.integration.jobs import flights_cluster

    assert "cluster_conf(" in inspect.getsource(flights_cluster.cluster_spark_session)
