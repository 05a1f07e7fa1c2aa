"""Opening the sink's Iceberg catalog and table with pyiceberg, from :class:`IcebergSinkConfig`.

- a file path or ``sqlite://``: pyiceberg's ``SqlCatalog`` on SQLite (the embedded default);
- ``postgresql+psycopg://``: ``SqlCatalog`` on PostgreSQL (connections checked before use,
  ``pool_pre_ping``);
- ``http(s)://``: pyiceberg's ``RestCatalog`` (untested here);
- a :data:`CatalogFactory` given to the sink instead (the model-based protocol test's model).

The driver keeps one catalog per sink (:class:`KeptCatalog`, until the sink is closed), as Flink's
Iceberg committer keeps its table loader open for its lifetime: opening a SQL catalog connects and
checks the catalog's tables, a cost each checkpoint's commit would otherwise pay again. Executors
open theirs per task (:func:`open_catalog`: its engine disposed when the block ends). Tables are
loaded afresh for every operation either way.

The SQL catalog's commit is optimistic concurrency as the Iceberg table spec describes it
("Commit Conflict Resolution and Retry"): it swaps the table's metadata pointer only if it still
names the metadata file the commit started from, and raises pyiceberg's
``CommitFailedException`` otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
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
        props.update(type="sql", uri=f"sqlite:///{config.catalog_uri}", pool_pre_ping="true")
    elif scheme in ("http", "https"):
        props.update(type="rest", uri=config.catalog_uri)
        if config.catalog_password:
            props["credential"] = config.catalog_password
    else:
        uri = config.catalog_uri
        if config.catalog_password:
            from sqlalchemy.engine import make_url

            uri = make_url(uri).set(password=config.catalog_password).render_as_string(hide_password=False)
        props.update(type="sql", uri=uri, pool_pre_ping="true")
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
    catalog = _load(config, factory)
    try:
        yield catalog
    finally:
        _release(catalog)


class KeptCatalog:
    """One sink's catalog on the driver, opened on first use and kept until :meth:`close`.

    Before each use a kept SQL catalog's connection is checked (one pooled connection checked out,
    pinged by ``pool_pre_ping``); a catalog whose check fails is released and opened again as
    :func:`open_catalog` opens it, with its retries, so an unreachable catalog raises as it does
    there. A ``factory`` (the model's catalog) and catalogs without a SQL engine (REST) are opened
    for every use, as :func:`open_catalog` does: only the SQL engine's pool is worth keeping.
    Thread-safe (the commit may run on the runtime's commit thread while the main thread stages
    the next epoch); SQLAlchemy's engine is. Not picklable state: a sink pickled to executors gets
    an empty one.
    """

    def __init__(self, config: IcebergSinkConfig, factory: CatalogFactory | None = None) -> None:
        self._config = config
        self._factory = factory
        self._lock = threading.Lock()
        self._catalog: Catalog | None = None

    @contextlib.contextmanager
    def use(self) -> Iterator[Catalog]:
        """The kept catalog (opened or reopened first when needed); not released when the block ends.

        Raises:
            ServiceUnavailableError: as :func:`open_catalog`.
        """
        if self._factory is not None:
            with open_catalog(self._config, self._factory) as opened:
                yield opened
            return
        with self._lock:
            kept = self._catalog
            if kept is not None and not _reachable(kept):
                self._catalog = None
                _release(kept)
                kept = None
            catalog = kept if kept is not None else _load(self._config, None)
            if kept is None and getattr(catalog, "engine", None) is not None:
                self._catalog = catalog
        try:
            yield catalog
        finally:
            if catalog is not self._catalog:
                _release(catalog)

    def close(self) -> None:
        """Release the kept catalog (its SQL engine disposed). Idempotent."""
        with self._lock:
            catalog, self._catalog = self._catalog, None
        if catalog is not None:
            _release(catalog)

    def __reduce__(self) -> tuple[type[KeptCatalog], tuple[IcebergSinkConfig, CatalogFactory | None]]:
        return KeptCatalog, (self._config, self._factory)  # pickled empty: no engine, no lock


def _load(config: IcebergSinkConfig, factory: CatalogFactory | None) -> Catalog:
    """Open the catalog with ``config``'s retries (see :func:`open_catalog`)."""
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
        return retrying(load)
    except Exception as e:
        raise ServiceUnavailableError(
            f"cannot open Iceberg catalog {config.redact(config.catalog_uri)} after "
            f"{config.connect_attempts} attempts: {error_line(config, e)}"
        ) from None


def _reachable(catalog: Catalog) -> bool:
    """Whether a kept SQL catalog's database answers: one pooled connection checked out (the
    pool pings it first and replaces a dead one)."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with catalog.engine.connect():  # type: ignore[attr-defined]
            return True
    except SQLAlchemyError:
        return False


def _release(catalog: Catalog) -> None:
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
