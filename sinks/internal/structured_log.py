"""Structured log events: the fields are written once and reach both the message and the record.

``log_event(log, logging.INFO, "checkpoint completed", job=j, checkpoint=7, persist_ms=1.5)`` logs
``checkpoint completed job=j checkpoint=7 persist_ms=1.5`` and sets ``record.job``,
``record.checkpoint`` and ``record.persist_ms``, so that a JSON log formatter or a log shipper
can index them (the project's fields: job, sink, checkpoint, partition, attempt). The text is
built only when the level is enabled.
"""

from __future__ import annotations

import logging

_RESERVED = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def _text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def log_event(
    logger: logging.Logger, level: int, event: str, /, *, exc_info: bool = False, **fields: object
) -> None:
    """Log ``event`` followed by ``key=value`` for every field, with the fields as record attributes.

    Args:
        logger: where to log.
        level: a ``logging`` level.
        event: what happened, in a few words (no values in it).
        exc_info: attach the exception being handled (as ``logger.exception`` does).
        fields: the structured fields; floats are shown with one decimal (ms). A field whose
            name clashes with a ``LogRecord`` attribute is set as ``field_<name>``.
    """
    if not logger.isEnabledFor(level):
        return
    text = " ".join(f"{k}={_text(v)}" for k, v in fields.items())
    extra = {(f"field_{k}" if k in _RESERVED else k): v for k, v in fields.items()}
    logger.log(level, "%s %s", event, text, extra=extra, exc_info=exc_info, stacklevel=2)
