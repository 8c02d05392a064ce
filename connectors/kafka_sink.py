"""The ``chkpt-kafka`` sink: Spark's Kafka sink columns, exactly once for aligned readers.

Thin: the sink is assembled from the options by
:class:`~spark_chkpt.kafka.sink.assembler.KafkaSink`; executors produce each row tagged
with their attempt (phase 1), and the driver's ``commit`` writes barrier markers naming
the attempts that belong to the batch
(:class:`~spark_chkpt.kafka.sink.committer.KafkaCoordinator`, phase 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_chkpt.kafka.sink.assembler import KafkaSink
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.report import reported

if TYPE_CHECKING:
    import pyarrow as pa


class ProducedMessage(ProducedOutput, WriterCommitMessage):
    """A task's produced output, returned to the driver as Spark's commit message."""


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Phase 1 in ``write`` (executors), barriers in ``commit`` (driver)."""

    def __init__(self, *, sink: KafkaSink) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_prop = context.getLocalProperty("streaming.sql.batchId") if context else None
        out = self.sink.produce(
            iterator,
            batch_id=int(batch_prop) if batch_prop is not None else None,
            task=context.partitionId() if context else 0,
            attempt_number=context.attemptNumber() if context else 0,
        )
        return ProducedMessage(
            attempt=out.attempt,
            batch_id=out.batch_id,
            task=out.task,
            counts=out.counts,
            transaction=out.transaction,
        )

    @reported
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.sink.commit(messages=_produced(messages), batch_id=batchId)

    @reported
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.sink.abort(messages=_produced(messages), batch_id=batchId)


def _produced(messages: list[WriterCommitMessage | None]) -> list[ProducedOutput | None]:
    return [m if isinstance(m, ProducedOutput) else None for m in messages]
