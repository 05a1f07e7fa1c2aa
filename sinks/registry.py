"""Connectors declare themselves once; the runtime, the data source and the CLI read the declarations.

Each connector package holds a ``declaration`` module whose ``DECLARATION`` is a
:class:`ConnectorDeclaration`: its kind (``.option("sink", kind)``), its config and sink classes,
the pip extra that brings its client libraries, the names ``twophase`` re-exports, the function
that lists what it left behind (``twophase lingering``) and the options the data source maps onto
its fields. :data:`CONNECTORS` finds the declarations of the packages under
``twophase.connectors`` (a package there without one, such as the object-store file layer the
file sinks share, is no connector) and of the ``twophase.connectors`` entry-point group (a connector shipped
in its own distribution), and takes more by :meth:`ConnectorRegistry.register`. Nothing outside a
connector's folder names it: adding one touches its folder (and the docs).

A declaration refers to its classes as ``"module:attribute"`` strings, loaded on first use, so
reading every declaration imports no connector's client library; a library that its extra brings
and that is missing raises :class:`~twophase.sinks.errors.MissingExtraError`, naming the
``pip install 'twophase[<extra>]'`` to run.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pkgutil
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConfigError, MissingExtraError
from twophase.sinks.listing import SinkLingering

AnySink = TwoPhaseCommitSink[Any, Any]

CONNECTORS_PACKAGE = "twophase.connectors"
"""The package whose sub-packages are this distribution's connectors."""
DECLARATION_MODULE = "declaration"
"""The module of a connector package that holds its ``DECLARATION``."""
ENTRY_POINT_GROUP = "twophase.connectors"
"""Entry points of this group name a :class:`ConnectorDeclaration` of another distribution."""

