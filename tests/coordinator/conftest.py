"""Fixtures shared by the coordinator tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def quiet_twophase_logs() -> Iterator[None]:
    """Only CRITICAL records of the ``twophase`` loggers: long model runs log millions of lines
    and only failures matter there."""
    logger = logging.getLogger("twophase")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)
