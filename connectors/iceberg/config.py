"""Configuration of the Iceberg sink: a frozen dataclass, validated when built, secrets redacted.

Secrets are the S3 keys (:class:`~twophase.sinks.s3_options.S3Options` masks them) and the
catalog's password: give it as ``catalog_password`` (or inside ``catalog_uri``, whose password is
masked as well). Both travel pickled with the sink to executors (they load the table to write its
files) and nowhere else: not in ``repr``, log lines, exception messages (:meth:`redact`) nor any
committable or checkpoint metadata.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from twophase.coordinator.storage.azure_blob import SCHEMES as AZURE_SCHEMES
from twophase.coordinator.storage.azure_blob import (
    AzureStorageOptions,
    connection_string_parts,
)
from twophase.coordinator.storage.azure_blob import parse_location as parse_azure_location
from twophase.coordinator.storage.gcs import GcsStorageOptions
from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options

StoreOptions = S3Options | AzureStorageOptions | GcsStorageOptions
"""How the sink reaches the object store of its table's files, one type per store."""

MASK = "***"

_PARTITION_FIELD = re.compile(
    r"^(?P<transform>[a-z]+(?:\[\d+\])?)\((?P<column>[^()\s]+)\)$|^(?P<bare>[^()\s]+)$"
)
_SQL_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg")
_REST_SCHEMES = ("http", "https")
WRITE_PATHS = ("python", "spark")
"""The values of :attr:`IcebergSinkConfig.write_path`."""
_SPARK_CATALOG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, repr=False)
class IcebergSinkConfig:
    """Configuration of :class:`~twophase.connectors.iceberg.sink.IcebergSink`.

    Attributes:
        table: the table identifier, ``"<namespace>.<table>"`` (a dotted namespace is allowed:
            ``"a.b.t"``).
        catalog_uri: where the catalog lives. A file path (or ``sqlite:////abs/path.db``): pyiceberg's
            SQL catalog on SQLite, the embedded default; ``postgresql+psycopg://user@host:5432/db``:
            the SQL catalog on PostgreSQL (psycopg 3, the ``postgres`` extra); ``http(s)://…``: a REST
            catalog (documented, untested here). The SQLite file must be reachable from the driver
            and from every executor (the executors load the table to learn its schema, partition
            spec and location).
        catalog_name: the catalog's name (the SQL catalog's ``catalog_name`` column).
        catalog_password: the catalog's password (merged into a SQL URI, or the REST ``credential``);
            ``None``: none, or inside ``catalog_uri``. Never shown.
        warehouse: where a table created by the sink lives (``s3://bucket/prefix``,
            ``abfss://container@account.dfs.core.windows.net/prefix``, ``gs://bucket/prefix`` or a
            local path):
            the catalog places it below (pyiceberg 0.12's SQL catalog: ``<warehouse>/<namespace>/<table>``).
            Required with ``create_table``.
        create_table: create the table (and its namespace) from the data's schema and
            ``partition_by`` when it does not exist; otherwise a missing table is a ConfigError.
        partition_by: the partition spec, one entry per field: ``"col"`` (identity) or
            ``"<transform>(col)"`` with an Iceberg transform (``year``, ``month``, ``day``,
            ``hour``, ``bucket[N]``, ``truncate[W]``, ``identity``, ``void``). Used on creation;
            for an existing table, ``()`` takes the table's spec and anything else must equal it.
        columns: the sink's projection of each incoming batch (only these columns, in this order);
            ``None`` = every column.
        storage_options: how to reach the store of the table's files, one type per store (the
            ``warehouse``'s scheme picks it, and the default becomes that store's): an
            :class:`~twophase.sinks.s3_options.S3Options` for ``s3://`` (unset fields from the
            standard AWS chain), an :class:`~twophase.coordinator.storage.azure_blob.AzureStorageOptions`
            for ``abfss://``/``wasbs://`` (account key, SAS token or connection string, else
            ``AZURE_STORAGE_*``, else pyarrow's ``DefaultAzureCredential``), a
            :class:`~twophase.coordinator.storage.gcs.GcsStorageOptions` for ``gs://`` (project and
            emulator; credentials from Application Default Credentials). Handed to pyiceberg's
            pyarrow FileIO.
        target_file_rows: a data file is closed and a new one opened after this many rows (> 0);
            the Python path's (``write_path="spark"`` rolls at the table's
            ``write.target-file-size-bytes``).
        commit_attempts: how many times a checkpoint's commit reloads the table, re-checks the
            snapshot summaries and tries again after a commit conflict (≥ 1).
        commit_backoff_max_ms: upper bound of the exponential backoff between those attempts (ms).
        lingering_grace_ms: lingering cleanup deletes an unreferenced data file only once it is
            older than this (ms, ≥ 0): a younger one may belong to an attempt still writing.
        connect_attempts: how many times opening the catalog is tried before
            ``ServiceUnavailableError`` (≥ 1): a catalog database restarting while the job restores
            is waited for rather than costing one of the job's restarts.
        connect_backoff_ms: the first wait between those attempts (ms, ≥ 0), doubling up to 10 s.
        write_path: how a job whose only sink this is writes its epochs: ``"python"`` (the rows
            handed to Python, data files written with pyarrow) or ``"spark"`` (Iceberg's own Spark
            writer writes the data files in the JVM, the sink commits them; issue #44 item 4). The
            Spark session then needs Iceberg's Spark runtime, twophase's Iceberg jar
            (:func:`~twophase.connectors.iceberg.staging_jar`) and ``spark_catalog``; with two or
            more sinks the one Python pass writes every sink.
        spark_catalog: with ``write_path="spark"``, the session's Iceberg catalog
            (``spark.sql.catalog.<name>``) that holds ``table``: the same catalog this config's
            ``catalog_uri`` names (the write checks the table's ``table-uuid``).

    Raises:
        ConfigError: an empty or malformed identifier, an unsupported catalog URI, a malformed
            partition field, ``create_table`` without ``warehouse``, a bad projection, a
            non-positive count, an unknown ``write_path`` or ``write_path="spark"`` without a
            ``spark_catalog``.
    """

    table: str
    catalog_uri: str
    catalog_name: str = "twophase"
    catalog_password: str | None = None
    warehouse: str | None = None
    create_table: bool = False
    partition_by: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    storage_options: StoreOptions = field(default_factory=S3Options)
    target_file_rows: int = 1_000_000
    commit_attempts: int = 10
    commit_backoff_max_ms: int = 2_000
    lingering_grace_ms: int = 600_000
    connect_attempts: int = 5
    connect_backoff_ms: int = 500
    write_path: str = "python"
    spark_catalog: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or len(self.identifier) < 2 or not all(self.identifier):
            raise ConfigError(f"IcebergSinkConfig.table must be '<namespace>.<table>', got {self.table!r}")
        if not isinstance(self.catalog_uri, str) or not self.catalog_uri.strip():
            raise ConfigError("IcebergSinkConfig.catalog_uri must be a SQLite file path or a catalog URI")
        scheme = self.catalog_scheme
        if scheme == "file":
            object.__setattr__(self, "catalog_uri", os.path.abspath(self.catalog_uri))
        elif scheme not in _SQL_SCHEMES and scheme not in _REST_SCHEMES:
            raise ConfigError(
                f"IcebergSinkConfig.catalog_uri scheme {scheme!r} is not supported "
                "(a SQLite file path, sqlite://, postgresql+psycopg://, http(s):// for REST)"
            )
        if scheme == "postgresql":
            raise ConfigError("IcebergSinkConfig.catalog_uri: use postgresql+psycopg:// (psycopg 3)")
        if not self.catalog_name:
            raise ConfigError("IcebergSinkConfig.catalog_name must be non-empty")
        if self.catalog_password is not None and not isinstance(self.catalog_password, str):
            raise ConfigError("IcebergSinkConfig.catalog_password must be a string or None")
        partition_by = _names(self.partition_by, "partition_by", allow_empty=True)
        for entry in partition_by:
            if _PARTITION_FIELD.match(entry) is None:
                raise ConfigError(
                    f"IcebergSinkConfig.partition_by entry {entry!r} is not 'col' or 'transform(col)'"
                )
        object.__setattr__(self, "partition_by", partition_by)
        if self.columns is not None:
            object.__setattr__(self, "columns", _names(self.columns, "columns", allow_empty=False))
        if self.create_table and not self.warehouse:
            raise ConfigError("IcebergSinkConfig.create_table needs a warehouse (where the table goes)")
        if self.warehouse is not None and urlsplit(self.warehouse).scheme in ("", "file"):
            path = (
                self.warehouse[len("file://") :] if self.warehouse.startswith("file://") else self.warehouse
            )
            object.__setattr__(self, "warehouse", "file://" + os.path.abspath(path))
        self._check_store_options()
        for name in ("target_file_rows", "commit_attempts", "connect_attempts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"IcebergSinkConfig.{name} must be a positive int, got {value!r}")
        for name in ("commit_backoff_max_ms", "lingering_grace_ms", "connect_backoff_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"IcebergSinkConfig.{name} must be an int >= 0, got {value!r}")
        self._check_write_path()

    def _check_write_path(self) -> None:
        if self.write_path not in WRITE_PATHS:
            raise ConfigError(
                f"IcebergSinkConfig.write_path must be one of {list(WRITE_PATHS)}, got {self.write_path!r}"
            )
        if self.spark_catalog is not None and (
            not isinstance(self.spark_catalog, str) or _SPARK_CATALOG.match(self.spark_catalog) is None
        ):
            raise ConfigError(
                f"IcebergSinkConfig.spark_catalog must be a Spark catalog name, got {self.spark_catalog!r}"
            )
        if self.write_path == "spark" and self.spark_catalog is None:
            raise ConfigError(
                "IcebergSinkConfig: write_path='spark' needs spark_catalog, the session's Iceberg "
                "catalog (spark.sql.catalog.<name>) holding the table"
            )

    def _check_store_options(self) -> None:
        store = self.store
        wanted = {"s3": S3Options, "azure": AzureStorageOptions, "gcs": GcsStorageOptions}[store]
        if self.storage_options == S3Options() and wanted is not S3Options:  # the default
            object.__setattr__(self, "storage_options", wanted())
        options = self.storage_options
        if not isinstance(options, wanted):
            where = f"warehouse {self.warehouse}" if self.warehouse else "s3:// and local tables"
            raise ConfigError(
                f"IcebergSinkConfig: {where} takes storage_options=twophase.{wanted.__name__}(...), "
                f"not {type(options).__name__}"
            )
        if isinstance(options, AzureStorageOptions):
            if options.credential is not None:
                raise ConfigError(
                    "IcebergSinkConfig: pyarrow's Azure file system cannot take an azure-identity credential "
                    "object; set AzureStorageOptions account_key, sas_token or connection_string, or leave "
                    "them unset for its DefaultAzureCredential"
                )
            self.azure_account()  # raises when it cannot be known
        if isinstance(options, GcsStorageOptions) and options.credentials is not None:
            raise ConfigError(
                "IcebergSinkConfig: pyarrow's GCS file system cannot take a credentials object; unset "
                "GcsStorageOptions.credentials and use Application Default Credentials "
                "(GOOGLE_APPLICATION_CREDENTIALS)"
            )

    @property
    def store(self) -> str:
        """``"s3"`` (also local paths), ``"azure"`` or ``"gcs"``: the store of ``warehouse``, or the
        one ``storage_options`` is for when there is no warehouse."""
        scheme = urlsplit(self.warehouse).scheme.lower() if self.warehouse else ""
        if scheme in AZURE_SCHEMES or (not scheme and isinstance(self.storage_options, AzureStorageOptions)):
            return "azure"
        if scheme == "gs" or (not scheme and isinstance(self.storage_options, GcsStorageOptions)):
            return "gcs"
        return "s3"

    def azure_account(self) -> str:
        """The storage account of an Azure table: the connection string's ``AccountName``, else
        the ``warehouse``'s.

        Raises:
            ConfigError: neither names one, or the warehouse is no ``abfss://``/``wasbs://`` location.
        """
        options = self.storage_options
        if isinstance(options, AzureStorageOptions) and options.connection_string:
            account = connection_string_parts(options.connection_string).get("AccountName")
            if account:
                return account
        if self.warehouse and urlsplit(self.warehouse).scheme.lower() in AZURE_SCHEMES:
            return parse_azure_location(self.warehouse).account
        raise ConfigError(
            "IcebergSinkConfig: Azure tables need their account: set warehouse="
            "'abfss://<container>@<account>.dfs.core.windows.net/<path>' or a connection_string"
        )

    @property
    def identifier(self) -> tuple[str, ...]:
        """The table identifier as pyiceberg takes it: ``(namespace..., table)``."""
        return tuple(self.table.split("."))

    @property
    def catalog_scheme(self) -> str:
        """``file`` for a bare SQLite path, else the URI's scheme (lowercase)."""
        scheme = urlsplit(self.catalog_uri).scheme.lower()
        return "file" if len(scheme) <= 1 else scheme  # one letter: a Windows drive

    def partition_fields(self) -> tuple[tuple[str, str], ...]:
        """``partition_by`` as ``((transform, column), ...)``; a bare column is ``identity``."""
        out = []
        for entry in self.partition_by:
            m = _PARTITION_FIELD.match(entry)
            assert m is not None  # checked in __post_init__
            out.append(("identity", m["bare"]) if m["bare"] else (m["transform"], m["column"]))
        return tuple(out)

    def secrets(self) -> tuple[str, ...]:
        """Every secret this configuration holds (for :meth:`redact`)."""
        from sqlalchemy.engine import make_url

        options = self.storage_options
        found = [self.catalog_password]
        if isinstance(options, S3Options):
            found += [options.secret_access_key, options.session_token]
        elif isinstance(options, AzureStorageOptions):
            found += [options.account_key, options.sas_token, options.connection_string]
            if options.connection_string:
                parts = connection_string_parts(options.connection_string)
                found += [parts.get("AccountKey"), parts.get("SharedAccessSignature")]
        if self.catalog_scheme in _SQL_SCHEMES:
            with contextlib.suppress(Exception):  # an unparsable URI: nothing to add
                found.append(make_url(self.catalog_uri).password)
        return tuple(s for s in found if s)

    def redact(self, text: str) -> str:
        """``text`` with every secret of this configuration replaced by ``***``."""
        for secret in self.secrets():
            text = text.replace(secret, MASK)
        return text

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value: Any = getattr(self, f.name)
            if f.name == "catalog_password":
                value = None if value is None else MASK
            text = repr(value)
            shown.append(f"{f.name}={self.redact(text) if f.name == 'catalog_uri' else text}")
        return f"IcebergSinkConfig({', '.join(shown)})"

    __str__ = __repr__


def _names(value: object, name: str, *, allow_empty: bool) -> tuple[str, ...]:
    # A bare string is refused: ("a") for ("a",) is a common slip.
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"IcebergSinkConfig.{name} must be a sequence of strings, got {value!r}")
    names = tuple(value)
    if not names and not allow_empty:
        raise ConfigError(f"IcebergSinkConfig.{name} must name at least one column (None = every column)")
    if any(not isinstance(c, str) or not c for c in names):
        raise ConfigError(f"IcebergSinkConfig.{name} has an empty or non-string entry: {names!r}")
    if len(set(names)) != len(names):
        raise ConfigError(f"IcebergSinkConfig.{name} repeats an entry: {names!r}")
    return names
