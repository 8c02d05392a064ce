"""Phase 1 of ``delivery=exactly-once-transactions`` (executors): produce inside a Kafka
transaction that the task leaves open (Flink's ``KafkaWriter`` with
``DeliveryGuarantee.EXACTLY_ONCE``).

Transactional ids, one per write partition and attempt slot, reused by every batch as
Flink's pool of ids is (:func:`transactional_id`)::

    chkpt-<appId>-<topic>-<partition>-<attempt % ATTEMPT_SLOTS>

More: docs/concepts/kafka-internals.md (spark_chkpt/kafka/sink/transactional.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from spark_chkpt.errors import ChkptError, ConfigError
from spark_chkpt.failpoints import (
    ENV,
    FAIL_ENV,
    STALL_ENV,
    FaultPoint,
    armed,
    failpoint,
)
from spark_chkpt.kafka.client.outage import delivery_timeout_s, flush_within
from spark_chkpt.kafka.client.transactions import TransactionClient, describe_pooled
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.kafka.sink.confluent_writer import ConfluentProducer
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.sink.rows import producing_failed
from spark_chkpt.kafka.sink.writer import KafkaPythonProducer

if TYPE_CHECKING:
    import pyarrow as pa

# Attempt slots per write partition: Spark's spark.task.maxFailures default. A later
# attempt reuses slot attempt % ATTEMPT_SLOTS, which fences the failed attempt there.
ATTEMPT_SLOTS = 4


def transactional_prefix(*, app_id: str, topic: str) -> str:
    """The ids' common part: the app id (query id or ``txnAppId``) and the topic."""
    return f"chkpt-{app_id}-{re.sub(r'[^A-Za-z0-9._-]', '_', topic)}"


def transactional_id(*, app_id: str, topic: str, partition: int, attempt: int) -> str:
    """The transactional id of write partition ``partition``'s attempt ``attempt``."""
    slot = attempt % ATTEMPT_SLOTS
    return f"{transactional_prefix(app_id=app_id, topic=topic)}-{partition}-{slot}"


def every_transactional_id(*, app_id: str, topic: str, partitions: int) -> list[str]:
    """Every id a batch of ``partitions`` write tasks can have used (the driver's
    ``abort`` fences them all)."""
    return [
        transactional_id(app_id=app_id, topic=topic, partition=p, attempt=a)
        for p in range(partitions)
        for a in range(ATTEMPT_SLOTS)
    ]


def fence_earlier_attempts(
    *, config: KafkaSinkConfig, app_id: str, task: int, attempt: int
) -> None:
    """A retry: the attempts before it failed; abort their open transactions now, so
    read_committed consumers need not wait for the broker's timeout."""
    topic = _topic_of(config)
    own = transactional_id(app_id=app_id, topic=topic, partition=task, attempt=attempt)
    earlier = {
        transactional_id(app_id=app_id, topic=topic, partition=task, attempt=a)
        for a in range(max(0, attempt - ATTEMPT_SLOTS + 1), attempt)
    } - {own}
    client = TransactionClient(
        bootstrap_servers=config.bootstrap_servers, settings=dict(config.producer_settings)
    )
    try:
        for txn_id in sorted(earlier):
            client.fence(
                transactional_id=txn_id, transaction_timeout_ms=config.transaction_timeout_ms
            )
    finally:
        client.close()


class ProducerArgs(TypedDict):
    """What a task's producer is built from, on either client (its ``__init__``'s)."""

    config: KafkaSinkConfig
    batch_id: int | None
    task: int
    extra: dict[str, Any]


class TaskAttempt:
    """What a transactional write task is on either client: its transactional id (the
    attempts before it fenced, when it is a retry) and fail point ``in-write``."""

    def __init__(
        self,
        *,
        config: KafkaSinkConfig,
        app_id: str,
        batch_id: int | None,
        task: int,
        attempt_number: int,
    ) -> None:
        self.config = config
        self.batch_id = batch_id
        self.task = task
        self.transactional_id = transactional_id(
            app_id=app_id, topic=_topic_of(config), partition=task, attempt=attempt_number
        )
        if attempt_number:
            fence_earlier_attempts(config=config, app_id=app_id, task=task, attempt=attempt_number)
        self._batch_id = batch_id
        self._first_attempt = task == 0 and attempt_number == 0
        self._sent = 0

    def producer_args(self, *, id_setting: str) -> ProducerArgs:
        """The arguments of this attempt's producer on a client whose setting of the
        transactional id is named ``id_setting``."""
        return ProducerArgs(
            config=self.config,
            batch_id=self.batch_id,
            task=self.task,
            extra={id_setting: self.transactional_id},
        )

    def sent(self, *, flush: Callable[[], object]) -> None:
        """One Arrow batch produced. Fail point ``in-write``, after the first: when armed,
        ``flush()`` (its records are then in the broker, in this attempt's open
        transaction) and the first attempt of task 0 fails (or the driver is killed, or
        every task stalls)."""
        self._sent += 1
        if self._sent == 1 and any(
            armed(FaultPoint.IN_WRITE, self._batch_id or 0, env=env)
            for env in (ENV, FAIL_ENV, STALL_ENV)
        ):
            flush()
            failpoint(FaultPoint.IN_WRITE, self._batch_id, can_fail=self._first_attempt)


