"""Phase 1 of ``delivery=exactly-once-transactions`` (executors): produce inside a Kafka
transaction that the task leaves open (Flink's ``KafkaWriter`` with
``DeliveryGuarantee.EXACTLY_ONCE``).

Transactional ids, one per write partition and attempt slot, reused by every batch as
Flink's pool of ids is (:func:`transactional_id`)::

    chkpt-<appId>-<topic>-<partition>-<attempt % ATTEMPT_SLOTS>

A task attempt ``initTransactions`` on its id (which aborts whatever an earlier holder
of the id left open: the failed attempt of the same slot, or nothing, because the driver
ended the previous batch's transaction before this batch's tasks ran), then, when it is a
retry, fences the ids of the attempts before it (they failed: Spark retries a task only
then), ``beginTransaction``, produces and flushes, and returns the transaction (id,
producer id, epoch) in its commit message without committing. The driver commits it
(:mod:`spark_chkpt.kafka.sink.committer`); a discarded attempt's transaction is aborted by
the fencing of the next holder of its id, by the driver's ``abort``, or at the latest by
the broker at ``transaction.timeout.ms``; until then a ``read_committed`` consumer waits
at its first record (the last stable offset).

Records still carry the ``chkpt.attempt`` header, so barrier readers of the same topic
keep working when ``barriers`` is on.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client.outage import flush_within
from spark_chkpt.kafka.client.transactions import TransactionClient
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.sink.writer import KafkaPythonProducer
from spark_chkpt.testing.failpoints import (
    ENV,
    FAIL_ENV,
    STALL_ENV,
    FaultPoint,
    armed,
    failpoint,
)

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


class TransactionalProducer(KafkaPythonProducer):
    """:class:`~spark_chkpt.kafka.sink.writer.RecordProducer` that produces one task
    attempt's records inside an open Kafka transaction."""

    def __init__(
        self,
        *,
        config: KafkaSinkConfig,
        app_id: str,
        batch_id: int | None,
        task: int,
        attempt_number: int,
    ) -> None:
        topic = _topic_of(config)
        self.transactional_id = transactional_id(
            app_id=app_id, topic=topic, partition=task, attempt=attempt_number
        )
        if attempt_number:
            self._fence_earlier(config=config, app_id=app_id, task=task, attempt=attempt_number)
        super().__init__(
            config=config,
            batch_id=batch_id,
            task=task,
            extra={"transactional_id": self.transactional_id},
        )
        self._producer.init_transactions()
        self._producer.begin_transaction()
        self._batch_id = batch_id
        self._sent = 0
        self._first_attempt = task == 0 and attempt_number == 0

    def send(self, batch: pa.RecordBatch) -> None:
        """Produce ``batch`` into the open transaction. Fail point ``in-write``: after the
        first Arrow batch is flushed (its records are in the broker, in this attempt's
        open transaction), the first attempt of task 0 fails (or the driver is killed, or
        every task stalls)."""
        super().send(batch)
        self._sent += 1
        if self._sent == 1 and any(
            armed(FaultPoint.IN_WRITE, self._batch_id or 0, env=env)
            for env in (ENV, FAIL_ENV, STALL_ENV)
        ):
            flush_within(self._producer, settings=self.config.producer_settings)
            failpoint(FaultPoint.IN_WRITE, self._batch_id, can_fail=self._first_attempt)

    @staticmethod
    def _fence_earlier(*, config: KafkaSinkConfig, app_id: str, task: int, attempt: int) -> None:
        """A retry: the attempts before it failed; abort their open transactions now,
        so read_committed consumers need not wait for the broker's timeout."""
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

    def finish(self) -> ProducedOutput:
        """Flush; the transaction stays open (kafka-python's ``close`` does not abort
        it); the output names it for the driver."""
        ids = self._producer._transaction_manager.producer_id_and_epoch
        output = super().finish()
        output.transaction = (self.transactional_id, int(ids.producer_id), int(ids.epoch))
        return output


def _topic_of(config: KafkaSinkConfig) -> str:
    if config.topic is None:
        raise ConfigError("topic", None, "delivery=exactly-once-transactions needs option 'topic'")
    return config.topic
