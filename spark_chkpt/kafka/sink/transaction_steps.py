"""Phase 2 of ``delivery=exactly-once-transactions`` (driver): the transaction steps of
:class:`~spark_chkpt.kafka.sink.committer.KafkaCoordinator`'s commit (Flink's
``KafkaCommitter``).

- the transactions an ``intent`` entry records (:func:`recorded_transactions`): each
  write task's open transaction (id, producer id, epoch), for the topic it wrote rows to;
- after the intent, ``EndTxn(commit)`` of each (:meth:`TransactionSteps.commit`): a
  transaction committed before answers done; all of them fenced marks the intent void
  (:meth:`TransactionSteps.void`), some of them lost fails the batch loudly;
- a replay's own transactions, which no intent records, aborted
  (:meth:`TransactionSteps.abort_unrecorded`);
- a failed batch: before the intent, every transactional id it could have used fenced;
  after it, its transactions left open for the restart (:meth:`TransactionSteps.abort`);
- before a batch's tasks run, every batch whose intent has no ``complete`` entry
  committed again (:meth:`TransactionSteps.resume`).

The coordinator calls these in its hooks; the control topic, its index and the barrier
producer stay the coordinator's (handed in as callables).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.errors import ChkptError, TransactionLostError, TransactionsAbortedError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.kafka.client.transactions import EndResult, TransactionClient
from spark_chkpt.kafka.control.topic import ControlTopic, write_entry
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.kafka.sink.transactional import every_transactional_id

log = logging.getLogger(__name__)


class StepSettings(Protocol):
    """What the steps read of the sink's ``KafkaSinkConfig``."""

    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def topic(self) -> str | None: ...
    @property
    def producer_settings(self) -> Mapping[str, Any]: ...
    @property
    def transaction_timeout_ms(self) -> int: ...
    @property
    def max_restart_time_ms(self) -> int: ...


class StepBatch(Protocol):
    """What the steps use of the coordinator's ``KafkaBatch``."""

    batch_id: int
    outputs: Sequence[ProducedOutput]
    producer: Any
    transactions: Any  # this commit's TransactionClient, opened by the steps


def recorded_transactions(
    outputs: Sequence[ProducedOutput], topic: str
) -> tuple[tuple[str, int, int], ...]:
    """The transactions a new ``intent`` entry of ``topic`` records: those of the
    attempts that wrote rows to it."""
    return tuple(
        sorted(
            m.transaction
            for m in outputs
            if m.transaction is not None and topic in m.counts and m.rows
        )
    )


def open_intent(index: ControlTopic, *, app_id: str, batch_id: int) -> IndexEntry | None:
    """The newest live ``intent`` entry of (``app_id``, ``batch_id``), unless it is void
    (an intent of a timeline a savepoint rewind revoked is not live)."""
    intents = [
        e
        for e in index.live()
        if e.app_id == app_id and e.snapshot_id == batch_id and e.kind == "intent"
    ]
    if not intents or intents[-1].void:
        return None
    return intents[-1]


