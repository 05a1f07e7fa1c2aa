"""The Azure Blob Storage requests of the file sink, over one ``ContainerClient`` per process and
configuration (the SDK's clients are thread-safe and pickle-free: executors build their own).

Requests (Azure "Blob service REST API"): Put Block (``stage_block``), Put Block List
(``commit_block_list``) with ``If-None-Match: *`` so that a blob is created once and never
replaced, Get Block List (``get_block_list("committed")``), List Blobs with and without
``include=uncommittedblobs``, Delete Blob. Transient answers (408, 429, 5xx, connection errors) are
retried by the SDK's own exponential retry policy, ``max_attempts`` in all; what is left is read
by :func:`twophase.coordinator.storage.azure_blob.classify`, which the checkpoint storage uses too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from twophase.connectors.azure.config import AzureBlobSinkConfig
from twophase.coordinator.storage.object_store import ObjectMissing, StoreRefused, TransientStoreError
from twophase.sinks.errors import ConfigError, ServiceUnavailableError

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient


def classify(error: BaseException) -> Exception | None:
    """The store error an Azure SDK error means (see the checkpoint storage's ``classify``)."""
    from twophase.coordinator.storage.azure_blob import classify as classify_azure

    return classify_azure(error)


def error_code(error: BaseException) -> str:
    """The ``x-ms-error-code`` of an SDK error (``""`` if none)."""
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or "")


def status_of(error: BaseException) -> int:
    """The HTTP status of an SDK error (0 if none came)."""
    return int(getattr(error, "status_code", None) or 0)


def raise_typed(error: Exception, what: str) -> None:
    """Raise the sink error for an SDK ``error`` met while doing ``what`` (one line, no secrets).

    Raises:
        ServiceUnavailableError: a transient failure, after the SDK's retries.
        ConfigError: refused (access denied, missing container, bad request).
    """
    kind = classify(error)
    if kind is None or isinstance(kind, TransientStoreError):
        raise ServiceUnavailableError(
            f"Azure Blob Storage failed to {what}: {kind or type(error).__name__}"
        ) from error
    if isinstance(kind, ObjectMissing) and error_code(error) == "ContainerNotFound":
        raise ConfigError(f"Azure container to {what} does not exist (create it first)") from error
    if isinstance(kind, StoreRefused | ObjectMissing):
        raise ConfigError(f"Azure Blob Storage refused to {what}: {kind}") from error
    raise ServiceUnavailableError(f"Azure Blob Storage failed to {what}: {kind}") from error


def build_client(config: AzureBlobSinkConfig) -> ContainerClient:
    """A ``ContainerClient`` for ``config``'s container, credentials resolved from the environment
    where ``storage_options`` sets none. Contacts nothing.

    Raises:
        ConfigError: azure-storage-blob (the ``azure`` extra) is missing, or the connection string
            is for another account.
    """
    from twophase.coordinator.storage.azure_blob import azure_options_from_env, container_client

    location = config.parsed_location
    client: ContainerClient = container_client(
        location,
        azure_options_from_env(config.storage_options, None),
        retry_total=config.max_attempts - 1,
        needs="the Azure file sink needs azure-storage-blob",
        place="the sink's location is in",
    )
    return client


@functools.lru_cache(maxsize=16)
def cached_client(config: AzureBlobSinkConfig) -> ContainerClient:
    """One client per process and configuration (configs are frozen and hashable)."""
    return build_client(config)


ClientFactory = Callable[[AzureBlobSinkConfig], "ContainerClient"]
"""Makes the container client of a configuration (tests inject their own)."""


