"""The flights job on a cluster with further Spark settings, for chaos configurations that need them
(``cluster4z``: speculation on).

    TWOPHASE_CHAOS_SPARK_CONF='{"spark.speculation": "true", ...}' \\
        python -m twophase.integration.chaos.job_with_conf --work-dir DIR --master spark://...

Runs :func:`twophase.integration.jobs.flights.main` with the settings of
``TWOPHASE_CHAOS_SPARK_CONF`` (a JSON object of strings) laid over the job's cluster conf
(:func:`~twophase.integration.jobs.flights_cluster.cluster_conf`, which turns speculation off):
the job itself has no option for them, and its runtime checks ``spark.speculation`` against its
sinks as for any job (:func:`~twophase.coordinator.spark.checks.check_speculation`).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from twophase.sinks.errors import ConfigError

CONF_ENV = "TWOPHASE_CHAOS_SPARK_CONF"


def conf_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings of ``TWOPHASE_CHAOS_SPARK_CONF`` in ``environ`` (``{}`` when unset).

    Raises:
        ConfigError: not a JSON object of strings.
    """
    text = environ.get(CONF_ENV) or "{}"
    try:
        conf = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{CONF_ENV}: not JSON ({exc.msg})") from None
    if not isinstance(conf, dict) or not all(isinstance(v, str) for v in conf.values()):
        raise ConfigError(f"{CONF_ENV}: expected a JSON object of strings")
    return conf


def laid_over(base: Callable[..., dict[str, str]], extra: Mapping[str, str]) -> Callable[..., dict[str, str]]:
    """``base`` (a conf function) with ``extra``'s settings winning over its own."""

    @functools.wraps(base)
    def conf(*args: Any, **kwargs: Any) -> dict[str, str]:
        return {**base(*args, **kwargs), **extra}

    return conf


def main() -> None:
    """Lay the settings over the cluster conf, then run the flights job's command line."""
    from twophase.integration.jobs import flights, flights_cluster

    extra = conf_from_env(os.environ)
    # cluster_spark_session looks cluster_conf up in its module when it builds the session
    flights_cluster.cluster_conf = laid_over(flights_cluster.cluster_conf, extra)
    flights.main()


if __name__ == "__main__":
    main()
