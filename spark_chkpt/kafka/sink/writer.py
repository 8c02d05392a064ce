"""Phase 1 of the Kafka sink (executors): produce a task's rows, tagged with its attempt.

Every record gets the header ``chkpt.attempt`` = this task attempt's tag; project headers
a job forwards from its input (``includeHeaders=true``) are dropped first. The producer
is idempotent with ``acks=all`` and is flushed before the task returns, so when the
driver's coordinator runs, every record of the batch is durably in Kafka, ahead of the
barrier it is about to write.

Two clients implement :class:`RecordProducer`, chosen by the sink option ``kafka.client``
(:func:`build_producer`): kafka-python (:class:`KafkaPythonProducer`, the default) and
librdkafka (:class:`~spark_chkpt.kafka.sink.confluent_writer.ConfluentProducer`). What they
share (columns, header rule, control topics, the output) is in :mod:`sink_rows`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from itertools import repeat
from typing import TYPE_CHECKING, Any, Protocol

from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client.outage import flush_within
from spark_chkpt.kafka.sink.committable import AttemptProducer, ProducedOutput
from spark_chkpt.kafka.sink.confluent_writer import ConfluentProducer
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.sink.rows import (
    as_bytes,
    producing_failed,
    sink_rows,
    tagged_headers,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["KafkaPythonProducer", "ProducedOutput", "RecordProducer", "build_producer"]


class RecordProducer(Protocol):
    """Writes Arrow batches of Spark's Kafka-sink shape (key, value, topic, partition,
    headers) and counts acknowledged records per topic-partition."""

    output: ProducedOutput
    config: KafkaSinkConfig

    def send(self, batch: pa.RecordBatch) -> None: ...

    def finish(self) -> ProducedOutput:
        """Flush (bounded by the delivery timeout); the acknowledged counts."""

    def close(self) -> None:
        """Give up: drop what is not delivered (the attempt fails)."""


def build_producer(*, config: KafkaSinkConfig, batch_id: int | None, task: int) -> RecordProducer:
    """The producer of ``config.client`` for one task attempt."""
    if config.client == "confluent":
        return ConfluentProducer(config=config, batch_id=batch_id, task=task)
    return KafkaPythonProducer(config=config, batch_id=batch_id, task=task)


class KafkaPythonProducer(AttemptProducer):
    """:class:`RecordProducer` on kafka-python's ``KafkaProducer``."""

    def _start(self, *, batch_id: int | None, extra: dict[str, Any]) -> None:
        from spark_chkpt.kafka.client.factory import kafka_producer

        config = self.config
        self._producer = kafka_producer(
            bootstrap_servers=config.bootstrap_servers,
            settings=config.producer_kwargs(client_id=f"spark-chkpt-sink-{self.output.attempt}"),
            **extra,
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
        rows = sink_rows(batch, config=self.config, controlled=self._controlled)
        for value, key, topic, partition, headers in zip(
            rows.values,
            rows.keys,
            rows.topics,
            repeat(None) if rows.partitions is None else rows.partitions,
            repeat(None) if rows.headers is None else rows.headers,
            strict=False,
        ):
            future = self._producer.send(
                topic,
                value=as_bytes(value),
                key=as_bytes(key),
                partition=partition,
                headers=tagged_headers(headers, self._tag),
            )
            future.add_callback(self._acked)
            future.add_errback(self._failed)
        if self._error is not None:
            raise producing_failed(self._error) from self._error

    def finish(self) -> ProducedOutput:
        flush_within(self._producer, settings=self.config.producer_settings)
        self._producer.close()
        if self._error is not None:
            raise producing_failed(self._error) from self._error
        return self.output

    def close(self) -> None:
        self._producer.close(timeout=5)


def produce_all(producer: RecordProducer, batches: Iterator[pa.RecordBatch]) -> ProducedOutput:
    try:
        for batch in batches:
            producer.send(batch)
        return producer.finish()
    except BaseException as e:
        producer.close()
        missing = _missing_output_topic(producer.config, e)
        if missing is not None:
            raise missing from e
        raise


# What each client's failure says when its topic is not there: librdkafka's delivery
# error (after topic.metadata.propagation.max.ms, 30 s) or its delivery timeout when that
# is shorter, kafka-python's metadata wait (after kafka.max.block.ms); the timeouts also
# end that way when the broker is down, which the question to the broker tells apart.
_NO_TOPIC_SIGNS = (
    "UNKNOWN_TOPIC",
    "Unknown topic",
    "Failed to update metadata",
    "TIMED_OUT",
    "timed out",
    "not acknowledged within",
)


def _topic_present(config: KafkaSinkConfig, topic: str) -> bool | None:
    """Whether the cluster lists ``topic``; ``None`` when it does not answer within a
    few seconds (an outage: the caller keeps its own error, which says so)."""
    from spark_chkpt.kafka.client.factory import connection_settings, kafka_consumer

    try:
        consumer = kafka_consumer(
            bootstrap_servers=config.bootstrap_servers,
            settings=connection_settings(config.producer_settings),
            enable_auto_commit=False,
            request_timeout_ms=_ASK_TIMEOUT_MS,
            bootstrap_timeout_ms=_ASK_TIMEOUT_MS,
        )
    except Exception:
        return None
    try:
        return topic in consumer.topics()
    except Exception:
        return None
    finally:
        consumer.close()


_ASK_TIMEOUT_MS = 5_000


def _missing_output_topic(config: KafkaSinkConfig, error: BaseException) -> ConfigError | None:
    """The error naming the ``topic`` option when the write failed because that topic
    is gone: deleted under a running query on a broker that does not create topics.
    The driver checks the topic when a query starts and remembers it found it
    (:func:`~spark_chkpt.kafka.client.topics.require_output_topic`), so this is where
    a later deletion shows; without it the task failed as a timeout, or as an outage
    on kafka-python. Asked of the broker only when the failure looks like it, and any
    failure to ask keeps the original error."""
    topic = config.topic
    text = f"{type(error).__name__}: {error}"
    if topic is None or not any(sign in text for sign in _NO_TOPIC_SIGNS):
        return None
    if _topic_present(config, topic) is not False:
        return None
    return ConfigError(
        "topic",
        topic,
        f"topic {topic!r} does not exist on Kafka broker {config.bootstrap_servers} any "
        "more (deleted while the query ran?), and the write tasks' producers cannot "
        f"write to it ({text}). Nothing of this batch was committed. Create the topic "
        "again (kafka-topics.sh --create) and restart the query, or point the "
        "'topic' option at another one",
    )
