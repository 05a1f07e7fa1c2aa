"""Errors specific to the Kafka connector (all derive from :class:`twophase.sinks.errors.TwoPhaseError`)."""

from __future__ import annotations

from twophase.sinks.errors import TwoPhaseError


class KafkaTransactionError(TwoPhaseError, RuntimeError):
    """A Kafka transaction cannot go on: the task fails and its transaction is never committed.

    Raised for delivery errors (records are never silently dropped), a producer fenced or bumped
    while writing, statistics that never reported the producer id, or an EndTxn(abort) that
    failed for good. The message names the transactional id.
    """
