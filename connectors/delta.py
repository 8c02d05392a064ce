"""The ``chkpt-delta`` sink: exactly-once appends (or, in ``outputMode("complete")``,
replacements) of a Delta table through delta-rs.

Executors stage Parquet files (:class:`~spark_chkpt.delta.staging.ParquetStager`); the
driver's ``commit`` hands them to
:class:`~spark_chkpt.delta.sink.committer.DeltaCoordinator`, which makes them
visible in one Delta commit together with ``txn(appId, batchId)`` and the snapshot record.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_chkpt.delta.sink.committer import CommitSettings, DeltaCoordinator
from spark_chkpt.delta.sink.options import DEAD_LETTER_COLUMN, DeltaSinkConfig
from spark_chkpt.delta.staging import ParquetStager, StagedFile, StagedOutput
from spark_chkpt.errors import ConfigError
from spark_chkpt.fs import resolve
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.testing.failpoints import FaultPoint, maybe_fail, maybe_kill

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


class StagedMessage(StagedOutput, WriterCommitMessage):
    """A task's staged output, returned to the driver as Spark's commit message; with
    ``deadLetterPath``, also the files staged for the dead-letter table."""

    dead_letter_files: list[StagedFile]


def pa_schema_of(struct: pa.DataType) -> pa.Schema:
    """The columns of a dead-letter row: the fields of the ``_dead_letter`` struct."""
    import pyarrow as pa

    return pa.schema([struct.field(i) for i in range(struct.num_fields)])


def split_dead_letters(batch: pa.RecordBatch, dead: ParquetStager) -> pa.RecordBatch:
    """Stage the rows whose ``_dead_letter`` is set in the dead-letter table; returns the
    other rows without the column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    index = batch.schema.get_field_index(DEAD_LETTER_COLUMN)
    column = batch.column(index)
    bad = pc.is_valid(column)
    if pc.any(bad).as_py():
        letters = pc.filter(column, bad)
        dead.add(pa.RecordBatch.from_struct_array(letters))
        batch = batch.filter(pc.invert(bad))
    return batch.remove_column(index)


def check_dead_letters(schema: StructType, config: DeltaSinkConfig) -> None:
    """``deadLetterPath`` and the ``_dead_letter`` struct column come together."""
    field = next((f for f in schema.fields if f.name == DEAD_LETTER_COLUMN), None)
    if config.dead_letter_path and (field is None or not isinstance(field.dataType, StructType)):
        raise ConfigError(
            "deadLetterPath",
            config.dead_letter_path,
            f"the query needs a struct column '{DEAD_LETTER_COLUMN}' (null for good rows) "
            "holding each malformed record; the jobs build it with job.badRecords=deadLetter",
        )
    if field is not None and not config.dead_letter_path:
        raise ConfigError(
            "deadLetterPath",
            None,
            f"the query has a '{DEAD_LETTER_COLUMN}' column: set deadLetterPath to the "
            "dead-letter table its rows go to",
        )


class DeltaDataSource(DataSource):
    """``df.writeStream.format("chkpt-delta").option("path", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "chkpt-delta"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # outputMode("complete") reaches a Python sink as overwrite=True; Spark 4.2 refuses
        # outputMode("update") itself (use spark_chkpt.DeltaUpsert in foreachBatch).
        config = DeltaSinkConfig.from_options(self.options)
        config.check_columns(schema.fieldNames())
        check_dead_letters(schema, config)
        if overwrite and config.dead_letter_path:
            raise ConfigError(
                "deadLetterPath",
                config.dead_letter_path,
                "outputMode('complete') rewrites the whole result each batch; dead letters "
                "belong to the append query that parses the records",
            )
        app_id = (
            config.txn_app_id or SparkCheckpoint(location=config.checkpoint_location).query_id()
        )
        return DeltaStreamWriter(config=config, schema=schema, app_id=app_id, complete=overwrite)


class DeltaStreamWriter(DataSourceStreamArrowWriter):
    """Phase 1 in ``write`` (executors), phase 2 in ``commit`` / ``abort`` (driver)."""

    def __init__(
        self, *, config: DeltaSinkConfig, schema: StructType, app_id: str, complete: bool = False
    ) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.config = config
        self.app_id = app_id
        self.complete = complete  # outputMode("complete"): each batch replaces the table
        full = to_arrow_schema(schema, timezone="UTC")
        index = full.get_field_index(DEAD_LETTER_COLUMN)
        # The table's columns; dead letters (if any) go to their own table's columns.
        self.arrow_schema: pa.Schema = full.remove(index) if index >= 0 else full
        self.dead_letter_schema: pa.Schema | None = (
            pa_schema_of(full.field(index).type) if index >= 0 else None
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_prop = context.getLocalProperty("streaming.sql.batchId") if context else None
        batch_id = int(batch_prop) if batch_prop is not None else None
        task = context.partitionId() if context else 0
        stager = self._stager(self.config.path, self.arrow_schema, batch_id, task)
        dead = (
            self._stager(self.config.dead_letter_path, self.dead_letter_schema, batch_id, task, ())
            if self.config.dead_letter_path and self.dead_letter_schema is not None
            else None
        )
        try:
            for batch in iterator:
                if dead is not None:
                    batch = split_dead_letters(batch, dead)
                stager.add(batch)
                if stager.output.batch_id is not None:
                    # tests: the first task of the batch fails, or the driver dies while
                    # a task with rows runs (a stateful stage's state stores half written)
                    if stager.output.task == 0:
                        maybe_fail(FaultPoint.IN_WRITE, stager.output.batch_id)
                    maybe_kill(FaultPoint.IN_WRITE, stager.output.batch_id)
            staged = stager.finish()
            dead_staged = dead.finish() if dead is not None else None
        except BaseException:
            stager.discard()
            if dead is not None:
                dead.discard()
            raise
        message = StagedMessage(
            attempt=staged.attempt, batch_id=staged.batch_id, task=staged.task, files=staged.files
        )
        message.dead_letter_files = dead_staged.files if dead_staged is not None else []
        return message

    def _stager(
        self,
        path: str,
        schema: pa.Schema,
        batch_id: int | None,
        task: int,
        partition_by: tuple[str, ...] | None = None,
    ) -> ParquetStager:
        return ParquetStager(
            table=resolve(path),
            schema=schema,
            partition_by=self.config.partition_by if partition_by is None else partition_by,
            app_id=self.app_id,
            batch_id=batch_id,
            task=task,
            max_records_per_file=self.config.max_records_per_file,
            target_file_bytes=self.config.target_file_bytes,
        )

    def _coordinator(self) -> DeltaCoordinator:
        return DeltaCoordinator(
            settings=CommitSettings(
                table_uri=self.config.path,
                checkpoint_location=self.config.checkpoint_location,
                app_id=self.app_id,
                query_name=self.config.query_name,
                partition_by=self.config.partition_by,
                merge_schema=self.config.merge_schema,
                retained_snapshots=self.config.retained_snapshots,
                orphan_retention_s=self.config.orphan_retention_ms / 1000,
                storage_options=dict(self.config.storage_options),
                refuse_other_writers=self.config.other_writers == "refuse",
                dead_letter_uri=self.config.dead_letter_path,
                complete=self.complete,
            )
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m if isinstance(m, StagedOutput) else None for m in messages]
        self._coordinator().commit(
            messages=staged,
            batch_id=batchId,
            schema=self.arrow_schema,
            dead_letter_schema=self.dead_letter_schema,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m if isinstance(m, StagedOutput) else None for m in messages]
        self._coordinator().abort(messages=staged, batch_id=batchId)
