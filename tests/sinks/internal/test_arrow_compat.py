"""The pyarrow seam: view-type predicates that are False on a pyarrow without view types."""

from __future__ import annotations

import pyarrow as pa
import pytest

from twophase.sinks.internal import arrow_compat


def test_plain_types_are_no_views() -> None:
    assert not arrow_compat.is_string_view(pa.string())
    assert not arrow_compat.is_binary_view(pa.binary())


@pytest.mark.skipif(not hasattr(pa, "string_view"), reason="this pyarrow has no view types")
def test_view_types_are_views() -> None:
    assert arrow_compat.is_string_view(pa.string_view())
    assert arrow_compat.is_binary_view(pa.binary_view())


def test_a_pyarrow_without_view_types_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(pa.types, "is_string_view")  # pyarrow 14.0.1
    monkeypatch.delattr(pa.types, "is_binary_view")
    assert not arrow_compat.is_string_view(pa.string())
    assert not arrow_compat.is_binary_view(pa.large_binary())
