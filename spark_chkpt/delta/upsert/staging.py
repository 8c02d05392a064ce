"""Phase 1 of the upsert (executors): a ``foreachBatch`` batch staged as Parquet files.

:func:`stage_batch` runs :class:`StagingTask` in ``batch_df.mapInArrow``: each task
streams its Arrow batches into Parquet files with the ``chkpt-delta`` sink's
:class:`~spark_chkpt.delta.staging.ParquetStager` (one open file per partition value,
files tagged with the app and the attempt) and returns one small row per file (path,
size, rows, statistics) plus one row with the number of rows it read. Only those rows
reach the driver. Memory: one Arrow batch per task
(``spark.sql.execution.arrow.maxRecordsPerBatch`` rows) and the open Parquet writer's
row group. ``mapInArrow`` needs pandas on the driver (PySpark builds it on its pandas
UDF machinery), though no row passes through pandas.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.features.constraints import GeneratedColumns, TableRules
from spark_chkpt.delta.staging import ParquetStager, StagedFile, normalize_schema
from spark_chkpt.delta.upsert.merge import without_column
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.fs import resolve

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

# What each staging task returns: one row per staged file, and one "task" row with the
# number of rows the task read.
_STAGED_DDL = (
    "kind string, path string, size long, rows long, partition_values string, "
    "modification_time long, stats string"
)


@dataclass(frozen=True)
class StagingTask:
    """The staging task ``mapInArrow`` ships to executors (phase 1)."""

    table_uri: str
    folder: str  # "" (the table's own folders, to create it) or STAGING_DIR
    schema: pa.Schema  # the batch's Arrow schema
    partition_by: tuple[str, ...]
    app_id: str
    batch_id: int
    drop_deleted: str | None  # create: drop rows whose delete column is true, and it
    max_records_per_file: int
    target_file_bytes: int
    # The table's storage options: an executor's Python worker has no other way to the
    # table's store (no SparkContext, nothing remembered in its process).
    storage_options: tuple[tuple[str, str], ...] = ()
    # The table's row rules and generated columns (a MERGE into an existing table)
    rules: TableRules | None = None
    generated: GeneratedColumns | None = None
    delete_column: str | None = None  # rows it marks true are not checked (they delete)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        from spark_chkpt.runtime.worker_heap import freeze_imports

        freeze_imports()
        context = TaskContext.get()
        task = context.partitionId() if context else 0
        table = resolve(self.table_uri, storage_options=dict(self.storage_options))
        stager = ParquetStager(
            table=table.child(self.folder) if self.folder else table,
            schema=without_column(self.schema, self.drop_deleted),
            partition_by=self.partition_by,
            app_id=self.app_id,
            batch_id=self.batch_id,
            task=task,
            max_records_per_file=self.max_records_per_file,
            target_file_bytes=self.target_file_bytes,
        )
        seen = 0
        try:
            for batch in batches:
                seen += batch.num_rows
                if self.generated:
                    batch = self.generated.apply(batch)
                if self.rules:  # the rows that stay (a true delete column deletes)
                    self.rules.check(_kept(batch, self.delete_column))
                if self.drop_deleted is not None:
                    index = batch.schema.get_field_index(self.drop_deleted)
                    deleted = pc.fill_null(batch.column(index), False)
                    batch = batch.filter(pc.invert(deleted)).remove_column(index)
                stager.add(batch)
                if batch.num_rows:  # fault tests: task 0 fails, or the driver is killed
                    # while a task with rows stages (state half written)
                    failpoint(FaultPoint.IN_WRITE, self.batch_id, can_fail=task == 0)
            staged = stager.finish()
        except BaseException:
            stager.discard()
            raise
        rows: list[dict[str, Any]] = [
            {
                "kind": "file",
                "path": f"{self.folder}/{f.path}" if self.folder else f.path,
                "size": f.size,
                "rows": f.rows,
                "partition_values": json.dumps(f.partition_values),
                "modification_time": f.modification_time,
                "stats": f.stats,
            }
            for f in staged.files
        ]
        rows.append({"kind": "task", "rows": seen})
        yield pa.RecordBatch.from_pylist(rows, schema=staged_schema())


def _kept(batch: pa.RecordBatch, flag: str | None) -> pa.RecordBatch:
    """The rows of ``batch`` whose delete column ``flag`` is not true."""
    import pyarrow.compute as pc

    index = batch.schema.get_field_index(flag) if flag else -1
    if index < 0:
        return batch
    return batch.filter(pc.invert(pc.fill_null(batch.column(index), False)))


def staged_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("kind", pa.string()),
            ("path", pa.string()),
            ("size", pa.int64()),
            ("rows", pa.int64()),
            ("partition_values", pa.string()),
            ("modification_time", pa.int64()),
            ("stats", pa.string()),
        ]
    )


@dataclass(frozen=True)
class StagedBatch:
    """What the staging tasks of one attempt wrote."""

    create: bool  # staged in the table's folders (to create it), deletes dropped
    files: tuple[StagedFile, ...]
    source_rows: int
    schema: pa.Schema  # the files' schema


def stage_batch(batch_df: DataFrame, task: StagingTask) -> StagedBatch:
    """Run ``task`` on every partition of ``batch_df``; collect the files' metadata."""
    rows = batch_df.mapInArrow(task, _STAGED_DDL).collect()
    files = tuple(
        StagedFile(
            path=r["path"],
            size=r["size"],
            partition_values=json.loads(r["partition_values"]),
            modification_time=r["modification_time"],
            rows=r["rows"],
            stats=r["stats"],
        )
        for r in rows
        if r["kind"] == "file"
    )
    return StagedBatch(
        create=task.folder == "",  # the table's own folders: it is being created
        files=files,
        source_rows=sum(r["rows"] for r in rows if r["kind"] == "task"),
        schema=normalize_schema(without_column(task.schema, task.drop_deleted)),
    )
