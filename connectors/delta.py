"""The ``chkpt-delta`` sink: exactly-once appends (or, in ``outputMode("complete")``,
replacements) of a Delta table through delta-rs.

Thin: the sink is assembled from the options by
:class:`~spark_chkpt.delta.sink.assembler.DeltaSink`, which gives executors their
:class:`~spark_chkpt.delta.sink.writer.DeltaWriter` (phase 1) and the driver's ``commit``
its :class:`~spark_chkpt.delta.sink.committer.DeltaCoordinator` (phase 2), which makes
the staged files visible in one Delta commit together with ``txn(appId, batchId)`` and
the snapshot record.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_chkpt.connectors.sink import SinkStreamWriter, WriteTask
from spark_chkpt.delta.features.column_mapping import ColumnMapping
from spark_chkpt.delta.sink.assembler import DeltaSink
from spark_chkpt.delta.staging import StagedFile, StagedOutput
from spark_chkpt.runtime.report import reported
from spark_chkpt.runtime.worker_heap import freeze_imports

if TYPE_CHECKING:
    import pyarrow as pa


class StagedMessage(StagedOutput, WriterCommitMessage):
    """A task's staged output, returned to the driver as Spark's commit message; with
    ``deadLetterPath``, also the files staged for the dead-letter table."""

    dead_letter_files: list[StagedFile]
    dead_letter_mapping: ColumnMapping | None


class DeltaDataSource(DataSource):
    """``df.writeStream.format("chkpt-delta").option("path", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "chkpt-delta"

    @reported
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        freeze_imports()  # Spark asks in a reused daemon worker, once per batch
        # outputMode("complete") reaches a Python sink as overwrite=True; Spark 4.2 refuses
        # outputMode("update") itself (use spark_chkpt.DeltaUpsert in foreachBatch).
        return DeltaStreamWriter(
            sink=DeltaSink.assemble(options=self.options, schema=schema, complete=overwrite)
        )


class DeltaStreamWriter(SinkStreamWriter[DeltaSink]):
    """Phase 1 in ``write`` (executors), phase 2 in ``commit`` / ``abort`` (driver)."""

    committable = StagedOutput

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        freeze_imports()
        task = WriteTask.current()
        staged, letters = self.sink.writer().write(iterator, batch_id=task.batch_id, task=task.task)
        message = StagedMessage(
            attempt=staged.attempt,
            batch_id=staged.batch_id,
            task=staged.task,
            files=staged.files,
            mapping=staged.mapping,
            identity=staged.identity,
        )
        message.dead_letter_files = letters
        message.dead_letter_mapping = self.sink.dead_letter_mapping
        return message
