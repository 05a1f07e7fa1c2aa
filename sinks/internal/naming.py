"""Naming rules shared by file-writing connectors: Hive-style partition folders, as Spark writes them.

Pure functions; Spark, Hive and Delta readers parse these folder names back (Delta PROTOCOL.md
stores partition values separately, but Spark-compatible writers still lay files out this way).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""The folder value Spark and Hive write for a null partition value."""

_CHARS_TO_ESCAPE = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))


def escape_path_name(value: str) -> str:
    """Escape one partition column name or value for a folder name as Hive's ``escapePathName``
    does: each character of ``"#%'*/:=?\\{[]^``, DEL and the control characters becomes ``%XX``."""
    return "".join(f"%{ord(ch):02X}" if ch in _CHARS_TO_ESCAPE else ch for ch in value)


def unescape_path_name(value: str) -> str:
    """Inverse of :func:`escape_path_name`."""
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m[1], 16)), value)


def hive_partition_path(columns: Sequence[str], values: Sequence[str | None]) -> str:
    """``col1=v1/col2=v2`` for partition values already printed as strings (``None`` → the Hive
    default partition); ``""`` without columns.

    Raises:
        ValueError: ``columns`` and ``values`` differ in length.
    """
    if len(columns) != len(values):
        raise ValueError(f"{len(columns)} partition columns but {len(values)} values")
    return "/".join(
        f"{escape_path_name(c)}={HIVE_DEFAULT_PARTITION if v is None else escape_path_name(v)}"
        for c, v in zip(columns, values, strict=True)
    )
