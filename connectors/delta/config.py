"""Configuration of the Delta sink: a frozen dataclass, validated when built (before anything is written)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from twophase.connectors.delta.internal.tls import trust_aws_ca_bundle_in_delta_rs
from twophase.coordinator.storage.azure_blob import AzureStorageOptions, parse_location
from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options

COMPRESSIONS = frozenset({"snappy", "zstd", "gzip", "lz4", "brotli", "none"})
"""Parquet codecs Spark's Parquet reader understands (``none`` = uncompressed)."""

_LOCAL_SCHEMES = ("", "file")
_S3_SCHEMES = ("s3", "s3a")
_AZURE_SCHEMES = ("abfss",)


CHECKPOINT_INTERVAL = 10
"""Versions between two log checkpoints when the table sets no ``delta.checkpointInterval``:
delta-spark's and Delta Standalone's default (``DeltaConfigs.CHECKPOINT_INTERVAL``). The Delta
protocol leaves the interval to writers."""


def checkpoint_interval(configuration: Mapping[str, str | None]) -> int:
    """Versions between two log checkpoints of a table with these properties: its
    ``delta.checkpointInterval``, else :data:`CHECKPOINT_INTERVAL` (Delta PROTOCOL.md leaves the
    default to writers; delta-spark's is 10).

    A value that is not a positive integer (which delta-spark refuses to set) counts as unset.
    """
    return _positive_interval(configuration.get("delta.checkpointInterval")) or CHECKPOINT_INTERVAL


def _positive_interval(raw: object) -> int | None:
    """``raw`` as a positive number of versions, or ``None`` if it is none."""
    text = str(raw) if raw is not None else ""
    return int(text) if text.isdigit() and int(text) > 0 else None


