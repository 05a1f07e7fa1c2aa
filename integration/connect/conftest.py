"""A Spark Connect server whose Python workers get twophase only from the shipped wheel.

The server's workers run a Python with twophase's dependencies but not twophase
(:func:`~twophase.integration.spark_shipping.executor_python`); the wheel reaches them by
``--py-files`` under a ``.zip`` name. Spark's data source lookup then finds the wheel's top-level
``pyspark_twophase`` module on their path: ``.format("twophase")`` works with no ``register``
call, as for a user who installed the wheel.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from twophase.integration.services.s3 import S3Endpoint
from twophase.integration.services.spark_connect import SparkConnectServer, spark_connect_from_env
from twophase.integration.spark_shipping import build_wheel, executor_python, py_file

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: S3Endpoint) -> Iterator[str]:
    """``TWOPHASE_SPARK_CONNECT``, or a native server (local[2]) for this module; the sinks it
    runs reach MinIO through the standard AWS variables in its environment."""
    given = spark_connect_from_env()
    if given is not None:
        yield given
        return
    root = tmp_path_factory.mktemp("spark-connect")
    wheel = py_file(build_wheel())
    server = SparkConnectServer(
        root, python=str(executor_python()), py_files=[wheel], env=s3_endpoint.aws_env()
    )
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def remote(connect_url: str) -> Iterator[SparkSession]:
    """A Spark Connect client session. Built by the Connect module's own builder: the classic
    builder refuses a remote session in a process that already runs a classic one (the test
    session's ``spark``), while a Connect client needs no JVM and can live beside it."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(connect_url).create()
    yield session
    session.stop()
