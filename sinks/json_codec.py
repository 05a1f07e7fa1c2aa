"""One JSON encoding of row values for every sink that writes JSON: S3 JSON lines and the Kafka
sink's ``json`` format encode the same row to the same text.

The output is always valid JSON (RFC 8259):

- NaN and ±Infinity, which JSON has no tokens for, become ``null`` (``non_finite="null"``, the
  default) or raise :class:`NonFiniteFloatError` (``non_finite="error"``), at any depth;
- timestamps as ISO-8601 (``2024-01-02T03:04:05.000006+00:00``; with an offset when the Arrow
  type has a time zone, which Spark's always has), dates and times as ISO-8601;
- decimals as strings (no precision lost to binary floats);
- binary as base64 (standard alphabet, padded);
- durations as seconds (a number);
- structs as objects, lists and maps (as lists of ``[key, value]`` pairs, Arrow's Python form) as
  arrays; keys as given.

Compact separators, UTF-8 kept as is (``ensure_ascii=False``).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from typing import Any

NON_FINITE_CHOICES = ("null", "error")
"""What ``non_finite`` may be."""


class NonFiniteFloatError(ValueError):
    """A value holds NaN or ±Infinity and ``non_finite="error"`` was asked for."""


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def encode_json(value: Any, non_finite: str = "null") -> str:
    """``value`` (a Python value as Arrow's ``to_pylist`` gives it) as compact JSON text.

    Raises:
        NonFiniteFloatError: NaN or ±Infinity with ``non_finite="error"``.
        TypeError: a value of a type JSON cannot carry.
        ValueError: ``non_finite`` is not one of :data:`NON_FINITE_CHOICES`.
    """
    if non_finite not in NON_FINITE_CHOICES:
        raise ValueError(f"non_finite must be one of {NON_FINITE_CHOICES}, got {non_finite!r}")
    try:  # the common case: one pass, no copy
        return json.dumps(value, default=_default, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as e:
        if non_finite == "error":
            raise NonFiniteFloatError(f"NaN or Infinity is not JSON: {e}") from None
    return json.dumps(
        _finite(value), default=_default, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
