"""Opening the sink's Iceberg catalog and table with pyiceberg, from :class:`IcebergSinkConfig`.

- a file path or ``sqlite://``: pyiceberg's ``SqlCatalog`` on SQLite (the embedded default);
- ``postgresql+psycopg://``: ``SqlCatalog`` on PostgreSQL; its engine is disposed when the
  :func:`open_catalog` block ends, so no connection outlives a commit;
- ``http(s)://``: pyiceberg's ``RestCatalog`` (untested here);
- a :data:`CatalogFactory` given to the sink instead (the model-based protocol test's model).

The SQL catalog's commit is optimistic concurrency as the Iceberg table spec describes it
("Commit Conflict Resolution and Retry"): it swaps the table's metadata pointer only if it still
names the metadata file the commit started from, and raises pyiceberg's
``CommitFailedException`` otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import tenacity
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from twophase.connectors.iceberg.config import IcebergSinkConfig
from twophase.connectors.iceberg.internal import fileio
from twophase.coordinator.storage.azure_blob import AzureStorageOptions
from twophase.coordinator.storage.gcs import GcsStorageOptions
from twophase.sinks.errors import ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

CatalogFactory = Callable[[], Catalog]
"""Opens the sink's catalog in place of ``load_catalog`` from the configuration (tables it loads
carry their FileIO). Called once per operation, like ``load_catalog``; an exception it raises is
an unreachable catalog."""


def file_io_properties(config: IcebergSinkConfig) -> dict[str, str]:
    """pyiceberg FileIO properties from ``config.storage_options``, resolved against this
    process's environment: ``s3.*`` for pyiceberg's ``PyArrowFileIO``, ``adls.*`` and ``gcs.*``
    for :class:`~twophase.connectors.iceberg.internal.fileio.CloudFileIO`. Holds secrets: never
    log the result."""
    options = config.storage_options
    if isinstance(options, AzureStorageOptions):
        return {"py-io-impl": fileio.IMPL, **_adls_properties(config.azure_account(), options)}
    if isinstance(options, GcsStorageOptions):
        return {"py-io-impl": fileio.IMPL, **_gcs_properties(options)}
    s3 = options.resolved(os.environ)
    props = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    credentials = s3.frozen_credentials()
    pairs = (
        ("s3.endpoint", s3.endpoint_url),
        ("s3.region", s3.region),
        ("s3.access-key-id", credentials[0] if credentials else None),
        ("s3.secret-access-key", credentials[1] if credentials else None),
        ("s3.session-token", credentials[2] if credentials else None),
    )
    props.update({k: v for k, v in pairs if v})
    props["s3.force-virtual-addressing"] = "false" if s3.use_path_style else "true"
    return props


def _adls_properties(account: str, options: AzureStorageOptions) -> dict[str, str]:
    """``adls.*``: the account, its key or SAS token (else pyarrow's ``DefaultAzureCredential``) and
    a custom Blob endpoint (an emulator's) for both the blob and the dfs service."""
    key, sas, endpoint = options.resolved(os.environ).key_sas_endpoint()
    props = {"adls.account-name": account}
    if key:
        props["adls.account-key"] = key
    elif sas:
        props["adls.sas-token"] = sas
    if endpoint:
        url = urlsplit(endpoint)
        for service in ("blob", "dfs"):
            props[f"adls.{service}-storage-authority"] = url.netloc
            props[f"adls.{service}-storage-scheme"] = url.scheme
    return props


def _gcs_properties(options: GcsStorageOptions) -> dict[str, str]:
    """``gcs.*``: the project and, for an emulator, its URL with anonymous access (an emulator
    takes no credentials); otherwise pyarrow finds Application Default Credentials itself."""
    resolved = options.resolved(os.environ)
    props = {"gcs.project-id": resolved.project} if resolved.project else {}
    if resolved.emulator_host:
        props.update({"gcs.service.host": resolved.emulator_host, fileio.GCS_ANONYMOUS: "true"})
    return props


def catalog_properties(config: IcebergSinkConfig) -> dict[str, str]:
    """The properties ``config`` opens its catalog with (holds secrets: never log the result)."""
    props = file_io_properties(config)
    scheme = config.catalog_scheme
    if scheme == "file":
        props.update(type="sql", uri=f"sqlite:///{config.catalog_uri}")
    elif scheme in ("http", "https"):
        props.update(type="rest", uri=config.catalog_uri)
        if config.catalog_password:
            props["credential"] = config.catalog_password
    else:
        uri = config.catalog_uri
        if config.catalog_password:
            from sqlalchemy.engine import make_url

            uri = make_url(uri).set(password=config.catalog_password).render_as_string(hide_password=False)
        props.update(type="sql", uri=uri)
    if config.warehouse:
        props["warehouse"] = config.warehouse
    return props


@contextlib.contextmanager
def open_catalog(config: IcebergSinkConfig, factory: CatalogFactory | None = None) -> Iterator[Catalog]:
    """The configured catalog (or ``factory``'s), released (SQL engine disposed) when the block ends.

    Opening is tried ``config.connect_attempts`` times with exponential backoff from
    ``config.connect_backoff_ms`` (a SQL catalog connects as it opens: pyiceberg checks its tables).

    Raises:
        ServiceUnavailableError: the catalog cannot be reached after every attempt (the message is
            redacted).
    """
    from pyiceberg.catalog import load_catalog

    def load() -> Catalog:
        if factory is not None:
            return factory()
        return load_catalog(config.catalog_name, **catalog_properties(config))

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(config.connect_attempts),
        wait=tenacity.wait_exponential(multiplier=config.connect_backoff_ms / 1000.0, max=10),
        retry=tenacity.retry_if_exception_type(Exception),
        before_sleep=lambda state: log_event(
            log,
            logging.WARNING,
            "iceberg catalog unreachable, retrying",
            catalog=config.catalog_name,
            attempt=state.attempt_number,
            error=error_line(config, state.outcome.exception() or Exception()) if state.outcome else "",
        ),
        reraise=True,
    )
    try:
        catalog = retrying(load)
    except Exception as e:
        raise ServiceUnavailableError(
            f"cannot open Iceberg catalog {config.redact(config.catalog_uri)} after "
            f"{config.connect_attempts} attempts: {error_line(config, e)}"
        ) from None
    try:
        yield catalog
    finally:
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()


def error_line(config: IcebergSinkConfig, error: BaseException) -> str:
    """``error``'s first line with every secret of ``config`` removed (its type's name if it has no
    message), for one-line errors and logs."""
    text = config.redact(str(error))
    return text.splitlines()[0] if text else type(error).__name__


def load_table(catalog: Catalog, config: IcebergSinkConfig) -> Table | None:
    """The table named by ``config.table``, freshly loaded, or ``None`` if it does not exist."""
    try:
        return catalog.load_table(config.identifier)
    except NoSuchTableError:
        return None


def require_table(catalog: Catalog, config: IcebergSinkConfig) -> Table:
    """The table, freshly loaded.

    Raises:
        ConfigError: no such table.
    """
    table = load_table(catalog, config)
    if table is None:
        raise ConfigError(f"Iceberg table {config.table} does not exist in catalog {config.catalog_name!r}")
    return table
