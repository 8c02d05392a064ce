"""The ``chkpt-kafka`` sink: Spark's Kafka sink columns, exactly once for aligned readers.

Executors produce each row tagged with their attempt (a
:class:`~spark_chkpt.kafka.sink.writer.RecordProducer` of the ``kafka.client`` option); the
driver's ``commit`` writes barrier markers naming the attempts that belong to the batch
(:class:`~spark_chkpt.kafka.sink.committer.KafkaCoordinator`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_chkpt.kafka.client.outage import broker_calls
from spark_chkpt.kafka.sink.committer import BarrierSettings, KafkaCoordinator
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.sink.transactional import TransactionalProducer
from spark_chkpt.kafka.sink.writer import (
    ProducedOutput,
    RecordProducer,
    build_producer,
    produce_all,
)
from spark_chkpt.report import reported

if TYPE_CHECKING:
    import pyarrow as pa


class ProducedMessage(ProducedOutput, WriterCommitMessage):
    """A task's produced output, returned to the driver as Spark's commit message."""


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Phase 1 in ``write`` (executors), barriers in ``commit`` (driver)."""

    def __init__(self, *, config: KafkaSinkConfig, app_id: str) -> None:
        self.config = config
        self.app_id = app_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_prop = context.getLocalProperty("streaming.sql.batchId") if context else None
        batch_id = int(batch_prop) if batch_prop is not None else None
        task = context.partitionId() if context else 0
        with self._broker_calls(f"producing batch {batch_prop}'s records"):
            producer: RecordProducer
            if self.config.transactional:
                producer = TransactionalProducer(
                    config=self.config,
                    app_id=self.app_id,
                    batch_id=batch_id,
                    task=task,
                    attempt_number=context.attemptNumber() if context else 0,
                )
            else:
                producer = build_producer(config=self.config, batch_id=batch_id, task=task)
            out = produce_all(producer, iterator)
        return ProducedMessage(
            attempt=out.attempt,
            batch_id=out.batch_id,
            task=out.task,
            counts=out.counts,
            transaction=out.transaction,
        )

    def _broker_calls(self, doing: str) -> AbstractContextManager[None]:
        return broker_calls(
            servers=self.config.bootstrap_servers,
            settings=self.config.producer_settings,
            doing=doing,
        )

    def _coordinator(self) -> KafkaCoordinator:
        return KafkaCoordinator(
            settings=BarrierSettings.from_config(self.config, app_id=self.app_id)
        )

    def resume(self) -> list[int]:
        """Finish the batches a crashed driver recorded but did not commit (transactions)."""
        with self._broker_calls("committing the transactions of an unfinished batch"):
            return self._coordinator().resume()

    @reported
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        produced = [m if isinstance(m, ProducedOutput) else None for m in messages]
        with self._broker_calls(f"committing snapshot {batchId} (index entries, barriers)"):
            self._coordinator().commit(messages=produced, batch_id=batchId)

    @reported
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        produced = [m if isinstance(m, ProducedOutput) else None for m in messages]
        self._coordinator().abort(messages=produced, batch_id=batchId)
