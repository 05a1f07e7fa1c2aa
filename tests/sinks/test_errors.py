"""error_summary: the one line a wrapping message shows for an error."""

from __future__ import annotations

from twophase.sinks.errors import ConfigError, error_summary


class PythonException(Exception):
    """Stands for pyspark's exception of a failed Python worker: its message is a traceback."""


WORKER_TRACEBACK = """
  An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/opt/spark/python/pyspark/worker.py", line 1900, in main
    process()
  File "/work/connectors/kafka/writer.py", line 240, in pre_commit
    raise KafkaAuthorizationError(message)
twophase.connectors.kafka.errors.KafkaAuthorizationError: Kafka denied Write on topic 'orders' to User:sink
"""


def test_a_worker_traceback_gives_its_last_error_line() -> None:
    assert error_summary(PythonException(WORKER_TRACEBACK)) == (
        "twophase.connectors.kafka.errors.KafkaAuthorizationError: "
        "Kafka denied Write on topic 'orders' to User:sink"
    )


def test_a_plain_error_gives_its_type_and_first_line() -> None:
    assert error_summary(ConfigError("bad option 'x'\nmore detail")) == "ConfigError: bad option 'x'"
    assert error_summary(RuntimeError()) == "RuntimeError"


def test_a_traceback_without_an_error_line_falls_back_to_the_first_line() -> None:
    assert error_summary(PythonException("Traceback (most recent call last):\n  File x")).startswith(
        "PythonException: Traceback"
    )
