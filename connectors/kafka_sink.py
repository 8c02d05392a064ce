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

from pyspark.sql.datasource import WriterCommitMessage

from spark_chkpt.connectors.sink import SinkStreamWriter, WriteTask
from spark_chkpt.kafka.sink.assembler import KafkaSink
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.runtime.worker_heap import freeze_imports

if TYPE_CHECKING:
    import pyarrow as pa


class ProducedMessage(ProducedOutput, WriterCommitMessage):
    """A task's produced output, returned to the driver as Spark's commit message."""


class KafkaStreamWriter(SinkStreamWriter[KafkaSink]):
    """Phase 1 in ``write`` (executors), barriers in ``commit`` (driver)."""

    committable = ProducedOutput

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        freeze_imports()
        task = WriteTask.current()
        out = self.sink.produce(
            iterator, batch_id=task.batch_id, task=task.task, attempt_number=task.attempt_number
        )
        return ProducedMessage(
            attempt=out.attempt,
            batch_id=out.batch_id,
            task=out.task,
            counts=out.counts,
            transaction=out.transaction,
        )
