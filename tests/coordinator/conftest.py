"""Fixtures shared by the coordinator tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from support.model_settle import lanes_in_order

from twophase.coordinator.checkpoint import driver_finish
from twophase.coordinator.commit import committer_operator


@pytest.fixture
def quiet_twophase_logs() -> Iterator[None]:
    """Only CRITICAL records of the ``twophase`` loggers: long model runs log millions of lines
    and only failures matter there."""
    logger = logging.getLogger("twophase")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.fixture
def lanes_in_one_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The committer's and the driver's finish lanes run in one fixed schedule
    (:func:`~support.model_settle.lanes_in_order`): the model-based tests need every drawn life
    to go one way."""
    monkeypatch.setattr(committer_operator, "run_lanes", lanes_in_order)
    monkeypatch.setattr(driver_finish, "run_lanes", lanes_in_order)