_KIND = re.compile(r"[a-z][a-z0-9_]*")
_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class ConnectorDeclaration:
    """Everything the runtime, the data source and the CLI need to know of one connector.

    Attributes:
        kind: the connector's name, lower case: ``.option("sink", kind)`` and the lingering
            listing's ``type`` (e.g. ``"kafka"``).
        title: its name in messages (e.g. ``"Kafka"``).
        package: the connector's package; ``exports`` are relative to it.
        config: ``"module:Class"`` of its config dataclass (every field is a data-source option).
        sink: ``"module:Class"`` of its sink, built as ``Class(name, config)`` (:meth:`build_sink`).
        extra: the pip extra that brings its client libraries (``pip install 'twophase[extra]'``),
            or ``None`` when the core install has everything it needs.
        requirements: the extra's requirements with their version ranges (PEP 508,
            ``("confluent-kafka>=2.10,<3", ...)``): what ``pip install 'twophase[extra]'`` brings.
            setup.py builds the extra (and the ``dev`` extra) from them, reading the declaration's
            source, so write them as a literal tuple of strings.
        libraries: import name (top level) → distribution, of what the extra brings
            (``{"confluent_kafka": "confluent-kafka"}``); a missing one is a
            :class:`MissingExtraError` naming the distribution.
        exports: public name → module relative to ``package`` (``"KafkaSink": "sink"``; ``""`` for
            the package itself): what the package exports, loaded on first use.
        top_level: the names of ``exports`` that ``twophase`` itself re-exports.
        listing: ``"module:function"`` listing what a sink left behind, called as
            ``function(sink, scope) -> SinkLingering``; ``None``: the sink cannot be listed.
        mapping_options: data-source option prefix → the config's mapping field that takes
            ``<prefix><key>`` options as keys (``{"kafka.": "client_config"}``); such options win
            over the same keys in the field's own JSON option.

    Raises:
        ConfigError: a kind that is not a lower-case identifier, or a reference not of the form
            ``module:attribute``.
    """

    kind: str
    title: str
    package: str
    config: str
    sink: str
    extra: str | None = None
    requirements: tuple[str, ...] = ()
    libraries: Mapping[str, str] = field(default_factory=dict)
    exports: Mapping[str, str] = field(default_factory=dict)
    top_level: tuple[str, ...] = ()
    listing: str | None = None
    mapping_options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _KIND.fullmatch(self.kind):
            raise ConfigError(f"connector kind {self.kind!r} must be a lower-case identifier, e.g. 'kafka'")
        for ref in (self.config, self.sink, *([self.listing] if self.listing else [])):
            if not _REF.fullmatch(ref):
                raise ConfigError(f"connector {self.kind!r}: {ref!r} is not 'module:attribute'")
        if self.requirements and self.extra is None:
            raise ConfigError(f"connector {self.kind!r}: requirements need an extra to install them with")
        unknown = sorted(set(self.top_level) - set(self.exports))
        if unknown:
            raise ConfigError(f"connector {self.kind!r}: top_level names {unknown} are not in its exports")

    def load(self, ref: str) -> Any:
        """The attribute ``ref`` (``"module:attribute"``) names, its module imported on first use.

        Raises:
            MissingExtraError: the import needs one of :attr:`libraries`, which is not installed.
        """
        module_name, _, attr = ref.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            top = (e.name or "").split(".")[0]
            if self.extra is not None and top in self.libraries:
                raise MissingExtraError(self.kind, self.extra, self.libraries[top]) from None
            raise
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj

    def config_class(self) -> type[Any]:
        """The config dataclass (imports the connector).

        Raises:
            MissingExtraError: its extra is not installed.
        """
        cls: type[Any] = self.load(self.config)
        return cls

    def sink_class(self) -> type[AnySink]:
        """The sink class (imports the connector).

        Raises:
            MissingExtraError: its extra is not installed.
        """
        cls: type[AnySink] = self.load(self.sink)
        return cls

    def build_sink(self, name: str, config: Any) -> AnySink:
        """The sink ``name`` with ``config`` (an instance of :meth:`config_class`), as the sink class
        is built: ``Class(name, config)``.

        Raises:
            MissingExtraError: its extra is not installed.
            ConfigError: the sink refuses the config.
        """
        build: Callable[[str, Any], AnySink] = self.load(self.sink)
        return build(name, config)

    def loaded_sink_class(self) -> type[AnySink] | None:
        """The sink class if its module is already imported, else ``None``: no sink of a connector
        that was never imported can exist, and importing it may need a missing extra."""
        module_name, _, attr = self.sink.partition(":")
        module = sys.modules.get(module_name)
        if module is None:
            return None
        cls: type[AnySink] = getattr(module, attr)
        return cls

    def export(self, name: str) -> Any:
        """The public name ``name`` of the connector's package (:attr:`exports`).

        Raises:
            AttributeError: the package exports no such name.
            MissingExtraError: its extra is not installed.
        """
        module = self.exports.get(name)
        if module is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        return self.load(f"{self.package}.{module}:{name}" if module else f"{self.package}:{name}")

    def lazy_exports(
        self, namespace: dict[str, Any], public: list[str]
    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
        """``__getattr__`` and ``__dir__`` for the connector's package (PEP 562): each name of
        :attr:`exports` loads on first use and is kept in ``namespace`` (the package's globals);
        ``public`` is its ``__all__``. Use: ``__getattr__, __dir__ = DECLARATION.lazy_exports(globals(),
        __all__)``."""

        def getattr_(name: str) -> Any:
            value = self.export(name)
            namespace[name] = value
            return value

        def dir_() -> list[str]:
            return sorted([*namespace, *public])

        return getattr_, dir_

    def list_lingering(self, sink: AnySink, scope: LingeringScope[Any]) -> SinkLingering:
        """What ``sink`` left behind for ``scope``'s job (see :mod:`twophase.sinks.listing`).

        Raises:
            ServiceUnavailableError: the connector's system cannot be reached.
            CommittableDecodeError: a held state cannot be decoded.
            MissingExtraError: its extra is not installed.
        """
        if self.listing is None:
            return SinkLingering(sink.name, self.kind, "(cannot be listed)", listable=False)
        listed: SinkLingering = self.load(self.listing)(sink, scope)
        return listed


class ConnectorRegistry:
    """The declared connectors by kind: this distribution's, other distributions' (entry points) and
    those registered at run time. Discovery runs once, on first use; it is thread-safe."""

    def __init__(self, package: str = CONNECTORS_PACKAGE, entry_point_group: str = ENTRY_POINT_GROUP) -> None:
        self._package = package
        self._group = entry_point_group
        self._declared: dict[str, ConnectorDeclaration] = {}
        self._discovered = False
        self._lock = threading.RLock()

    def register(self, declaration: ConnectorDeclaration) -> None:
        """Add ``declaration`` (again: a no-op).

        Raises:
            ConfigError: another declaration has the same kind.
        """
        with self._lock:
            self._discover()
            self._add(declaration)

    def unregister(self, kind: str) -> None:
        """Forget the connector ``kind`` (nothing when unknown)."""
        with self._lock:
            self._declared.pop(kind, None)

    def all(self) -> dict[str, ConnectorDeclaration]:
        """Every declaration by kind, sorted by kind."""
        with self._lock:
            self._discover()
            return dict(sorted(self._declared.items()))

    def kinds(self) -> list[str]:
        """The declared kinds, sorted."""
        return list(self.all())

    def get(self, kind: str) -> ConnectorDeclaration:
        """The declaration of ``kind``.

        Raises:
            ConfigError: no connector has that kind (naming the kinds there are).
        """
        found = self.all().get(kind)
        if found is None:
            raise ConfigError(f"no connector {kind or 'nothing'!r}: the connectors are {self.kinds()}")
        return found

    def of_sink(self, sink: AnySink) -> ConnectorDeclaration | None:
        """The declaration whose sink class ``sink`` is an instance of, or ``None``."""
        for declaration in self.all().values():
            cls = declaration.loaded_sink_class()
            if cls is not None and isinstance(sink, cls):
                return declaration
        return None

    def exporting(self, name: str) -> ConnectorDeclaration | None:
        """The declaration whose :attr:`~ConnectorDeclaration.top_level` has ``name``, or ``None``."""
        for declaration in self.all().values():
            if name in declaration.top_level:
                return declaration
        return None

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        package = importlib.import_module(self._package)
        for info in pkgutil.iter_modules(package.__path__, f"{self._package}."):
            # a package without a declaration is a layer connectors share, not a connector
            if info.ispkg and importlib.util.find_spec(f"{info.name}.{DECLARATION_MODULE}") is not None:
                self._add(importlib.import_module(f"{info.name}.{DECLARATION_MODULE}").DECLARATION)
        for point in importlib.metadata.entry_points(group=self._group):
            self._add(point.load())

    def _add(self, declaration: Any) -> None:
        if not isinstance(declaration, ConnectorDeclaration):
            raise ConfigError(f"{declaration!r} is not a ConnectorDeclaration")
        known = self._declared.get(declaration.kind)
        if known is not None and known != declaration:
            raise ConfigError(f"connector kind {declaration.kind!r} is declared twice ({known.package})")
        self._declared[declaration.kind] = declaration


CONNECTORS = ConnectorRegistry()
"""The connectors of this process (see the module docstring)."""
