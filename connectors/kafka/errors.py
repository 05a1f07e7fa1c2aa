"""Errors specific to the Kafka connector (all derive from :class:`twophase.sinks.errors.TwoPhaseError`)."""

from __future__ import annotations

from twophase.sinks.errors import RefusedError, TwoPhaseError


class KafkaTransactionError(TwoPhaseError, RuntimeError):
    """A Kafka transaction cannot go on: the task fails and its transaction is never committed.

    Raised for delivery errors (records are never silently dropped), a producer fenced or bumped
    while writing, statistics that never reported the producer id, or an EndTxn(abort) that
    failed for good. The message names the transactional id.
    """


class KafkaAuthenticationError(RefusedError):
    """The brokers refused this client's login or TLS: a wrong password or user, a SASL mechanism
    the listener does not take, or a broker certificate the configured CA does not verify.

    Raised before anything is written (the driver's start-up check) or as the failure of the
    epoch that met it; a :class:`~twophase.sinks.errors.RefusedError`, so never retried and never
    restarted. The one-line message names the listener (security protocol and address),
    the mechanism and user, and the setting to change; never a password or token.
    """


class KafkaAuthorizationError(RefusedError):
    """The brokers denied an operation for want of an ACL (``StandardAuthorizer`` / KIP-801).

    A :class:`~twophase.sinks.errors.RefusedError`: never retried and never restarted, the job
    ends with :class:`~twophase.sinks.errors.JobRefusedError`.

    The one-line message names the principal, the operation and the resource (for example
    ``Write on TransactionalId 'job-out-0-1'``) and the ACL to add (``docs/secured-kafka.md``).
    """
