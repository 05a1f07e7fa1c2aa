"""What differs between the pyarrow releases twophase runs on (14.0.1 and later), handled once.

The platforms ship older pyarrow than pip resolves (Databricks 15.4 LTS has 14.0.1), so the sinks
use the API of 14.0.1 and ask here for what came later: the view types' predicates
(``pa.types.is_string_view`` and ``is_binary_view``, absent from 14.0.1; a pyarrow without them
cannot make such a column, so a type is never one). ``S3FileSystem``'s newer keywords are passed
only when a setting needs them (see the Delta sink's file system).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

_Predicate = Callable[[pa.DataType], bool]


def _never(t: pa.DataType) -> bool:
    return False


def is_string_view(t: pa.DataType) -> bool:
    """Whether ``t`` is ``string_view`` (``False`` on a pyarrow without view types)."""
    test: _Predicate = getattr(pa.types, "is_string_view", _never)
    return bool(test(t))


def is_binary_view(t: pa.DataType) -> bool:
    """Whether ``t`` is ``binary_view`` (``False`` on a pyarrow without view types)."""
    test: _Predicate = getattr(pa.types, "is_binary_view", _never)
    return bool(test(t))