class BlobOps:
    """The sink's requests on one container.

    Args:
        client: the container's client.
        config: the sink's configuration.
    """

    def __init__(self, client: ContainerClient, config: AzureBlobSinkConfig) -> None:
        self.client = client
        self.config = config
        self.container = config.container
        self.place = ("container", self.container)
        """The log field and value of the place files go."""

    def check_container(self) -> None:
        """Get Container Properties: the container exists and the identity may read it.

        Raises:
            ConfigError: missing container or access denied; ServiceUnavailableError: unreachable.
        """
        try:
            self.client.get_container_properties()
        except Exception as e:
            raise_typed(e, f"read container {self.container!r}")

    def stage_block(self, blob: str, block_id: str, data: bytes) -> None:
        """Put Block: ``data`` staged under ``blob`` as ``block_id``, invisible until committed.

        Raises:
            ServiceUnavailableError / ConfigError: see :func:`raise_typed`.
        """
        try:
            self.client.get_blob_client(blob).stage_block(block_id, data, length=len(data))
        except Exception as e:
            raise_typed(e, f"stage a block of {blob}")

    def commit_new(self, blob: str, block_ids: tuple[str, ...], content_type: str) -> None:
        """Put Block List with ``If-None-Match: *``: the blob becomes visible made of ``block_ids``,
        only if no blob is at its name. SDK errors propagate (the committer reads them)."""
        from azure.core import MatchConditions
        from azure.storage.blob import BlobBlock, ContentSettings

        self.client.get_blob_client(blob).commit_block_list(
            [BlobBlock(block_id=b) for b in block_ids],
            content_settings=ContentSettings(content_type=content_type),
            match_condition=MatchConditions.IfMissing,
        )

    def committed_blocks(self, blob: str) -> tuple[list[str], int] | None:
        """Get Block List (committed): the committed block ids and the blob's size, or ``None``
        when no blob is committed at ``blob``. SDK errors other than 404 propagate."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            committed, _ = self.client.get_blob_client(blob).get_block_list("committed")
        except ResourceNotFoundError:
            return None
        return [b.id for b in committed], sum(b.size for b in committed)

    def discard_staged(self, blob: str) -> bool:
        """Drop the blocks staged under ``blob`` if no blob is committed there: an empty Put Block
        List with ``If-None-Match: *`` (which discards every uncommitted block, Azure "Put Block
        List"), then Delete Blob of exactly that empty blob (``If-Match``). A committed blob is
        never touched, except the empty one an earlier discard cut short between its two requests
        left behind (:meth:`delete_if_empty`). Returns whether anything was discarded.

        Raises:
            ServiceUnavailableError / ConfigError: see :func:`raise_typed`.
        """
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError

        client = self.client.get_blob_client(blob)
        try:
            answer = client.commit_block_list([], match_condition=MatchConditions.IfMissing)
        except (ResourceExistsError, ResourceModifiedError):
            return self.delete_if_empty(blob)  # a committed blob: only an interrupted discard's goes
        except Exception as e:
            raise_typed(e, f"discard the staged blocks of {blob}")
        try:
            client.delete_blob(etag=str(answer["etag"]), match_condition=MatchConditions.IfNotModified)
        except (ResourceNotFoundError, ResourceModifiedError):
            pass  # gone already, or replaced by a commit since: not ours to delete
        except Exception as e:
            raise_typed(e, f"delete the emptied blob {blob}")
        return True

    def delete_if_empty(self, blob: str) -> bool:
        """Delete the committed blob at ``blob`` iff it has no block and no byte (``If-Match`` its
        ETag): what a discard cut short after its empty Put Block List leaves. The sink never commits
        an empty file (a file opens with its first row), so such a blob is never a commit's.
        Returns whether it was deleted.

        Raises:
            ServiceUnavailableError / ConfigError: see :func:`raise_typed`.
        """
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

        client = self.client.get_blob_client(blob)
        try:
            props = client.get_blob_properties()
            if props.size != 0:
                return False
            committed, _ = client.get_block_list("committed")
            if committed:
                return False
            client.delete_blob(etag=str(props.etag), match_condition=MatchConditions.IfNotModified)
        except (ResourceNotFoundError, ResourceModifiedError):
            return False  # gone, or changed since it was read: not ours to delete
        except Exception as e:
            raise_typed(e, f"delete the empty blob {blob} an interrupted discard left")
        return True

    def uncommitted_names(self, prefix: str) -> list[str]:
        """Blob names under ``prefix`` that hold staged blocks and no committed blob (List Blobs
        with ``include=uncommittedblobs``, minus the committed listing), and committed empty blobs
        (zero bytes: what a discard cut short between its two requests leaves; the sink never
        commits an empty file).

        Raises:
            ServiceUnavailableError / ConfigError: see :func:`raise_typed`.
        """
        start = prefix + "/" if prefix else None
        try:
            every = set(
                self._names(self.client.list_blobs(name_starts_with=start, include=["uncommittedblobs"]))
            )
            committed = {b.name: b.size for b in self.client.list_blobs(name_starts_with=start)}
        except Exception as e:
            raise_typed(e, f"list the blobs under {prefix or 'the container root'!r}")
        empty = {name for name, size in committed.items() if size == 0}
        return sorted((every - set(committed)) | empty)

    @staticmethod
    def _names(listing: Iterator[Any]) -> Iterator[str]:
        for item in listing:
            yield item.name