@dataclass(frozen=True)
class DeltaSinkConfig:
    """Where and how the Delta sink writes.

    Attributes:
        table_uri: the table root: a local path (``/data/t``, ``file:///data/t``),
            ``s3://bucket/prefix`` (``s3a://`` is accepted too) or, on Azure Blob Storage / ADLS
            Gen2, ``abfss://container@account.dfs.core.windows.net/prefix``. Local paths are made
            absolute.
        partition_by: partition columns, in directory order (Hive-style ``col=value`` folders).
            They must be columns of the data; their values go into the Add action's
            ``partitionValues`` and not into the Parquet files (Delta PROTOCOL.md, "Add File").
        columns: the sink's projection of each incoming batch (DESIGN.md §6): only these columns, in
            this order, are written (the partition columns must be among them); other columns of
            the batch are ignored. ``None`` = every column. Non-empty, distinct names.
        storage_options: how to reach S3 for ``s3://`` tables
            (:class:`~twophase.sinks.s3_options.S3Options`); unset fields come from the standard
            AWS chain of the process that opens the table. For ``abfss://`` tables an
            :class:`~twophase.coordinator.storage.azure_blob.AzureStorageOptions` (account key, SAS
            token or connection string; else ``AZURE_STORAGE_*``, else the identity delta-rs and
            pyarrow find: ``AZURE_CLIENT_*``, managed identity). Handed to delta-rs and to pyarrow's
            file system. Secrets: never logged, never part of ``repr`` nor of any committable.
        s3_conditional_put: value of delta-rs's ``aws_conditional_put`` option for ``s3://``
            tables: ``"etag"`` makes commits safe through the server's conditional PUT (MinIO,
            R2, AWS S3), so no DynamoDB lock is needed. ``None`` adds nothing (delta-rs then reads
            its locking settings, e.g. ``AWS_S3_LOCKING_PROVIDER``, from the environment).
        target_file_size_bytes: a data file is closed (and a new one opened) once it reaches this
            many bytes (bytes, > 0). Checked after each row group, so files overshoot by < 1 row group.
        row_group_rows: rows buffered per open file before a Parquet row group is written (> 0).
        compression: Parquet codec, one of :data:`COMPRESSIONS`.
        compression_level: codec level, or ``None`` for the codec's default.
        merge_schema: allow data with new nullable top-level columns; they are added to the table
            schema (one metadata-only commit before the data commit). Type changes are never allowed.
        string_stats_prefix_length: string min/max stats keep this many leading characters, like
            delta-spark's ``dataSkippingStringPrefixLength`` (> 0).
        commit_attempts: how many times a checkpoint's commit reloads the table, re-checks its
            ``txn`` version and tries again after a commit conflict (≥ 1).
        commit_backoff_max_ms: upper bound of the exponential backoff between those attempts (ms).
        table_name: optional table name stored in the Delta metadata on creation.
        table_configuration: optional table properties stored on creation (``delta.*`` keys).

    Raises:
        ConfigError: an empty or unsupported ``table_uri``, duplicate or empty partition columns,
            an empty ``columns``, a repeated or empty name in it, a partition column outside it,
            an unknown codec, or a non-positive size or count.
    """

    table_uri: str
    partition_by: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    storage_options: S3Options | AzureStorageOptions = field(default_factory=S3Options)
    s3_conditional_put: str | None = "etag"
    target_file_size_bytes: int = 128 * 1024 * 1024
    row_group_rows: int = 1_048_576
    compression: str = "snappy"
    compression_level: int | None = None
    merge_schema: bool = False
    string_stats_prefix_length: int = 32
    commit_attempts: int = 10
    commit_backoff_max_ms: int = 2_000
    table_name: str | None = None
    table_configuration: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.table_uri, str) or not self.table_uri.strip():
            raise ConfigError("DeltaSinkConfig.table_uri must be a non-empty path or s3:// URI")
        scheme = urlsplit(self.table_uri).scheme.lower()
        if len(scheme) == 1:  # a Windows drive letter, not a scheme
            scheme = ""
        if scheme in _LOCAL_SCHEMES:
            path = self.table_uri[len("file://") :] if scheme == "file" else self.table_uri
            object.__setattr__(self, "table_uri", os.path.abspath(path).rstrip("/") or "/")
        elif scheme in _S3_SCHEMES:
            parts = urlsplit(self.table_uri)
            if not parts.netloc:
                raise ConfigError(f"DeltaSinkConfig.table_uri {self.table_uri!r} names no bucket")
            object.__setattr__(self, "table_uri", self.table_uri.rstrip("/"))
        elif scheme in _AZURE_SCHEMES:
            if not parse_location(self.table_uri).path.strip("/"):
                raise ConfigError(
                    f"DeltaSinkConfig.table_uri {self.table_uri!r} names no folder in its container"
                )
            object.__setattr__(self, "table_uri", self.table_uri.rstrip("/"))
            if self.storage_options == S3Options():  # the default: Azure's own chain
                object.__setattr__(self, "storage_options", AzureStorageOptions())
        elif scheme == "gs":
            raise ConfigError(
                "DeltaSinkConfig.table_uri: gs:// Delta tables are not supported yet "
                "(see docs/stores/gcs.md); use s3://, abfss:// or a local path"
            )
        else:
            raise ConfigError(
                f"DeltaSinkConfig.table_uri scheme {scheme!r} is not supported "
                "(a local path, s3:// or abfss://container@account.dfs.core.windows.net/path)"
            )
        partition_by = _as_tuple(self.partition_by, "partition_by")
        if any(not isinstance(c, str) or not c for c in partition_by):
            raise ConfigError(f"DeltaSinkConfig.partition_by has an empty column name: {partition_by!r}")
        if len(set(partition_by)) != len(partition_by):
            raise ConfigError(f"DeltaSinkConfig.partition_by repeats a column: {partition_by!r}")
        object.__setattr__(self, "partition_by", partition_by)
        if self.columns is not None:
            columns = _columns(self.columns)
            outside = [c for c in partition_by if c not in columns]
            if outside:
                raise ConfigError(
                    f"DeltaSinkConfig.partition_by {outside} are not among columns {list(columns)}"
                )
            object.__setattr__(self, "columns", columns)
        if self.is_azure:
            if not isinstance(self.storage_options, AzureStorageOptions):
                raise ConfigError(
                    "DeltaSinkConfig: abfss:// tables take storage_options=twophase.AzureStorageOptions("
                    "account_key=..., sas_token=... or connection_string=...), not "
                    f"{type(self.storage_options).__name__}"
                )
            if self.storage_options.credential is not None:
                raise ConfigError(
                    "DeltaSinkConfig: delta-rs cannot take an azure-identity credential object; set "
                    "AzureStorageOptions account_key, sas_token or connection_string, or leave them unset "
                    "for the identity delta-rs finds (AZURE_CLIENT_ID/AZURE_TENANT_ID/..., managed identity)"
                )
        elif not isinstance(self.storage_options, S3Options):
            raise ConfigError(
                "DeltaSinkConfig.storage_options must be a twophase.S3Options for s3:// and local tables, "
                f"not {type(self.storage_options).__name__}"
            )
        if isinstance(self.storage_options, S3Options) and self.is_s3 and not self.storage_options.verify_tls:
            # pyarrow's S3 file system, which writes the data files, cannot skip verification
            raise ConfigError("DeltaSinkConfig: storage_options.verify_tls=False is not supported")
        object.__setattr__(self, "table_configuration", dict(self.table_configuration))
        interval = self.table_configuration.get("delta.checkpointInterval")
        if interval is not None and _positive_interval(interval) is None:
            raise ConfigError(
                f"DeltaSinkConfig.table_configuration delta.checkpointInterval={interval!r} must be a "
                "positive number of versions (leave it unset for a log checkpoint every 10)"
            )
        if self.compression not in COMPRESSIONS:
            raise ConfigError(
                f"DeltaSinkConfig.compression {self.compression!r} is not one of {sorted(COMPRESSIONS)}"
            )
        for name in (
            "target_file_size_bytes",
            "row_group_rows",
            "string_stats_prefix_length",
            "commit_attempts",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"DeltaSinkConfig.{name} must be a positive int, got {value!r}")
        if self.commit_backoff_max_ms < 0:
            raise ConfigError("DeltaSinkConfig.commit_backoff_max_ms must be >= 0")

    @property
    def is_s3(self) -> bool:
        """True for ``s3://``/``s3a://`` tables."""
        return urlsplit(self.table_uri).scheme.lower() in _S3_SCHEMES

    @property
    def is_azure(self) -> bool:
        """True for ``abfss://`` tables."""
        return urlsplit(self.table_uri).scheme.lower() in _AZURE_SCHEMES

    def azure_options(self) -> AzureStorageOptions:
        """``storage_options`` of an ``abfss://`` table, unset credentials from ``AZURE_STORAGE_*``.

        Raises:
            ConfigError: not an Azure table.
        """
        if not isinstance(self.storage_options, AzureStorageOptions):
            raise ConfigError(f"{self.table_uri!r} is not an abfss:// table")
        return self.storage_options.resolved(os.environ)

    def delta_storage_options(self) -> dict[str, str] | None:
        """The options handed to delta-rs for an ``s3://`` or ``abfss://`` table (``None`` for a local one):
        ``storage_options`` resolved against this process's environment, plus
        ``aws_conditional_put``. Contains secrets: never log the result.

        When ``AWS_CA_BUNDLE`` is set and the endpoint uses TLS, delta-rs is made to trust its CAs as well
        (:func:`~twophase.connectors.delta.internal.tls.trust_aws_ca_bundle_in_delta_rs`).

        Raises:
            ConfigError: ``AWS_CA_BUNDLE`` names no readable file.
        """
        if self.is_azure:
            return _delta_rs_azure(parse_location(self.table_uri).account, self.azure_options())
        if not self.is_s3 or not isinstance(self.storage_options, S3Options):
            return None
        resolved = self.storage_options.resolved(os.environ)
        if not (resolved.endpoint_url or "https:").lower().startswith("http:"):  # TLS: AWS or https://
            trust_aws_ca_bundle_in_delta_rs()
        options = resolved.delta_rs_options()
        if self.s3_conditional_put is not None:
            options["aws_conditional_put"] = self.s3_conditional_put
        return options


