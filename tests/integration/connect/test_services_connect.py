"""``twophase services up --spark-connect``: a detached Spark Connect server as a service (#18 §4).

``up`` records the server like Kafka and MinIO (Kafka and S3 are given here, so only the server
starts); ``status`` shows its ``sc://`` URL; a Connect client runs a query on it; its Python
workers import twophase from the shipped wheel and its environment points at the S3 endpoint; the
Connect tests' fixture reuses it; ``down`` stops it, and its Python workers end with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tenacity
from support.cli import json_output, run_twophase

from twophase.integration.services import S3Endpoint
from twophase.integration.services.connect_service import connect_address, spark_connect_service
from twophase.integration.services.launcher import given_env
from twophase.integration.services.process import pid_alive
from twophase.sinks.errors import ConfigError

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (its Python worker daemon and workers, which pyspark puts in a
    process group of their own: they end when the JVM closes their stdin)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if b"=" in item)


def test_connect_urls_are_parsed_and_bad_ones_refused() -> None:
    assert connect_address("sc://127.0.0.1:15010") == ("127.0.0.1", 15010)
    assert connect_address("sc://host/;token=x") == ("host", 15002)
    for bad in ("http://host:15002", "sc://", "sc://host:port", "host:15002"):
        with pytest.raises(ConfigError, match="sc://host:port"):
            connect_address(bad)


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
@pytest.mark.kafka
@pytest.mark.s3
def test_services_up_spark_connect_status_client_down(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    given = given_env(kafka_bootstrap, s3_endpoint)
    up = run_twophase(["services", "up", "--spark-connect", "--json"], tmp_path, given)
    state_file = tmp_path / "run" / "services.json"
    entry: dict[str, Any] = {}
    workers: list[int] = []
    try:
        rows = {s["name"]: s for s in json_output(up)["services"]}
        entry = json.loads(state_file.read_text())["spark-connect"]
        url = entry["url"]
        assert url.startswith("sc://127.0.0.1:")
        connect = rows["spark-connect"]
        assert (connect["origin"], connect["endpoint"], connect["pid"], connect["ready"]) == (
            "services up",
            url,
            entry["pid"],
            True,
        )
        assert (rows["kafka"]["origin"], rows["s3"]["origin"]) == ("environment", "environment")
        # the sinks it runs reach the given S3 through the standard AWS variables
        environ = _environ(entry["pid"])
        assert (environ["AWS_ENDPOINT_URL"], environ["AWS_ACCESS_KEY_ID"]) == (
            s3_endpoint.endpoint_url,
            s3_endpoint.access_key,
        )

        status = run_twophase(["services", "status"], tmp_path, given)  # an 80-column terminal
        assert status.returncode == 0, status.stderr
        assert any(url in line for line in status.stdout.splitlines()), status.stdout
        assert max(len(line) for line in status.stdout.splitlines()) <= 80

        def where_twophase(batches: Iterator[Any]) -> Iterator[Any]:  # local: pickled by value
            import pyarrow as pa

            import twophase

            for batch in batches:
                yield pa.record_batch({"where": [str(twophase.__file__)] * batch.num_rows})

        session = ConnectSession.builder.remote(url).create()
        try:
            assert session.range(5).count() == 5
            row = session.range(1).mapInArrow(where_twophase, "where string").first()
        finally:
            session.stop()
        assert row is not None and ".zip" in row["where"]  # the shipped wheel, not an installed twophase
        workers = _descendants(entry["pid"])
        assert workers  # the Python worker daemon at least

        # the Connect tests' fixture takes this recorded server instead of starting its own
        monkeypatch.delenv("TWOPHASE_SPARK_CONNECT", raising=False)
        monkeypatch.setenv("TWOPHASE_RUN_DIR", str(tmp_path / "run"))
        with spark_connect_service(s3_endpoint) as reused:
            assert reused == url
    finally:
        down = run_twophase(["services", "down", "--json"], tmp_path, given)

    assert json_output(down) == {"stopped": ["spark-connect"]}
    assert not pid_alive(entry["pid"])
    gone = tenacity.Retrying(  # the worker daemon notices the closed stdin within a second (idle)
        stop=tenacity.stop_after_delay(60),
        wait=tenacity.wait_fixed(0.2),
        retry=tenacity.retry_if_result(bool),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else [],
    )
    assert gone(lambda: [pid for pid in workers if pid_alive(pid)]) == []
    assert not state_file.exists() and not Path(entry["data_dir"]).exists()
