"""The Iceberg sink's Spark-staged write's driver half: its configuration, the write's options, the
hand-off's data files as committables (committed by the sink's own append), and the sessions it
refuses by name before anything is written."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from twophase.connectors.iceberg import IcebergSink, IcebergSinkConfig
from twophase.connectors.iceberg.internal import naming
from twophase.connectors.iceberg.internal.staged_write import (
    ICEBERG_WRITE_OPTIONS,
    staged_tasks,
    write_options,
)
from twophase.sinks.errors import ConfigError

UUID = "6b1c3a4e-0000-4000-8000-000000000001"
PREFIX = "file:///wh/db/t/data/twophase-0123456789ab"


def test_the_spark_path_needs_the_session_s_catalog() -> None:
    with pytest.raises(ConfigError, match="write_path='spark' needs spark_catalog"):
        IcebergSinkConfig(table="db.t", catalog_uri="/tmp/c.db", write_path="spark")
    with pytest.raises(ConfigError, match="write_path must be one of"):
        IcebergSinkConfig(table="db.t", catalog_uri="/tmp/c.db", write_path="jvm")
    with pytest.raises(ConfigError, match="spark_catalog must be a Spark catalog name"):
        IcebergSinkConfig(table="db.t", catalog_uri="/tmp/c.db", write_path="spark", spark_catalog="a.b")


def test_the_write_names_the_table_its_identity_and_the_job_s_data_prefix() -> None:
    options = write_options("db.t", "lake", UUID, PREFIX, 7, "w1")
    assert options["twophase.table"] == "db.t" and options["twophase.catalog"] == "lake"
    assert options["twophase.table.uuid"] == UUID and options["twophase.data.prefix"] == PREFIX
    assert (options["twophase.checkpoint"], options["twophase.write.id"]) == ("7", "w1")
    # Parquet (what the committable holds), and no shuffle: one task per subtask
    assert {k: options[k] for k in ICEBERG_WRITE_OPTIONS} == {
        "write-format": "parquet",
        "distribution-mode": "none",
    }


def data_file(partition: int, checkpoint: int = 7, attempt: int = 0, records: int = 10) -> dict[str, Any]:
    name = naming.data_file_name(partition, checkpoint, attempt, f"{partition:032x}")
    return {
        "path": naming.data_file_path(PREFIX, "region=eu", name),
        "size": 1000 + partition,
        "record_count": records,
        "spec_id": 0,
        "partition": [base64.b64encode(b"eu").decode(), None],
        "column_sizes": [[1, 40], [2, 20]],
        "value_counts": [[1, records]],
        "null_value_counts": [[1, 0]],
        "nan_value_counts": [],
        "lower_bounds": [[1, base64.b64encode((3).to_bytes(8, "little")).decode()]],
        "upper_bounds": [[1, base64.b64encode((9).to_bytes(8, "little")).decode()]],
        "split_offsets": [4],
    }


def handed(*tasks: list[dict[str, Any]], table_uuid: str = UUID) -> str:
    return json.dumps({"table_uuid": table_uuid, "schema_id": 3, "tasks": list(tasks)})


def test_the_hand_off_becomes_one_committable_per_task_that_wrote() -> None:
    tasks = staged_tasks(
        handed([data_file(0)], [], [data_file(2, attempt=1, records=4), data_file(2, attempt=1)]),
        "db.t",
        UUID,
        PREFIX,
        "job-1",
        "lake",
        7,
    )
    assert sorted(tasks) == [0, 2]
    task = tasks[2]
    assert (task.attempt, task.records) == (1, 14)
    c = task.committable
    assert (c.table, c.table_uuid, c.job_id, c.sink_name, c.checkpoint_id) == (
        "db.t",
        UUID,
        "job-1",
        "lake",
        7,
    )
    assert (c.partition, c.attempt, c.num_partitions, c.schema_id) == (2, 1, 3, 3)
    f = c.files[0]
    assert f.partition == (b"eu", None) and f.lower_bounds == ((1, (3).to_bytes(8, "little")),)
    assert (f.column_sizes, f.split_offsets, f.size) == (((1, 40), (2, 20)), (4,), 1002)


def test_a_location_is_spelt_as_the_data_prefix_spells_it() -> None:
    # Hadoop's file system writes file:///a as file:/a; the lingering cleanup compares the
    # locations manifests hold with those it lists under the prefix, so both must be spelt alike
    written = data_file(0)
    hadoop = {**written, "path": written["path"].replace("file:///", "file:/", 1)}
    (task,) = staged_tasks(handed([hadoop]), "db.t", UUID, PREFIX, "job-1", "lake", 7).values()
    assert task.committable.files[0].path == written["path"]


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (None, "handed over nothing"),
        (handed([data_file(0)], table_uuid="another"), "wrote table another"),
        (handed([data_file(1)]), "task 0 of checkpoint 7 handed over files not named for it"),
        (handed([data_file(0, checkpoint=6)]), "not named for it"),
        (handed([data_file(0, attempt=0), data_file(0, attempt=1)]), "not named for it"),
        (handed([{**data_file(0), "path": PREFIX + "/00000-1-x-00001.parquet"}]), "not named for it"),
        (
            handed(
                [{**data_file(0), "path": data_file(0)["path"].replace("twophase-0123", "twophase-9999")}]
            ),
            "not named",
        ),
    ],
)
def test_files_not_placed_for_their_task_or_table_are_refused(payload: str | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        staged_tasks(payload, "db.t", UUID, PREFIX, "job-1", "lake", 7)


class FakeConf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class FakeJvm:
    """py4j's view of a driver JVM holding only the classes in ``present``."""

    def __init__(self, present: set[str]) -> None:
        self.present = present
        self.py4j = self
        self.reflection = self
        self.ReflectionUtil = self

    def classForName(self, name: str) -> object:  # py4j's name
        if name not in self.present:
            raise RuntimeError(f"java.lang.ClassNotFoundException: {name}")
        return name


class FakeSession:
    def __init__(self, jvm: FakeJvm | None, conf: dict[str, str]) -> None:
        if jvm is not None:
            self._jvm = jvm
        self.conf = FakeConf(conf)


class FakeFrame:
    def __init__(self, session: FakeSession) -> None:
        self.sparkSession = session


EVERYTHING = {"org.apache.iceberg.spark.source.SparkTable", "twophase.iceberg.StagedIcebergWrites"}


@pytest.mark.parametrize(
    ("session", "match"),
    [
        (FakeSession(None, {}), "a Spark Connect session has not"),
        (FakeSession(FakeJvm(set()), {}), "needs Iceberg's Spark runtime"),
        (
            FakeSession(FakeJvm({"org.apache.iceberg.spark.source.SparkTable"}), {}),
            r"needs twophase's Iceberg jar \(spark.jars: twophase.connectors.iceberg.staging_jar\(\)\)",
        ),
        (FakeSession(FakeJvm(EVERYTHING), {}), r"no catalog 'lake' \(spark.sql.catalog.lake is unset\)"),
    ],
)
def test_a_session_without_what_the_write_needs_is_refused_before_writing(
    make_config: Callable[..., IcebergSinkConfig], session: FakeSession, match: str
) -> None:
    sink = IcebergSink("lake", make_config(write_path="spark", spark_catalog="lake"))
    assert sink.stages_with_spark()
    with pytest.raises(ConfigError, match=match):
        sink.stage_with_spark(FakeFrame(session), "job-1", 1)


def test_the_python_path_stays_the_default(make_config: Callable[..., IcebergSinkConfig]) -> None:
    assert not IcebergSink("lake", make_config()).stages_with_spark()
