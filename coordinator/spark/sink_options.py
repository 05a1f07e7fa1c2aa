"""Sink configurations from string options, as a Spark data source receives them.

Spark hands a Python data source its ``.option(k, v)`` pairs with lower-cased keys and string
values. :func:`config_from_options` builds a frozen config dataclass from them by its field
types, so that every field of a connector's config (the class its declaration names,
:mod:`twophase.sinks.registry`) is reachable as an option:

- ``str``, ``int``, ``float``; ``bool`` as ``true``/``false``; enums and literals by value;
- ``X | None``: ``none`` or ``null`` for ``None``;
- ``tuple[str, ...]``: comma-separated (``partition_by=origin,month``; empty for ``()``);
- mappings: a JSON object (keys keep their case, which option keys lose);
- a nested config dataclass: one option per field, ``<field>.<name>`` (``rolling.max_file_bytes``);
  an :class:`~twophase.sinks.s3_options.S3Options` field takes ``s3.<name>`` (``s3.endpoint_url``).

The config's own validation then runs; every failure is a :class:`ConfigError` naming the option.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options, parse_bool

T = TypeVar("T")

S3_PREFIX = "s3."
"""Options of an :class:`S3Options` field (shared with the checkpoint storage's)."""
_NONE = frozenset({"none", "null"})


def config_from_options(cls: type[T], options: Mapping[str, str]) -> tuple[T, set[str]]:
    """Build ``cls`` (a dataclass) from ``options`` (keys compared lower-cased).

    Returns:
        The config, and the option keys (lower-cased) it used, so that callers can refuse the rest.

    Raises:
        ConfigError: a value of the wrong type (naming the option), or the config's own validation.
    """
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    used: set[str] = set()
    values = _fields(cls, lowered, "", used)
    try:
        return cls(**values), used
    except TypeError as exc:  # a required field without its option
        raise ConfigError(f"{cls.__name__}: {exc}") from None


def option_names(cls: type[Any]) -> list[str]:
    """Every option ``cls`` accepts (nested configs expanded), for documentation and messages."""
    names: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        nested = _nested_class(hints[f.name])
        if nested is not None:
            prefix = S3_PREFIX if nested is S3Options else f"{f.name}."
            names.extend(prefix + n for n in option_names(nested))
        else:
            names.append(f.name)
    return names


def _fields(cls: type[Any], options: Mapping[str, str], prefix: str, used: set[str]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nested = _nested_class(hint)
        if nested is S3Options:  # strict: an unknown s3.* key is refused by name
            if any(k.startswith(S3_PREFIX) for k in options):
                values[f.name] = S3Options.from_strings(options, S3_PREFIX)
                used.update(k for k in options if k.startswith(S3_PREFIX))
            continue
        if nested is not None:
            sub = f"{prefix}{f.name}."
            if any(k.startswith(sub) for k in options):
                values[f.name] = nested(**_fields(nested, options, sub, used))
            continue
        key = f"{prefix}{f.name}"
        if key in options:
            used.add(key)
            values[f.name] = parse_value(key, options[key], hint)
    return values


def _nested_class(hint: Any) -> type[Any] | None:
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and S3Options in typing.get_args(hint):
        return S3Options  # one store's options of several (S3, Azure, GCS): options reach S3's
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def parse_value(key: str, raw: str, hint: Any) -> Any:
    """``raw`` as the type ``hint`` describes (see the module docstring).

    Raises:
        ConfigError: ``raw`` does not fit, naming ``key``.
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if raw.strip().lower() in _NONE and len(kinds) < len(args):
            return None
        errors = []
        for kind in kinds:
            try:
                return parse_value(key, raw, kind)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"option {key!r}: cannot parse {raw!r}")
    if origin is typing.Literal:
        if raw in args:
            return raw
        raise ConfigError(f"option {key!r} must be one of {list(args)}, got {raw!r}")
    if origin is tuple:
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    if origin in (Mapping, dict) or hint in (Mapping, dict):  # get_origin gives the collections.abc class
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ConfigError(f'option {key!r} must be a JSON object, e.g. \'{{"k": "v"}}\'')
        return parsed
    if hint is bool:
        return parse_bool(key, raw)
    if hint in (int, float):
        try:
            return hint(raw.strip())
        except ValueError:
            raise ConfigError(f"option {key!r} must be a number ({hint.__name__}), got {raw!r}") from None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(raw.strip().lower())
        except ValueError:
            raise ConfigError(
                f"option {key!r} must be one of {[m.value for m in hint]}, got {raw!r}"
            ) from None
    if hint is str:
        return raw
    raise ConfigError(f"option {key!r}: fields of type {hint!r} cannot be set by an option")
