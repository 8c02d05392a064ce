"""The ``chkpt-kafka`` sink assembled from its options: its writer and its committer.

Modelled on Flink's ``KafkaSink``, which builds its ``KafkaWriter`` (``createWriter``)
and its ``KafkaCommitter`` (``createCommitter``) from one configuration:
:class:`KafkaSink` is made once on the driver (:meth:`KafkaSink.assemble`: the options
parsed and checked against the query's columns and the session, the topic and its
control topic made sure of, the app id read from the checkpoint, a crashed driver's
transactions committed) and travels to the tasks with Spark's writer. It hands each
write task its producer (phase 1, executors: :mod:`spark_chkpt.kafka.sink.writer`,
:mod:`spark_chkpt.kafka.sink.transactional`) and the driver's ``commit`` and ``abort``
a :class:`~spark_chkpt.kafka.sink.committer.KafkaCoordinator` (phase 2). This is the one
module that knows both sides: the producers' modules import no committer
(``tests/project/test_architecture.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client.outage import broker_calls
from spark_chkpt.kafka.client.topics import require_output_topic
from spark_chkpt.kafka.control.topic import ensure_control_topic
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.kafka.sink.committer import KafkaCoordinator
from spark_chkpt.kafka.sink.options import KafkaSinkConfig, check_sink_schema
from spark_chkpt.kafka.sink.transactional import TaskAttempt, transactional_producer
from spark_chkpt.kafka.sink.writer import RecordProducer, build_producer, produce_all
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class KafkaSink:
    """One query's ``chkpt-kafka`` sink: its options and the protocol's settings they
    produced."""

    config: KafkaSinkConfig
    snapshot: SnapshotSettings

    @classmethod
    def assemble(
        cls,
        *,
        options: Mapping[str, str],
        schema: StructType,
        overwrite: bool = False,
        speculation: bool = False,
    ) -> KafkaSink:
        """The sink of Spark's ``options`` for a query whose output is ``schema``, on the
        driver (``overwrite``: outputMode("complete"), refused; ``speculation``: the
        session's ``spark.speculation``)."""
        if overwrite:
            raise ConfigError(
                "outputMode", "complete", "the chkpt-kafka sink supports outputMode('append') only"
            )
        config = KafkaSinkConfig.from_options(options)
        check_sink_schema(schema, config)
        if config.transactional and speculation:
            raise ConfigError(
                "spark.speculation",
                "true",
                "the chkpt-kafka sink's delivery=exactly-once-transactions needs "
                "spark.speculation=false (Spark's default): a speculative copy of a write "
                "task fences the transaction of the attempt before it, which can be the one "
                "the driver commits (TransactionLostError). Start the session without "
                "spark.speculation, or use delivery=barriers",
            )
        if config.topic:
            require_output_topic(
                bootstrap_servers=config.bootstrap_servers,
                name=config.topic,
                settings=config.producer_settings,
            )
            # Before any task produces: a reader that found no control topic would read
            # the first snapshot's records, confirmed or not, as a plain topic's.
            ensure_control_topic(
                bootstrap_servers=config.bootstrap_servers,
                name=config.control_topic or control_topic_for(config.topic),
                settings=config.producer_settings,
                replication_factor=config.control_replication_factor,
                min_insync_replicas=config.control_min_insync_replicas,
            )
        sink = cls(config=config, snapshot=config.snapshot_settings())
        if config.transactional:
            # Before this batch's tasks reuse the transactional ids: commit what a
            # crashed driver recorded but did not commit.
            sink.resume()
        return sink

    def broker_calls(self, doing: str, *, operation: str = "WRITE") -> AbstractContextManager[None]:
        """Kafka calls of this sink; a broker that does not answer is one error, a
        refused ACL another (``operation``: what the calls need on the topic)."""
        return broker_calls(
            servers=self.config.bootstrap_servers,
            settings=self.config.producer_settings,
            doing=doing,
            operation=operation,
            resource=self.config.topic or None,
        )

    def writer(self, *, batch_id: int | None, task: int, attempt_number: int) -> RecordProducer:
        """Phase 1: one write task's producer (executors): transactional with
        ``delivery=exactly-once-transactions``, else the ``kafka.client`` one."""
        if self.config.transactional:
            return transactional_producer(
                TaskAttempt(
                    config=self.config,
                    app_id=self.snapshot.app_id,
                    batch_id=batch_id,
                    task=task,
                    attempt_number=attempt_number,
                )
            )
        return build_producer(config=self.config, batch_id=batch_id, task=task)

    def produce(
        self,
        batches: Iterator[pa.RecordBatch],
        *,
        batch_id: int | None,
        task: int,
        attempt_number: int,
    ) -> ProducedOutput:
        """Phase 1: one write task's rows produced, tagged with its attempt (executors)."""
        with self.broker_calls(f"producing batch {batch_id}'s records"):
            producer = self.writer(batch_id=batch_id, task=task, attempt_number=attempt_number)
            return produce_all(producer, batches)

    def committer(self) -> KafkaCoordinator:
        """Phase 2: the coordinator of the driver's ``commit``, ``abort`` and ``resume``."""
        return KafkaCoordinator(config=self.config, snapshot=self.snapshot)

    def resume(self) -> list[int]:
        """Finish the batches a crashed driver recorded but did not commit (transactions)."""
        with self.broker_calls("committing the transactions of an unfinished batch"):
            return self.committer().resume()

    def commit(self, *, messages: Sequence[ProducedOutput | None], batch_id: int) -> SnapshotRecord:
        """Complete snapshot ``batch_id``: index entries and barriers (driver)."""
        with self.broker_calls(f"committing snapshot {batch_id} (index entries, barriers)"):
            return self.committer().commit(messages=messages, batch_id=batch_id)

    def abort(self, *, messages: Sequence[ProducedOutput | None], batch_id: int) -> None:
        """A failed batch: its records stay unconfirmed (driver)."""
        self.committer().abort(messages=messages, batch_id=batch_id)
