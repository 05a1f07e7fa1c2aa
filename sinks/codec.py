"""Committable encoding: frozen dataclasses to versioned JSON and back. Never pickle.

Checkpoint metadata is read back after crashes, possibly by another process and another release,
and whoever can write the checkpoint directory must not be able to run code through it. So every
committable is a frozen dataclass of plain fields (str, int, float, bool, bytes, None, tuples,
nested frozen dataclasses, string-keyed mappings) and is stored as::

    {"kind": "<kind>", "version": <int>, "body": {<fields>}}

``bytes`` fields are stored as ``{"$b64": "..."}``. A payload of another kind or a newer version
than the codec knows raises :class:`~twophase.sinks.errors.CommittableDecodeError`.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from twophase.sinks.errors import CommittableDecodeError

T = TypeVar("T")


class CommittableCodec(Generic[T]):
    """Encodes one frozen dataclass type as versioned JSON.

    Args:
        cls: the committable's frozen dataclass type.
        kind: a stable name for the type, stored in every payload (e.g. ``"kafka.transaction"``).
        version: the current encoding version (≥ 1); payloads of a higher version are refused.
        upgraders: functions ``{old_version: fn(body) -> body}`` that migrate older bodies one
            version up, so checkpoints of older releases stay readable.

    Raises:
        TypeError: ``cls`` is not a frozen dataclass.
    """

    def __init__(
        self,
        cls: type[T],
        kind: str,
        version: int = 1,
        upgraders: Mapping[int, typing.Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
    ) -> None:
        if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            raise TypeError(f"{cls!r} must be a frozen dataclass")
        if version < 1:
            raise ValueError("version must be >= 1")
        self.cls = cls
        self.kind = kind
        self.version = version
        self._upgraders = dict(upgraders or {})

    def to_json(self, value: T) -> dict[str, Any]:
        """Encode ``value`` as a JSON-able dict ``{"kind", "version", "body"}``."""
        if not isinstance(value, self.cls):
            raise TypeError(f"expected {self.cls.__name__}, got {type(value).__name__}")
        return {"kind": self.kind, "version": self.version, "body": _encode(value)}

    def from_json(self, payload: Mapping[str, Any]) -> T:
        """Decode a payload made by :meth:`to_json` (of this or an older version).

        Raises:
            CommittableDecodeError: wrong kind, unknown version, missing or mistyped fields.
        """
        try:
            kind, version, body = payload["kind"], payload["version"], payload["body"]
        except (KeyError, TypeError) as e:
            raise CommittableDecodeError(f"not a committable payload: {payload!r:.200}") from e
        if kind != self.kind:
            raise CommittableDecodeError(f"expected committable kind {self.kind!r}, got {kind!r}")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1 or version > self.version:
            raise CommittableDecodeError(
                f"{self.kind}: unsupported version {version!r} (this release reads 1..{self.version})"
            )
        body = dict(body)
        while version < self.version:
            upgrade = self._upgraders.get(version)
            if upgrade is None:
                raise CommittableDecodeError(f"{self.kind}: no upgrade from version {version}")
            body = upgrade(body)
            version += 1
        try:
            return typing.cast(T, _decode(self.cls, body))
        except (TypeError, ValueError, KeyError) as e:
            raise CommittableDecodeError(f"{self.kind}: invalid body: {e}") from e

    def dumps(self, value: T) -> str:
        """Encode ``value`` as a compact JSON string."""
        return json.dumps(self.to_json(value), separators=(",", ":"), sort_keys=True)

    def loads(self, text: str | bytes) -> T:
        """Decode a JSON string made by :meth:`dumps`.

        Raises:
            CommittableDecodeError: not JSON, or not a valid payload.
        """
        try:
            payload = json.loads(text)
        except ValueError as e:
            raise CommittableDecodeError(f"{self.kind}: not JSON: {e}") from e
        return self.from_json(payload)


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return {"$b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (tuple, list, frozenset)):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot encode {type(value).__name__} in a committable")


@functools.cache
def _dataclass_fields(tp: type) -> tuple[tuple[str, Any, bool], ...]:
    """``(name, resolved type hint, required)`` per field of dataclass ``tp``, computed once per
    type: ``typing.get_type_hints`` evaluates every string annotation (``from __future__ import
    annotations``) at each call, which dominated decoding (issue #29: 10⁵ committables)."""
    hints = typing.get_type_hints(tp)
    return tuple(
        (
            f.name,
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(tp)
    )


@functools.cache
def _cached_shape(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    return typing.get_origin(tp), typing.get_args(tp)


def _shape(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(typing.get_origin(tp), typing.get_args(tp))``, cached per (hashable) type."""
    try:
        return _cached_shape(tp)
    except TypeError:  # an unhashable annotation: computed each time
        return typing.get_origin(tp), typing.get_args(tp)


@functools.cache
def _cached_is_dataclass_type(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def _is_dataclass_type(tp: Any) -> bool:
    """Whether ``tp`` is a dataclass type (not an instance), cached per (hashable) type."""
    try:
        return _cached_is_dataclass_type(tp)
    except TypeError:
        return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def _decode(tp: Any, raw: Any) -> Any:
    if tp is str or tp is int or tp is bool:  # the common leaves first (same check as below)
        # bool is an int in Python; keep them apart so a mistyped payload is refused.
        if type(raw) is not tp:
            raise TypeError(f"expected {tp.__name__}, got {raw!r:.80}")
        return raw
    origin, args = _shape(tp)
    if tp is Any:
        return raw
    if origin in (typing.Union, types.UnionType):
        if raw is None and type(None) in args:
            return None
        errors: list[Exception] = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _decode(arg, raw)
            except (TypeError, ValueError, KeyError) as e:
                errors.append(e)
        raise ValueError(f"{raw!r:.80} matches none of {tp}: {errors}")
    if _is_dataclass_type(tp):
        if not isinstance(raw, Mapping):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(raw).__name__}")
        kwargs = {}
        for name, hint, required in _dataclass_fields(tp):
            if name in raw:
                kwargs[name] = _decode(hint, raw[name])
            elif required:
                raise KeyError(f"{tp.__name__}.{name} missing")
        return tp(**kwargs)
    if origin is tuple:
        if not isinstance(raw, list):
            raise TypeError(f"expected a list for {tp}, got {type(raw).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v) for v in raw)
        if len(args) != len(raw):
            raise ValueError(f"expected {len(args)} items for {tp}, got {len(raw)}")
        return tuple(_decode(a, v) for a, v in zip(args, raw, strict=True))
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
        if not isinstance(raw, Mapping):
            raise TypeError(f"expected an object for {tp}, got {type(raw).__name__}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _decode(vt, v) for k, v in raw.items()}
    if tp is bytes:
        if not (isinstance(raw, Mapping) and "$b64" in raw):
            raise TypeError(f"expected bytes, got {raw!r:.80}")
        return base64.b64decode(raw["$b64"], validate=True)
    if tp is float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise TypeError(f"expected a number, got {raw!r:.80}")
        return float(raw)
    if tp is type(None):
        if raw is not None:
            raise TypeError(f"expected null, got {raw!r:.80}")
        return None
    raise TypeError(f"unsupported committable field type {tp}")