class KafkaPythonTransactionalProducer(KafkaPythonProducer):
    """:class:`~spark_chkpt.kafka.sink.writer.RecordProducer` that produces one task
    attempt's records inside an open Kafka transaction, with kafka-python."""

    def __init__(self, *, attempt: TaskAttempt) -> None:
        self._attempt = attempt
        self.transactional_id = attempt.transactional_id
        super().__init__(**attempt.producer_args(id_setting="transactional_id"))
        self._producer.init_transactions()
        self._producer.begin_transaction()

    def send(self, batch: pa.RecordBatch) -> None:
        """Produce ``batch`` into the open transaction."""
        super().send(batch)
        self._attempt.sent(
            flush=lambda: flush_within(self._producer, settings=self.config.producer_settings)
        )

    def finish(self) -> ProducedOutput:
        """Flush; the transaction stays open (kafka-python's ``close`` does not abort
        it); the output names it for the driver."""
        ids = self._producer._transaction_manager.producer_id_and_epoch
        output = super().finish()
        output.transaction = (self.transactional_id, int(ids.producer_id), int(ids.epoch))
        return output


class ConfluentTransactionalProducer(ConfluentProducer):
    """:class:`~spark_chkpt.kafka.sink.writer.RecordProducer` that produces one task
    attempt's records inside an open Kafka transaction, with librdkafka."""

    def __init__(self, *, attempt: TaskAttempt) -> None:
        self._attempt = attempt
        self.transactional_id = attempt.transactional_id
        super().__init__(**attempt.producer_args(id_setting="transactional.id"))
        topic = _topic_of(attempt.config)
        seconds = delivery_timeout_s(attempt.config.producer_settings)
        try:
            # A broker connection up first: init_transactions called while librdkafka
            # has none finds "No brokers available for Transactions" and waits for its
            # 500 ms coordinator query timer (four write tasks in ten in the bench's
            # Kafka -> Kafka row; 55-70 ms otherwise). The first metadata answer may
            # come from the bootstrap connection, which librdkafka drops once it knows
            # the broker's own id; the second comes from the broker's own connection.
            for _ in range(2):
                self._producer.list_topics(topic, timeout=seconds)
            self._producer.init_transactions(seconds)
            self._producer.begin_transaction()
        except self._ck.KafkaException as e:
            self.close()
            raise self._transaction_failed("opening", e) from e

    def _transaction_failed(self, doing: str, error: Any) -> ChkptError:
        cause = error.args[0] if getattr(error, "args", None) else error
        return producing_failed(
            f"{doing} the transaction of transactional id {self.transactional_id!r}: {cause}"
        )

    def send(self, batch: pa.RecordBatch) -> None:
        """Produce ``batch`` into the open transaction."""
        super().send(batch)
        self._attempt.sent(flush=self._flush_and_count)

    def finish(self) -> ProducedOutput:
        """Flush; ask the coordinator for the transaction's producer id and epoch; let the
        producer go without ``close()`` (which would abort the transaction), so the
        transaction stays open for the driver. A task that produced nothing has no
        transaction on the broker (``beginTransaction`` is local): its producer is closed
        and its output names none."""
        self._flush_and_count()
        if not self.output.rows:
            self._close()
            return self.output
        state, producer_id, epoch = describe_pooled(  # its client kept for the next task
            bootstrap_servers=self.config.bootstrap_servers,
            settings=dict(self.config.producer_settings),
            transactional_id=self.transactional_id,
        )
        if state != "Ongoing":  # fenced by a later holder of the id, or timed out
            self.close()
            raise self._transaction_failed(
                "handing over", f"its coordinator says {state}, not Ongoing, after the flush"
            )
        self.output.transaction = (self.transactional_id, producer_id, epoch)
        self._release()
        return self.output

    def _release(self) -> None:
        """Destroy the producer, leaving its transaction open (librdkafka's destroy does
        not end it; ``close()`` would abort it)."""
        del self._producer


def transactional_producer(
    attempt: TaskAttempt,
) -> KafkaPythonTransactionalProducer | ConfluentTransactionalProducer:
    """The write task's transactional producer, for its ``attempt``, on the sink's client."""
    if attempt.config.client == "confluent":
        return ConfluentTransactionalProducer(attempt=attempt)
    return KafkaPythonTransactionalProducer(attempt=attempt)


def _topic_of(config: KafkaSinkConfig) -> str:
    if config.topic is None:
        raise ConfigError("topic", None, "delivery=exactly-once-transactions needs option 'topic'")
    return config.topic