class TransactionSteps:
    """The transaction steps of one Kafka sink coordinator."""

    def __init__(
        self,
        *,
        config: StepSettings,
        app_id: str,
        index: Callable[[str], ControlTopic],
        producer: Callable[[], Any],
    ) -> None:
        self.config = config
        self.app_id = app_id
        self._index = index
        self._producer = producer

    def client(self, batch: StepBatch) -> TransactionClient:
        """The batch's :class:`TransactionClient` (closed by the coordinator's
        ``release``)."""
        if batch.transactions is None:
            batch.transactions = TransactionClient(
                bootstrap_servers=self.config.bootstrap_servers,
                settings=self.config.producer_settings,
            )
        return batch.transactions

    def commit(self, batch: StepBatch, intent: IndexEntry) -> None:
        """Step 4, after the intent: ``EndTxn(commit)`` of every transaction it records,
        with the producer id and epoch the task returned (a transaction committed before,
        by a commit that crashed, answers done). One the broker aborted (its
        ``transaction.timeout.ms`` ran out) or fenced is lost: the batch fails with
        :class:`TransactionLostError`."""
        client = self.client(batch)
        lost: list[str] = []
        committed = 0
        results = []
        for n, (txn_id, producer_id, epoch) in enumerate(intent.transactions):
            if n == 1:
                failpoint(FaultPoint.BETWEEN_TRANSACTIONS, batch.batch_id)
            result = client.end(
                transactional_id=txn_id, producer_id=producer_id, epoch=epoch, commit=True
            )
            results.append(result)
            if result is EndResult.DONE:
                committed += 1
            else:
                lost.append(f"{txn_id} (producer id {producer_id}, epoch {epoch}: {result.value})")
        if lost and all(r is EndResult.FENCED for r in results):
            self.void(batch, intent)
        if lost:
            raise TransactionLostError(
                f"chkpt-kafka batch {batch.batch_id} of appId {self.app_id}: the broker no "
                f"longer holds {len(lost)} of the {len(intent.transactions)} Kafka "
                f"transactions its intent entry (control topic offset {intent.offset}) "
                f"records for topic {intent.topic}: {'; '.join(lost)}. "
                f"{committed} were committed. The broker aborts a transaction that stays open "
                f"longer than transaction.timeout.ms "
                f"({self.config.transaction_timeout_ms} ms here): the batch and the driver's "
                f"restart took longer (maxRestartTime is "
                f"{self.config.max_restart_time_ms} ms), or another producer used these "
                "transactional ids. The batch's records in these transactions are lost to "
                "read_committed consumers; see docs/known-limits.md for the way back"
            )
        failpoint(FaultPoint.AFTER_TRANSACTIONS, batch.batch_id)

    def void(self, batch: StepBatch, intent: IndexEntry) -> None:
        """Every recorded transaction is fenced and none was committed: nothing of the
        batch is visible. Fenced means the epoch moved on, by the broker's timeout abort
        or an ``initTransactions`` on the id; the ids' next holders are the next tasks,
        which run only after this commit (or :meth:`resume`), so none of these
        transactions was committed before. A void intent lets the batch's next commit
        record transactions of its own, which the re-run of the batch produces."""
        index = self._index(intent.topic)
        batch.producer = batch.producer or self._producer()
        write_entry(
            batch.producer,
            control_topic=index.control_topic,
            entry=replace(intent, void=True, offset=None),
            settings=self.config.producer_settings,
        )
        raise TransactionsAbortedError(
            f"chkpt-kafka batch {batch.batch_id} of appId {self.app_id}: the broker aborted "
            f"all {len(intent.transactions)} Kafka transactions its intent entry (control "
            f"topic offset {intent.offset}) records for topic {intent.topic} "
            f"(transaction.timeout.ms is {self.config.transaction_timeout_ms} ms), before "
            "any was committed: nothing of the batch is visible. The intent is marked void; "
            "the batch runs again and commits transactions of its own"
        )

    def abort_unrecorded(self, batch: StepBatch, *, keep: Sequence[Any]) -> None:
        """``EndTxn(abort)`` of this commit's task transactions not in ``keep`` (the ones
        an earlier intent of the batch records): a replay's output when the batch is
        already committed. Fenced (a later holder of the id aborted it) counts as done."""
        kept = {tuple(t) for t in keep}
        client = self.client(batch)
        for output in batch.outputs:
            txn = output.transaction
            if txn is None or tuple(txn) in kept:
                continue
            result = client.end(
                transactional_id=txn[0], producer_id=txn[1], epoch=txn[2], commit=False
            )
            if result is EndResult.INVALID_STATE:
                log.error(
                    "chkpt-kafka batch %d: transaction %s (producer id %d, epoch %d) of "
                    "attempt %s, which no intent records, was committed",
                    batch.batch_id,
                    *txn,
                    output.attempt,
                )

    def resume(self, *, commit: Callable[[int], object]) -> list[int]:
        """Before a batch's tasks run (the sink's ``streamWriter``, on the driver): finish
        every batch of this app id whose ``intent`` has no ``complete`` entry, committing
        (``commit(batch_id)``, the coordinator's commit with no messages) the transactions
        the intent records. It must come before the tasks: they reuse the transactional
        ids, and their ``initTransactions`` would abort a recorded transaction not yet
        committed. Returns the batches finished."""
        topic = self.config.topic
        if topic is None:
            return []
        index = self._index(topic)
        app = self.app_id
        unfinished = sorted(
            {
                e.snapshot_id
                for e in index.live()
                if e.app_id == app
                and e.kind == "intent"
                and open_intent(index, app_id=app, batch_id=e.snapshot_id) is not None
                and index.first(app_id=app, snapshot_id=e.snapshot_id, kind="complete") is None
            }
        )
        for batch_id in unfinished:
            log.warning(
                "chkpt-kafka batch %d: its intent has no complete entry; committing the "
                "transactions it records before the tasks run",
                batch_id,
            )
            try:
                commit(batch_id)
            except TransactionsAbortedError as e:
                log.warning("%s", e)
        return unfinished

    def abort(self, *, messages: Sequence[ProducedOutput | None], batch_id: int) -> None:
        """A failed batch (the coordinator's ``abort``): with no intent, fence every
        transactional id the batch's tasks could have used (those whose message never
        came back too); after its intent, leave the recorded transactions open for the
        restart to commit."""
        if self.config.topic is None:
            return
        index = self._index(self.config.topic)
        if open_intent(index, app_id=self.app_id, batch_id=batch_id) is None:
            self.fence_all(messages=messages, batch_id=batch_id)
        else:  # the commit failed after the intent: the restart commits what it records
            log.warning(
                "chkpt-kafka batch %d aborted after its intent entry: its recorded "
                "transactions stay open for the restart to commit",
                batch_id,
            )

    def fence_all(self, *, messages: Sequence[ProducedOutput | None], batch_id: int) -> None:
        """``InitProducerId`` on every transactional id a batch of ``len(messages)``
        write tasks could have used."""
        topic = self.config.topic or ""
        client = TransactionClient(
            bootstrap_servers=self.config.bootstrap_servers,
            settings=self.config.producer_settings,
        )
        try:
            ids = every_transactional_id(
                app_id=self.app_id, topic=topic, partitions=max(1, len(messages))
            )
            for txn_id in ids:
                client.fence(
                    transactional_id=txn_id,
                    transaction_timeout_ms=self.config.transaction_timeout_ms,
                )
            log.warning(
                "chkpt-kafka batch %d aborted: fenced %d transactional ids", batch_id, len(ids)
            )
        except ChkptError as e:  # the broker's timeout aborts them anyway
            log.warning("chkpt-kafka batch %d: fencing its transactions failed: %s", batch_id, e)
        finally:
            client.close()
