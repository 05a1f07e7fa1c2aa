"""Fixtures of the secured-Kafka tests (#27 items 1 to 4): one native KRaft broker with a
SASL_SSL listener (SCRAM-SHA-512, PLAIN, and OAUTHBEARER with Kafka's unsecured JWS validator),
a CA made at start-up and ``StandardAuthorizer`` without allow-everyone, for the whole session;
stopped and its folder (keys, passwords) removed at the end.

Each test gets a fresh topic and transactional-id prefix (:class:`Grants`); users are made at
start-up, since PLAIN users live in the listener's JAAS configuration:

- ``sink``: Write and Describe on a test's topic and transactional-id prefix (what the
  documentation says the sink needs), granted per test;
- ``reader``: Read on a test's topic and on the read-back consumer groups, nothing else;
- ``txnonly``: only the transactional-id prefix ACLs;
  ``topiconly``: only the topic ACLs; ``describeonly``: the topic ACLs and Describe (not Write)
  on the prefix; ``topicdescribe``: the prefix ACLs and Describe (not Write) on the topic;
  ``nocreate``: the sink's ACLs, for a topic that does not
  exist (CreateTopics is denied).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from twophase.integration.services.secured_kafka import SecuredKafka, start_secured_kafka

USERS = ("sink", "reader", "txnonly", "topiconly", "nocreate", "describeonly", "topicdescribe")


@pytest.fixture(scope="session")
def secured_kafka() -> Iterator[SecuredKafka]:
    """The secured broker for the whole session (see the module docstring)."""
    broker = start_secured_kafka(USERS, oauthbearer=True)
    try:
        yield broker
    finally:
        broker.stop()


@dataclass(frozen=True)
class Grants:
    """A test's own topic (2 partitions) and transactional-id prefix, with the sink's and the
    reader's ACLs granted."""

    topic: str
    prefix: str


@pytest.fixture
def grants(secured_kafka: SecuredKafka) -> Grants:
    """A fresh topic and prefix; ``sink`` and ``reader`` get their ACLs on them."""
    tag = uuid.uuid4().hex[:8]
    topic, prefix = f"secured-{tag}", f"eo-{tag}"
    secured_kafka.create_topic(topic, partitions=2)
    secured_kafka.grant_sink("sink", topic, f"{prefix}-")
    secured_kafka.grant_reader("reader", topic)
    return Grants(topic, prefix)
