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

    @property
    def readable_versions(self) -> frozenset[int]:
        """The versions :meth:`from_json` reads: this one, and each older one with upgraders from
        it up to this one."""
        readable = {self.version}
        v = self.version - 1
        while v >= 1 and v in self._upgraders:
            readable.add(v)
            v -= 1
        return frozenset(readable)

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


Decoder = typing.Callable[[Any], Any]


def _decode(tp: Any, raw: Any) -> Any:
    return _decoder(tp)(raw)


def _decoder(tp: Any) -> Decoder:
    """The decoder of type hint ``tp``, built once per (hashable) hint: the type is inspected
    when the decoder is built, not at every value (issue #29: 3·10⁵ committables per epoch)."""
    try:
        return _cached_decoder(tp)
    except TypeError:  # an unhashable annotation: built each time
        return _build_decoder(tp)


@functools.cache
def _cached_decoder(tp: Any) -> Decoder:
    return _build_decoder(tp)


def _build_decoder(tp: Any) -> Decoder:
    if tp is str or tp is int or tp is bool:
        # bool is an int in Python; keep them apart so a mistyped payload is refused.
        def leaf(raw: Any) -> Any:
            if type(raw) is not tp:
                raise TypeError(f"expected {tp.__name__}, got {raw!r:.80}")
            return raw

        return leaf
    if tp is Any:
        return lambda raw: raw
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _union_decoder(tp, args)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_decoder(tp)
    if origin is tuple:
        return _tuple_decoder(tp, args)
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
        value = _decoder(args[1]) if len(args) == 2 else _decoder(Any)

        def mapping(raw: Any) -> Any:
            if type(raw) is not dict and not isinstance(raw, Mapping):
                raise TypeError(f"expected an object for {tp}, got {type(raw).__name__}")
            return {str(k): value(v) for k, v in raw.items()}

        return mapping
    if tp is bytes:
        return _bytes
    if tp is float:
        return _float
    if tp is type(None):
        return _null
    raise TypeError(f"unsupported committable field type {tp}")


def _union_decoder(tp: Any, args: tuple[Any, ...]) -> Decoder:
    optional = type(None) in args
    alternatives = [_decoder(a) for a in args if a is not type(None)]

    def union(raw: Any) -> Any:
        if raw is None and optional:
            return None
        errors: list[Exception] = []
        for alternative in alternatives:
            try:
                return alternative(raw)
            except (TypeError, ValueError, KeyError) as e:
                errors.append(e)
        raise ValueError(f"{raw!r:.80} matches none of {tp}: {errors}")

    return union


def _dataclass_decoder(tp: type) -> Decoder:
    fields: tuple[tuple[str, Decoder, bool], ...] | None = None

    def dataclass(raw: Any) -> Any:
        nonlocal fields
        if type(raw) is not dict and not isinstance(raw, Mapping):  # parsed JSON: a dict, no ABC check
            raise TypeError(f"expected an object for {tp.__name__}, got {type(raw).__name__}")
        if fields is None:  # resolved at the first value: a field may name this very type
            fields = tuple((name, _decoder(hint), required) for name, hint, required in _dataclass_fields(tp))
        kwargs = {}
        for name, decode, required in fields:
            if name in raw:
                kwargs[name] = decode(raw[name])
            elif required:
                raise KeyError(f"{tp.__name__}.{name} missing")
        return tp(**kwargs)

    return dataclass


def _tuple_decoder(tp: Any, args: tuple[Any, ...]) -> Decoder:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])

        def variadic(raw: Any) -> Any:
            if not isinstance(raw, list):
                raise TypeError(f"expected a list for {tp}, got {type(raw).__name__}")
            return tuple([item(v) for v in raw])

        return variadic
    items = [_decoder(a) for a in args]
    if len(items) == 2:  # (key, value) pairs are most of the fixed-length tuples: no zip
        first, second = items

        def pair(raw: Any) -> Any:
            if not isinstance(raw, list):
                raise TypeError(f"expected a list for {tp}, got {type(raw).__name__}")
            if len(raw) != 2:
                raise ValueError(f"expected 2 items for {tp}, got {len(raw)}")
            return (first(raw[0]), second(raw[1]))

        return pair

    def fixed(raw: Any) -> Any:
        if not isinstance(raw, list):
            raise TypeError(f"expected a list for {tp}, got {type(raw).__name__}")
        if len(items) != len(raw):
            raise ValueError(f"expected {len(items)} items for {tp}, got {len(raw)}")
        return tuple(decode(v) for decode, v in zip(items, raw, strict=True))

    return fixed


def _bytes(raw: Any) -> bytes:
    if not ((type(raw) is dict or isinstance(raw, Mapping)) and "$b64" in raw):
        raise TypeError(f"expected bytes, got {raw!r:.80}")
    return base64.b64decode(raw["$b64"], validate=True)


def _float(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise TypeError(f"expected a number, got {raw!r:.80}")
    return float(raw)


def _null(raw: Any) -> None:
    if raw is not None:
        raise TypeError(f"expected null, got {raw!r:.80}")
