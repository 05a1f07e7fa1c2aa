"""A Spark Connect server whose Python workers get twophase only from the shipped wheel.

The server's workers run a Python with twophase's dependencies but not twophase
(:func:`~twophase.integration.spark_shipping.executor_python`); the wheel reaches them by
``--py-files`` under a ``.zip`` name. Spark's data source lookup then finds the wheel's top-level
``pyspark_twophase`` module on their path: ``.format("twophase")`` works with no ``register``
call, as for a user who installed the wheel.

The server is ``TWOPHASE_SPARK_CONNECT``, else the one of ``twophase services up --spark-connect``
(when it reaches the same S3 and ships the current sources), else one started for the module
(:func:`~twophase.integration.services.connect_service.spark_connect_service`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from twophase.integration.services.connect_service import spark_connect_service
from twophase.integration.services.s3 import S3Endpoint

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession


@pytest.fixture(scope="module")
def connect_url(s3_endpoint: S3Endpoint) -> Iterator[str]:
    """``TWOPHASE_SPARK_CONNECT``, a server from ``services up --spark-connect``, or a native one
    (local[2]) for this module; the sinks it runs reach MinIO through the standard AWS variables
    in its environment."""
    with spark_connect_service(s3_endpoint) as url:
        yield url


@pytest.fixture(scope="module")
def remote(connect_url: str) -> Iterator[SparkSession]:
    """A Spark Connect client session. Built by the Connect module's own builder: the classic
    builder refuses a remote session in a process that already runs a classic one (the test
    session's ``spark``), while a Connect client needs no JVM and can live beside it."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(connect_url).create()
    yield session
    session.stop()
