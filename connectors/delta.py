"""The ``chkpt-delta`` sink: exactly-once appends to a Delta table through delta-rs.

Executors stage Parquet files (:class:`~spark_chkpt.delta.staging.ParquetStager`); the
driver's ``commit`` hands them to
:class:`~spark_chkpt.snapshot.delta_coordinator.DeltaCoordinator`, which makes them
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

from spark_chkpt.delta.sink_options import DeltaSinkConfig
from spark_chkpt.delta.staging import ParquetStager, StagedOutput
from spark_chkpt.errors import ConfigError
from spark_chkpt.fs import resolve
from spark_chkpt.local.fault import FaultPoint, maybe_fail
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.snapshot.delta_coordinator import CommitSettings, DeltaCoordinator

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


class StagedMessage(StagedOutput, WriterCommitMessage):
    """A task's staged output, returned to the driver as Spark's commit message."""


class DeltaDataSource(DataSource):
    """``df.writeStream.format("chkpt-delta").option("path", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "chkpt-delta"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if overwrite:
            raise ConfigError(
                "outputMode", "complete", "chkpt-delta supports outputMode('append') only for now"
            )
        config = DeltaSinkConfig.from_options(self.options)
        config.check_columns(schema.fieldNames())
        app_id = (
            config.txn_app_id or SparkCheckpoint(location=config.checkpoint_location).query_id()
        )
        return DeltaStreamWriter(config=config, schema=schema, app_id=app_id)


class DeltaStreamWriter(DataSourceStreamArrowWriter):
    """Phase 1 in ``write`` (executors), phase 2 in ``commit`` / ``abort`` (driver)."""

    def __init__(self, *, config: DeltaSinkConfig, schema: StructType, app_id: str) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.config = config
        self.app_id = app_id
        self.arrow_schema: pa.Schema = to_arrow_schema(schema, timezone="UTC")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_prop = context.getLocalProperty("streaming.sql.batchId") if context else None
        stager = ParquetStager(
            table=resolve(self.config.path),
            schema=self.arrow_schema,
            partition_by=self.config.partition_by,
            app_id=self.app_id,
            batch_id=int(batch_prop) if batch_prop is not None else None,
            task=context.partitionId() if context else 0,
            max_records_per_file=self.config.max_records_per_file,
            target_file_bytes=self.config.target_file_bytes,
        )
        try:
            for batch in iterator:
                stager.add(batch)
                if stager.output.task == 0:  # tests: one task of the batch fails
                    maybe_fail(FaultPoint.IN_WRITE, stager.output.batch_id)
            staged = stager.finish()
        except BaseException:
            stager.discard()
            raise
        message = StagedMessage(
            attempt=staged.attempt, batch_id=staged.batch_id, task=staged.task, files=staged.files
        )
        return message

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
            )
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m if isinstance(m, StagedOutput) else None for m in messages]
        self._coordinator().commit(messages=staged, batch_id=batchId, schema=self.arrow_schema)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m if isinstance(m, StagedOutput) else None for m in messages]
        self._coordinator().abort(messages=staged, batch_id=batchId)
