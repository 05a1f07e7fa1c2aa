"""A fresh Azurite container for one test: its client, its ``abfss://`` root and the options that
reach it; deleted when the block ends."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from twophase.coordinator.storage import AzureStorageOptions
from twophase.integration.services.azurite import AzureBlobEndpoint


@dataclass(frozen=True)
class FreshContainer:
    """``client``: the SDK's ``ContainerClient``; ``root``: ``abfss://<container>@<account>.dfs…``
    (no trailing ``/``); ``options``: the endpoint's connection string."""

    client: Any
    root: str
    options: AzureStorageOptions


@contextlib.contextmanager
def fresh_container(endpoint: AzureBlobEndpoint, prefix: str) -> Iterator[FreshContainer]:
    """Create ``<prefix>-<random>``, yield it, delete it."""
    container = f"{prefix}-{uuid.uuid4().hex[:12]}"
    endpoint.ensure_container(container)
    client = endpoint.service_client().get_container_client(container)
    root = f"abfss://{container}@{endpoint.account_name}.dfs.core.windows.net"
    try:
        yield FreshContainer(
            client, root, AzureStorageOptions(connection_string=endpoint.connection_string())
        )
    finally:
        client.delete_container()
