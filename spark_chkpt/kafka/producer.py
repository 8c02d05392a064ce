"""Phase 1 of the Kafka sink (executors): produce a task's rows, tagged with its attempt.

Every record gets the header ``chkpt.attempt`` = this task attempt's tag; project headers
a job forwards from its input (``includeHeaders=true``) are dropped first. The producer
is idempotent with ``acks=all`` and is flushed before the task returns, so when the
driver's coordinator runs, every record of the batch is durably in Kafka, ahead of the
barrier it is about to write.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_chkpt.alignment.barrier import (
    ATTEMPT_HEADER,
    control_topic_for,
    without_project_headers,
)
from spark_chkpt.errors import ChkptError
from spark_chkpt.kafka.control_topic import ensure_control_topic
from spark_chkpt.kafka.outage import flush_within
from spark_chkpt.kafka.sink_options import KafkaSinkConfig

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class ProducedOutput:
    """What one task attempt wrote; Spark returns it to the driver's ``commit``."""

    attempt: str
    batch_id: int | None
    task: int
    counts: dict[str, dict[int, int]] = field(default_factory=dict)  # topic -> partition -> n

    @property
    def rows(self) -> int:
        return sum(n for parts in self.counts.values() for n in parts.values())


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    return batch.column(index).to_pylist() if index >= 0 else None


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


class RecordProducer:
    """Writes Arrow batches of Spark's Kafka-sink shape (key, value, topic, partition,
    headers) and counts acknowledged records per topic-partition."""

    def __init__(self, *, config: KafkaSinkConfig, batch_id: int | None, task: int) -> None:
        from kafka import KafkaProducer

        self.config = config
        self.output = ProducedOutput(attempt=uuid.uuid4().hex[:12], batch_id=batch_id, task=task)
        self._tag = (ATTEMPT_HEADER, self.output.attempt.encode("ascii"))
        self._producer = KafkaProducer(
            **config.producer_kwargs(client_id=f"spark-chkpt-sink-{self.output.attempt}")
        )
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._controlled: set[str] = set()

    def _acked(self, metadata: Any) -> None:
        with self._lock:
            parts = self.output.counts.setdefault(metadata.topic, {})
            parts[metadata.partition] = parts.get(metadata.partition, 0) + 1

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._error = self._error or error

    def send(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        values = _column(batch, "value")
        if values is None:
            raise ChkptError("chkpt-kafka sink: the query has no 'value' column")
        keys = _column(batch, "key") or [None] * n
        topics = [self.config.topic] * n if self.config.topic else _column(batch, "topic")
        if topics is None:
            raise ChkptError("chkpt-kafka sink: set option 'topic' or write a 'topic' column")
        partitions = _column(batch, "partition") or [None] * n
        headers = _column(batch, "headers") or [None] * n
        if not self.config.topic:
            # streamWriter() created the option's control topic; a topic column can name
            # new topics, whose control topic must exist before their first record does.
            for name in set(topics) - self._controlled:
                if name is not None:
                    ensure_control_topic(
                        bootstrap_servers=self.config.bootstrap_servers,
                        name=self.config.control_topic or control_topic_for(name),
                    )
                    self._controlled.add(name)
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ChkptError(
                    f"chkpt-kafka sink: row {i} of the batch has a null topic "
                    "and no 'topic' option is set"
                )
            record_headers = [(h["key"], _bytes(h["value"]) or b"") for h in headers[i] or ()]
            if record_headers:
                record_headers = without_project_headers(record_headers)
            record_headers.append(self._tag)
            future = self._producer.send(
                topic,
                value=_bytes(values[i]),
                key=_bytes(keys[i]),
                partition=partitions[i],
                headers=record_headers,
            )
            future.add_callback(self._acked)
            future.add_errback(self._failed)
        if self._error is not None:
            raise ChkptError(f"chkpt-kafka sink: producing failed: {self._error}") from self._error

    def finish(self) -> ProducedOutput:
        flush_within(self._producer, settings=self.config.producer_settings)
        self._producer.close()
        if self._error is not None:
            raise ChkptError(f"chkpt-kafka sink: producing failed: {self._error}") from self._error
        return self.output

    def close(self) -> None:
        self._producer.close(timeout=5)


def produce_all(producer: RecordProducer, batches: Iterator[pa.RecordBatch]) -> ProducedOutput:
    try:
        for batch in batches:
            producer.send(batch)
        return producer.finish()
    except BaseException:
        producer.close()
        raise
