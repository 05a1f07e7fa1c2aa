"""Every table of the CLI fits an 80-column terminal and never cuts a cell (rendered with rich)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.text import Text
from support.cli import rendered_columns

from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.metrics import SinkCommitMetrics
from twophase.coordinator.state.payload import payload_bytes
from twophase.coordinator.storage.base import CheckpointRef
from twophase.integration.cli import checkpoints, flights, lingering, services
from twophase.integration.cli.output import Column, FittedTable, table
from twophase.integration.jobs.flights import FlightsJobSpec, FlightsRun
from twophase.integration.lingering import ItemStatus, LingeringItem, SinkLingering
from twophase.integration.services import ServiceStatus
from twophase.integration.verify import SinkReport, VerifyReport

WIDTH = 80


def _render(table: FittedTable) -> str:
    out = io.StringIO()
    Console(file=out, width=WIDTH, color_system=None, legacy_windows=False).print(table)
    return out.getvalue()


def assert_fits(table: FittedTable) -> str:
    """Lines ≤ 80 columns, and each column's rendered text is exactly its cells' text (nothing cut)."""
    text = _render(table)
    widths = [Text(line).cell_len for line in text.splitlines()]
    assert max(widths) <= WIDTH, text
    assert "…" not in text, text
    got = rendered_columns(text)
    rows = table.rows
    want = ["".join("".join(Text.from_markup(r[i]).plain.split()) for r in rows) for i in range(len(rows[0]))]
    assert got == want, text
    for column in got:
        assert column, f"a column is empty:\n{text}"
    return text


SERVICES = [
    ServiceStatus(
        "kafka",
        "services up",
        "127.0.0.1:39123",
        123456,
        True,
        "/home/someone/.cache/twophase/run/data/kafka",
    ),
    ServiceStatus(
        "s3",
        "environment",
        "https://s3.eu-west-1.amazonaws.com",
        None,
        False,
        "S3 endpoint https://s3.eu-west-1.amazonaws.com rejected the credentials "
        "(InvalidAccessKeyId); check TWOPHASE_S3_ACCESS_KEY",
    ),
]


def test_services_status_shows_whole_endpoints() -> None:
    table = services.status_table(SERVICES)
    text = assert_fits(table)
    for row in SERVICES:
        assert any(row.endpoint in line for line in text.splitlines()), text  # one line, whole


def _meta(cid: int, kind: CheckpointKind, end: bool = False) -> CheckpointMetadata:
    payload = {"kind": "kafka", "version": 1, "body": {}}
    return CheckpointMetadata(
        job_id="weather_stations_eu_west",
        checkpoint_id=cid,
        kind=kind,
        timestamp_ms=1_700_000_000_000 + cid,
        sinks={
            "events": SinkSnapshot(
                4, tuple(CommittableRecord(p, 0, payload_bytes(payload), cid) for p in range(4))
            ),
            "archive_parquet": SinkSnapshot(4, (), {0: {"x": 1}, 1: {"x": 2}}),
            "lake": SinkSnapshot(4),
        },
        source_position={"engine": "kafka-offsets", "topic": "weather.raw", "offsets": {"0": 1234567}}
        if cid == 3
        else {"engine": "spark", "query_id": "q", "batch_id": cid},
        fully_finished=("lake",) if end else (),
        end_of_input=end,
    )


def test_checkpoints_list_fits() -> None:
    kinds = [(1, CheckpointKind.CHECKPOINT), (2, CheckpointKind.SAVEPOINT), (3, CheckpointKind.FINAL)]
    refs = [CheckpointRef(cid, kind, f"/chk/weather/chk-{cid}/_metadata") for cid, kind in kinds]
    metas = [_meta(cid, kind, end=kind is CheckpointKind.FINAL) for cid, kind in kinds]
    table = checkpoints.list_table("weather_stations_eu_west", refs, metas)
    text = assert_fits(table)
    assert text.count("+2 in progress") == 3


LISTING = [
    SinkLingering(
        "events",
        "kafka",
        "open transactions",
        (
            LingeringItem("twophase-weather_stations_eu_west-events-0-2", ItemStatus.LINGERING),
            LingeringItem("twophase-weather_stations_eu_west-events-1-3", ItemStatus.HELD),
        ),
    ),
    SinkLingering(
        "archive_parquet",
        "s3",
        "pending uploads and tails",
        (
            LingeringItem(
                "warehouse/weather/station=EGLL/month=1/part-00003-c17-0123456789ab-"
                "0123456789abcdef0123456789abcdef.parquet",
                ItemStatus.LINGERING,
                "upload 2~ZmFrZS11cGxvYWQtaWQtZm9yLXRlc3RpbmctdGhlLWNsaQ",
            ),
        ),
    ),
    SinkLingering(
        "lake", "delta", "unreferenced data files", (), detail="version 7, 12 data files of the job"
    ),
    SinkLingering("custom", "MyFancySink", "(cannot be listed)", listable=False),
]


@pytest.mark.parametrize("acted", [False, True])
def test_lingering_tables_fit(acted: bool) -> None:
    after = LISTING if acted else None
    aborted = {"events": 1, "archive_parquet": 1, "lake": 0, "custom": 0} if acted else None
    summary = lingering.summary_table("weather_stations_eu_west", LISTING, after, aborted)
    assert_fits(summary)
    items = lingering.items_table(LISTING)
    assert_fits(items)


def _report() -> VerifyReport:
    s3_lingering = (
        "pending uploads and tails: flights/flights_20240101_120000/origin=EWR/month=1/"
        "part-00000-c2-0123456789ab-0123.parquet (+1 more)"
    )
    sinks = (
        SinkReport(
            "kafka",
            "kafka topic flights.flights_20240101_120000",
            336_776,
            ids_ok=True,
            content_ok=True,
            lingering_detail="open transactions: none",
            detail="3 partitions",
        ),
        SinkReport(
            "s3",
            "s3://twophase-flights/flights/flights_20240101_120000",
            336_776,
            ids_ok=True,
            content_ok=True,
            lingering=2,
            lingering_detail=s3_lingering,
            detail="1,044 Parquet files",
        ),
        SinkReport(
            "delta",
            "/home/someone/.cache/twophase/flights-runs/flights_20240101_120000/delta",
            error="ServiceUnavailableError: the table cannot be read",
        ),
    )
    return VerifyReport(
        "flights_20240101_120000", 336_776, sinks, False, "checkpoint 13 (final, end_of_input=True)"
    )


def test_verify_and_demo_tables_fit() -> None:
    report = _report()
    for t in flights.verification_tables(report):
        assert_fits(t)
    counters = {
        name: SinkCommitMetrics(name, None, 39, 0, 2, 1, 336_776, None, 12_345.0, tuple(range(1, 14)))
        for name in ("kafka", "s3", "delta")
    }
    spec = FlightsJobSpec("flights_20240101_120000", "/tmp/flights-run")
    run = FlightsRun(spec, JobState.FINISHED, 123.4, (), (), counters)
    summary = flights.summary_table(run, report)
    assert_fits(summary)
    live = flights.counters_table(counters)
    assert_fits(live)


def test_a_table_too_wide_for_any_layout_prints_records() -> None:
    endpoints = [
        "https://bucket-with-a-long-name.s3.dualstack.eu-west-1.amazonaws.com",
        "http://127.0.0.1:9000",
    ]
    wide = table(
        "endpoints",
        [Column("primary endpoint", "whole"), Column("secondary endpoint", "whole"), Column("note", "text")],
        [[endpoints[0], endpoints[1], "both answer"]],
    )
    assert not wide.fits(WIDTH)
    text = _render(wide)
    assert max(Text(line).cell_len for line in text.splitlines()) <= WIDTH
    assert "…" not in text
    fields, values = rendered_columns(text, header=False)
    assert fields == "primaryendpointsecondaryendpointnote"
    assert values == "".join(endpoints) + "bothanswer"
