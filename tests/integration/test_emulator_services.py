"""``twophase services up --azure --gcs``: Azurite and fake-gcs-server run natively like MinIO,
recorded for ``status`` and ``down``, reused by later processes, and reached with each service's
own SDK (issue #46)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import json_output, run_twophase

from twophase.integration.services import S3Endpoint
from twophase.integration.services.azurite import AzureBlobEndpoint, endpoint_from_connection_string
from twophase.integration.services.gcs_server import GcsEndpoint
from twophase.integration.services.launcher import given_env
from twophase.integration.services.process import pid_alive
from twophase.sinks.errors import ConfigError


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.slow
def test_services_up_azure_gcs_status_down(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    given = given_env(kafka_bootstrap, s3_endpoint)  # only the emulators start
    up = run_twophase(["services", "up", "--azure", "--gcs", "--json"], tmp_path, given)
    state_file = tmp_path / "run" / "services.json"
    try:
        rows = {s["name"]: s for s in json_output(up)["services"]}
        state = json.loads(state_file.read_text())
        azure, gcs = state["azure"], state["gcs"]
        pids = [azure["pid"], gcs["pid"]]
        assert all(pid_alive(pid) for pid in pids)
        assert (rows["azure"]["origin"], rows["azure"]["endpoint"], rows["azure"]["ready"]) == (
            "services up",
            azure["blob_url"],
            True,
        )
        assert (rows["gcs"]["origin"], rows["gcs"]["endpoint"], rows["gcs"]["ready"]) == (
            "services up",
            gcs["url"],
            True,
        )
        # the SDKs reach them: a blob and an object written and read back
        blob = AzureBlobEndpoint(azure["blob_url"], azure["account_name"], azure["account_key"])
        blob.ensure_container("probe")
        client = blob.service_client().get_container_client("probe")
        client.upload_blob("k", b"azure", overwrite=True)
        assert client.download_blob("k").readall() == b"azure"
        bucket_client = GcsEndpoint(gcs["url"]).client()
        GcsEndpoint(gcs["url"]).ensure_bucket("probe")
        bucket_client.bucket("probe").blob("k").upload_from_string(b"gcs")
        assert bucket_client.bucket("probe").blob("k").download_as_bytes() == b"gcs"

        again = run_twophase(["services", "up", "--azure", "--gcs", "--json"], tmp_path, given)  # reused
        assert json.loads(state_file.read_text())["azure"]["pid"] == azure["pid"]
        assert {s["name"]: s["ready"] for s in json_output(again)["services"]}["gcs"] is True

        status = run_twophase(["services", "status"], tmp_path, given)  # an 80-column terminal
        assert status.returncode == 0, status.stderr
        assert azure["account_key"] not in status.stdout + up.stdout
        assert max(len(line) for line in status.stdout.splitlines()) <= 80
    finally:
        down = run_twophase(["services", "down", "--json"], tmp_path, given)

    assert sorted(json_output(down)["stopped"]) == ["azure", "gcs"]
    assert not any(pid_alive(pid) for pid in pids)
    assert not Path(azure["data_dir"]).exists() and not Path(gcs["data_dir"]).exists()


def test_a_connection_string_without_a_key_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="lacks AccountKey") as info:
        endpoint_from_connection_string("AccountName=a;BlobEndpoint=http://127.0.0.1:1/a")
    assert "\n" not in str(info.value)