def _delta_rs_azure(account: str, options: AzureStorageOptions) -> dict[str, str]:
    """delta-rs's (object_store's) Azure options: the account, its key or SAS token, and a custom
    Blob endpoint (an emulator's, from a connection string or ``blob_endpoint``). No key and no SAS:
    delta-rs finds an identity itself (``AZURE_CLIENT_*``, workload or managed identity, Azure CLI).
    Holds secrets: never log the result."""
    key, sas, endpoint = options.key_sas_endpoint()
    out = {"account_name": account}
    if key:
        out["account_key"] = key
    elif sas:
        out["sas_token"] = sas
    if endpoint:
        out["azure_storage_endpoint"] = endpoint.rstrip("/")
        if endpoint.lower().startswith("http:"):
            out["allow_http"] = "true"
    return out


def _as_tuple(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence):
        return tuple(value)
    raise ConfigError(f"DeltaSinkConfig.{name} must be a sequence of column names, got {value!r}")


def _columns(value: object) -> tuple[str, ...]:
    # A bare string is refused: ("a") for ("a",) is a common slip, and "abc" is no column list.
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"DeltaSinkConfig.columns must be a sequence of column names, got {value!r}")
    names = tuple(value)
    if not names:
        raise ConfigError("DeltaSinkConfig.columns must name at least one column (None = every column)")
    if any(not isinstance(c, str) or not c for c in names):
        raise ConfigError(f"DeltaSinkConfig.columns has an empty or non-string name: {names!r}")
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise ConfigError(f"DeltaSinkConfig.columns repeats {repeated}")
    return names
