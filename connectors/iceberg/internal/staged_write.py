"""The Iceberg sink's Spark-staged epoch (issue #44 item 4): Iceberg's Spark writer writes, the sink commits.

Each epoch is written by Iceberg's own Spark writer through twophase's DataSource V2 source
(``connectors/iceberg/jvm``, :data:`SOURCE`), which loads the table from the session's Iceberg
catalog (``spark_catalog``), checks that it is the sink's table (its ``table-uuid``), places every
data file under the job's data prefix with the Python path's names
(:mod:`~twophase.connectors.iceberg.internal.naming`), lets one attempt per task commit (Spark's
output commit coordination) and, instead of committing a snapshot, hands the committed tasks' data
files to this driver through py4j (``twophase.iceberg.StagedIcebergWrites``). They become one
:class:`IcebergCommittable` per task, which the sink commits in its one append per checkpoint like
any other; a file no checkpoint holds is the lingering cleanup's, as on the Python path. So the rows
never reach Python, and nothing in the protocol changes.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from twophase.connectors.iceberg.internal import naming
from twophase.connectors.iceberg.internal.committable import IcebergCommittable, IcebergDataFile
from twophase.sinks.spark_staging import StagedTask

SOURCE = "twophase.iceberg.StagedIcebergSource"
"""The staged write's data source (``df.write.format(SOURCE)``, ``connectors/iceberg/jvm``)."""
HANDOFF = "twophase.iceberg.StagedIcebergWrites"
"""The JVM class holding finished writes' data files until the driver takes them."""
ICEBERG_RUNTIME_CLASS = "org.apache.iceberg.spark.source.SparkTable"
"""A class of Iceberg's Spark runtime (``iceberg-spark-runtime-<spark>_<scala>``)."""
ICEBERG_WRITE_OPTIONS = {
    # the committable holds Parquet files (Iceberg table spec, "Manifests": file_format)
    "write-format": "parquet",
    # no shuffle before the write: the write's tasks are the epoch's subtasks, one acknowledgement
    # each, as on the Python path (each task writes its own files for every table partition)
    "distribution-mode": "none",
}
"""Iceberg's Spark write options the staged write sets (Iceberg's ``SparkWriteOptions``)."""


def write_options(
    config_table: str,
    spark_catalog: str,
    table_uuid: str,
    data_prefix: str,
    checkpoint_id: int,
    write_id: str,
) -> dict[str, str]:
    """The options of one staged write (``StagedWriteSpec`` in ``connectors/iceberg/jvm``) and
    :data:`ICEBERG_WRITE_OPTIONS`. No secret: the catalog is the session's."""
    return {
        **ICEBERG_WRITE_OPTIONS,
        "twophase.write.id": write_id,
        "twophase.catalog": spark_catalog,
        "twophase.table": config_table,
        "twophase.table.uuid": table_uuid,
        "twophase.data.prefix": data_prefix,
        "twophase.checkpoint": str(checkpoint_id),
    }


def new_write_id() -> str:
    """A fresh id for one write attempt's hand-off."""
    return uuid.uuid4().hex


def staged_tasks(
    handed: str | None,
    table: str,
    table_uuid: str,
    data_prefix: str,
    job_id: str,
    sink_name: str,
    checkpoint_id: int,
) -> dict[int, StagedTask]:
    """Each Spark partition's committable, from the JSON object a write's job commit handed over
    (``StagedIcebergWrites.take``): the table's ``table-uuid`` and schema id, and per task (in
    partition order) its data files. A task's attempt is the one its files' names carry. Each
    file's location is spelt as ``data_prefix`` spells it (Hadoop's file system writes
    ``file:///a`` as ``file:/a``): the lingering cleanup tells committed files from lingering
    ones by comparing the locations manifests hold with those it lists under the prefix.

    Raises:
        ValueError: nothing was handed over (``None``), another table's files, a file outside
            ``data_prefix`` or not named by the staged write's placement (another partition,
            checkpoint or attempt than its task's), or a file the committable refuses.
    """
    if handed is None:
        raise ValueError("the staged Iceberg write handed over nothing: its job commit did not run")
    write = json.loads(handed)
    if write["table_uuid"] != table_uuid:
        raise ValueError(
            f"the staged Iceberg write wrote table {write['table_uuid']}, the sink's is {table_uuid}"
        )
    tasks = write["tasks"]
    out: dict[int, StagedTask] = {}
    for partition, files in enumerate(tasks):
        if not files:
            continue
        data_files = tuple(_data_file(f, data_prefix) for f in files)
        names = [
            naming.parse_data_file_path(f.path) if f.path.startswith(data_prefix + "/") else None
            for f in data_files
        ]
        attempts = {n.attempt for n in names if n is not None}
        if len(attempts) != 1 or any(
            n is None or (n.subtask, n.checkpoint_id) != (partition, checkpoint_id) for n in names
        ):
            raise ValueError(
                f"the staged Iceberg write's task {partition} of checkpoint {checkpoint_id} handed "
                f"over files not named for it: {[f.path for f in data_files]}"
            )
        committable = IcebergCommittable(
            table=table,
            table_uuid=table_uuid,
            job_id=job_id,
            sink_name=sink_name,
            checkpoint_id=checkpoint_id,
            partition=partition,
            attempt=attempts.pop(),
            num_partitions=len(tasks),
            schema_id=int(write["schema_id"]),
            files=data_files,
        )
        out[partition] = StagedTask(committable.attempt, committable, committable.num_records)
    return out


def _placed(path: str, prefix: str) -> str:
    """``path`` spelt with ``prefix``'s spelling, or unchanged when it is not under ``prefix``."""
    spellings = [prefix]
    if prefix.startswith("file:///"):
        spellings.append("file:/" + prefix[len("file:///") :])
    for spelt in spellings:
        if path.startswith(spelt + "/"):
            return prefix + path[len(spelt) :]
    return path


def _data_file(f: dict[str, Any], data_prefix: str) -> IcebergDataFile:
    def counts(pairs: list[list[int]]) -> tuple[tuple[int, int], ...]:
        return tuple((int(k), int(v)) for k, v in pairs)

    def bounds(pairs: list[list[Any]]) -> tuple[tuple[int, bytes], ...]:
        return tuple((int(k), base64.b64decode(v)) for k, v in pairs)

    return IcebergDataFile(
        path=_placed(str(f["path"]), data_prefix),
        size=int(f["size"]),
        record_count=int(f["record_count"]),
        spec_id=int(f["spec_id"]),
        partition=tuple(None if v is None else base64.b64decode(v) for v in f["partition"]),
        column_sizes=counts(f["column_sizes"]),
        value_counts=counts(f["value_counts"]),
        null_value_counts=counts(f["null_value_counts"]),
        nan_value_counts=counts(f["nan_value_counts"]),
        lower_bounds=bounds(f["lower_bounds"]),
        upper_bounds=bounds(f["upper_bounds"]),
        split_offsets=tuple(int(o) for o in f["split_offsets"]),
    )
