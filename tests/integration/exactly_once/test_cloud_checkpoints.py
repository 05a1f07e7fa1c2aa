"""A Job API stream whose checkpoints live on Azure Blob Storage (Azurite) or GCS (fake-gcs-server),
killed after a checkpoint was published and restored from it in a new process: the sink holds
every record exactly once (issue #46).

The job is the exactly-once suite's script with its local JSON-lines file sink; only the
checkpoint location changes, and the store is reached through each platform's own variables
(``AZURE_STORAGE_CONNECTION_STRING``, ``STORAGE_EMULATOR_HOST``), as a deployed job would.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from support.exactly_once.support import FAULT_EXIT, assert_exactly_once, make_input, run_job

from twophase.coordinator.storage import AzureStorageOptions, GcsStorageOptions, open_storage
from twophase.integration.services.azurite import AzureBlobEndpoint
from twophase.integration.services.gcs_server import GcsEndpoint

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _azure(endpoint: AzureBlobEndpoint) -> tuple[str, dict[str, str], list[str]]:
    container = f"chk-{uuid.uuid4().hex[:12]}"
    endpoint.ensure_container(container)
    listing = endpoint.service_client().get_container_client(container).list_blob_names
    location = f"abfss://{container}@{endpoint.account_name}.dfs.core.windows.net/jobs"
    return location, endpoint.azure_env(), sorted(listing())


def _gcs(endpoint: GcsEndpoint) -> tuple[str, dict[str, str], list[str]]:
    bucket = f"chk-{uuid.uuid4().hex[:12]}"
    endpoint.ensure_bucket(bucket)
    return f"gs://{bucket}/jobs", endpoint.gcs_env(), []


@pytest.mark.long  # CI under 25 minutes (stop 54): runs in `make chaos`
@pytest.mark.parametrize("store", ["azure", "gcs"])
def test_a_job_killed_after_a_checkpoint_restores_from_the_store_exactly_once(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    endpoint = request.getfixturevalue(f"{store}_endpoint")
    location, env, before = _azure(endpoint) if store == "azure" else _gcs(endpoint)
    assert before == []
    expected = make_input(tmp_path, files=4)

    crashed = run_job(
        tmp_path, "--sinks", "a", "--checkpoint-dir", location, fault="after_persist:2", env=env
    )
    assert crashed.returncode == FAULT_EXIT, crashed.log
    done = run_job(tmp_path, "--sinks", "a", "--checkpoint-dir", location, env=env)
    assert done.returncode == 0, done.log
    assert done.outcome is not None and done.outcome["state"] == "FINISHED"
    assert_exactly_once(tmp_path, ["a"], expected)
    assert not (tmp_path / "chk").exists()  # every checkpoint went to the store
    storage = open_storage(
        location,
        "eo",
        azure_options=AzureStorageOptions(connection_string=env.get("AZURE_STORAGE_CONNECTION_STRING")),
        gcs_options=GcsStorageOptions(emulator_host=env.get("STORAGE_EMULATOR_HOST")),
        env={},
    )
    latest = storage.latest()
    assert latest is not None and latest.end_of_input  # the final checkpoint, read back from the store
