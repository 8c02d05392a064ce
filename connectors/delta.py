"""The ``chkpt-delta`` sink: exactly-once appends (or, in ``outputMode("complete")``,
replacements) of a Delta table through delta-rs.

Thin: the options become a :class:`~spark_chkpt.delta.sink.options.DeltaSinkConfig`;
executors stage with :class:`~spark_chkpt.delta.sink.writer.DeltaWriter` (phase 1), and
the driver's ``commit`` hands the staged files to its
:class:`~spark_chkpt.delta.sink.committer.DeltaCoordinator` (phase 2), which makes them
visible in one Delta commit together with ``txn(appId, batchId)`` and the snapshot record.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_chkpt.delta.sink.dead_letters import check_dead_letters
from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.delta.sink.writer import DeltaWriter
from spark_chkpt.delta.staging import StagedFile, StagedOutput
from spark_chkpt.report import reported
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint

if TYPE_CHECKING:
    import pyarrow as pa


class StagedMessage(StagedOutput, WriterCommitMessage):
    """A task's staged output, returned to the driver as Spark's commit message; with
    ``deadLetterPath``, also the files staged for the dead-letter table."""

    dead_letter_files: list[StagedFile]


class DeltaDataSource(DataSource):
    """``df.writeStream.format("chkpt-delta").option("path", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "chkpt-delta"

    @reported
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # outputMode("complete") reaches a Python sink as overwrite=True; Spark 4.2 refuses
        # outputMode("update") itself (use spark_chkpt.DeltaUpsert in foreachBatch).
        config = DeltaSinkConfig.from_options(self.options)
        config.check_columns(schema.fieldNames())
        check_dead_letters(schema, config, complete=overwrite)
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

        self.sink = DeltaWriter(
            config=config,
            schema=to_arrow_schema(schema, timezone="UTC"),
            app_id=app_id,
            complete=complete,
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_prop = context.getLocalProperty("streaming.sql.batchId") if context else None
        staged, letters = self.sink.write(
            iterator,
            batch_id=int(batch_prop) if batch_prop is not None else None,
            task=context.partitionId() if context else 0,
        )
        message = StagedMessage(
            attempt=staged.attempt, batch_id=staged.batch_id, task=staged.task, files=staged.files
        )
        message.dead_letter_files = letters
        return message

    @reported
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.sink.committer().commit(
            messages=[m if isinstance(m, StagedOutput) else None for m in messages],
            batch_id=batchId,
            schema=self.sink.arrow_schema,
            dead_letter_schema=self.sink.dead_letter_schema,
        )

    @reported
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m if isinstance(m, StagedOutput) else None for m in messages]
        self.sink.committer().abort(messages=staged, batch_id=batchId)
