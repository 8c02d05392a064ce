"""The sink's write tasks on librdkafka (``kafka.client=confluent``, the sink's default):
confluent-kafka's ``Producer``, which produces many times kafka-python's rate
(README, Performance).

The records are the ones kafka-python's producer writes (same columns, header rule,
attempt tag, murmur2 key partitioning) with the same settings translated
(:func:`~spark_chkpt.kafka.client.settings.librdkafka_producer_settings`: idempotent,
``acks=all``). The loop is kept tight: one ``produce`` call per record, no per-record
allocation when a record has no headers of its own, every argument positional (no
keyword parsing per call), ``poll(0)`` once per Arrow batch to
serve the delivery reports, and a full queue (``BufferError``) waited out by polling, at
most ``kafka.max.block.ms``. Acknowledged records are counted in the delivery callback,
successes only; the first delivery error fails the task naming it.

A broker that never answers cannot hang a task: librdkafka fails each record after
``message.timeout.ms`` (``kafka.delivery.timeout.ms``), and :meth:`finish` flushes for
at most that plus one request timeout, as kafka-python's ``flush_within`` does; both end
as :class:`~spark_chkpt.errors.BrokerUnavailableError` naming the option. A refused login,
a missing ACL, a protocol the listener does not speak: at once the kafka-python path's
named errors (:mod:`~spark_chkpt.kafka.client.access`, ``listener``), not an outage.
"""

from __future__ import annotations

import logging
import threading
import time
from itertools import repeat
from typing import TYPE_CHECKING, Any

from spark_chkpt.errors import BrokerUnavailableError, ChkptError
from spark_chkpt.kafka.client.access import Asked, access_error
from spark_chkpt.kafka.client.factory import confluent_producer
from spark_chkpt.kafka.client.listener import protocol_mismatch
from spark_chkpt.kafka.client.outage import delivery_timeout_s, outage_error
from spark_chkpt.kafka.sink.committable import AttemptProducer, ProducedOutput
from spark_chkpt.kafka.sink.rows import (
    producing_failed,
    sink_rows,
    tagged_headers,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

_UNASSIGNED = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose
# produce()'s positional arguments: topic, value, key, partition,
# callback and on_delivery (None: the producer's), timestamp (0: now), headers.
Headers = list[tuple[str, str | bytes | None]]  # what produce() takes


class ConfluentProducer(AttemptProducer):
    """:class:`~spark_chkpt.kafka.sink.writer.RecordProducer` on confluent-kafka's ``Producer``."""

    def _start(self, *, batch_id: int | None, extra: dict[str, Any]) -> None:
        config = self.config
        try:
            import confluent_kafka
        except ImportError as e:  # the driver checked; a worker may still lack it
            raise ChkptError(
                "kafka.client=confluent needs the confluent-kafka package on the workers, "
                "a dependency of spark-chkpt: pip install 'confluent-kafka>=2.4,<3'"
            ) from e
        self._ck = confluent_kafka
        self._tag_only: Headers = [self._tag]  # reused: produce() copies headers
        self._doing = f"producing batch {batch_id}'s records"
        self._counts: dict[tuple[str, int], int] = {}  # (topic, partition) -> acknowledged
        self._per_partition: dict[int, int] = {}  # the same, with a 'topic' option
        self._error: tuple[Any, str] | None = None  # (KafkaError, "topic-partition")
        self._mismatch: ChkptError | None = None  # a protocol the listener does not speak
        self._probe: threading.Thread | None = None
        self._controlled: set[str] = set()
        self._producer = confluent_producer(
            {
                **config.librdkafka_config(client_id=f"spark-chkpt-sink-{self.output.attempt}"),
                "on_delivery": self._delivery_callback(),
                "error_cb": self._on_error,
                "logger": log,
                **extra,
            }
        )

    def _delivery_callback(self) -> Any:
        """The ``on_delivery`` callback: it runs once per record, so it is a closure over
        its counts, keyed by partition alone when every record goes to the option's topic."""
        counts = self._counts
        per_partition = self._per_partition

        def failed(error: Any, message: Any) -> None:
            if self._error is None:
                self._error = (error, f"{message.topic()}-{message.partition()}")

        if self.config.topic:

            def delivered_to_topic(error: Any, message: Any) -> None:
                if error is None:
                    partition = message.partition()
                    per_partition[partition] = per_partition.get(partition, 0) + 1
                else:
                    failed(error, message)

            return delivered_to_topic

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                key = (message.topic(), message.partition())
                counts[key] = counts.get(key, 0) + 1
            else:
                failed(error, message)

        return delivered

    def _on_error(self, error: Any) -> None:
        log.warning("confluent-kafka: %s", error)
        refused = error.code() in (self._ck.KafkaError._AUTHENTICATION, self._ck.KafkaError._SSL)
        # fatal: e.g. the idempotent producer's state; refused: a login or certificate
        # the broker refuses, which no wait makes right.
        if (error.fatal() or refused) and self._error is None:
            self._error = (error, "the producer")
        codes = self._ck.KafkaError
        if error.code() in (codes._TRANSPORT, codes._ALL_BROKERS_DOWN) and not self._probe:
            # No broker reachable: the listeners are probed (once per broker and
            # process) in a thread of their own, so that a frozen broker's probe does not
            # hold up the outage error; a mismatch found ends the task at the next check.
            self._probe = threading.Thread(target=self._probe_listeners, daemon=True)
            self._probe.start()

    def _probe_listeners(self) -> None:
        self._mismatch = protocol_mismatch(
            servers=self.config.bootstrap_servers, settings=self.config.producer_settings
        )

    def send(self, batch: pa.RecordBatch) -> None:
        rows = sink_rows(batch, config=self.config, controlled=self._controlled)
        produce = self._producer.produce
        try:
            if rows.partitions is None and rows.headers is None:
                tag_only = self._tag_only
                for topic, value, key in zip(rows.topics, rows.values, rows.keys, strict=False):
                    try:  # positional: no keyword parsing per record
                        produce(topic, value, key, _UNASSIGNED, None, None, 0, tag_only)
                    except BufferError:
                        self._produce_when_room(topic, value, key, _UNASSIGNED, tag_only)
            else:
                self._send_with_columns(
                    rows.topics,
                    rows.values,
                    rows.keys,
                    rows.partitions,
                    rows.headers,
                )
        except self._ck.KafkaException as e:
            raise producing_failed(e.args[0] if e.args else e) from e
        self._producer.poll(0)
        self._raise_if_failed()

    def _send_with_columns(
        self,
        topics: Any,
        values: list[Any],
        keys: Any,
        partitions: list[int | None] | None,
        headers: list[Any] | None,
    ) -> None:
        """The loop for batches with a ``partition`` or ``headers`` column."""
        produce, tag, tag_only = self._producer.produce, self._tag, self._tag_only
        for topic, value, key, partition, raw in zip(
            topics,
            values,
            keys,
            repeat(_UNASSIGNED) if partitions is None else partitions,
            repeat(None) if headers is None else headers,
            strict=False,
        ):
            if partition is None:
                partition = _UNASSIGNED
            record_headers: Headers = tag_only if raw is None else [*tagged_headers(raw, tag)]
            try:
                produce(topic, value, key, partition, None, None, 0, record_headers)
            except BufferError:
                self._produce_when_room(topic, value, key, partition, record_headers)

    def _produce_when_room(
        self, topic: str, value: Any, key: Any, partition: int, headers: Headers
    ) -> None:
        """librdkafka's queue is full: serve delivery reports until the record fits, for at
        most ``kafka.max.block.ms`` (kafka-python's ``send`` blocks as long)."""
        max_block_ms = int(self.config.producer_settings.get("max_block_ms", 60_000))
        deadline = time.monotonic() + max_block_ms / 1000
        while True:
            self._producer.poll(0.05)
            self._raise_if_failed()
            try:
                self._producer.produce(topic, value, key, partition, None, None, 0, headers)
                return
            except BufferError as e:
                if time.monotonic() >= deadline:
                    raise outage_error(
                        servers=self.config.bootstrap_servers,
                        doing=self._doing,
                        option="kafka.max.block.ms",
                        value=max_block_ms,
                        cause=f"librdkafka's queue stayed full: {e}",
                    ) from e

    def _raise_if_failed(self) -> None:
        if self._mismatch is not None:
            raise self._mismatch
        if self._error is None:
            return
        error, where = self._error
        codes = self._ck.KafkaError
        if error.code() in (codes._MSG_TIMED_OUT, codes._TIMED_OUT, codes.REQUEST_TIMED_OUT):
            raise self._delivery_timed_out(f"librdkafka: {where}: {error.name()}: {error.str()}")
        text = f"{where}: {error.name()}: {error.str()}"
        named = access_error(
            RuntimeError(text),
            servers=self.config.bootstrap_servers,
            settings=self.config.producer_settings,
            asked=Asked(
                operation="WRITE",
                resource=where.rpartition("-")[0] if where != "the producer" else None,
            ),
        )
        raise named if named is not None else producing_failed(text)

    def _delivery_timed_out(self, cause: str) -> BrokerUnavailableError:
        """The outage error that names ``kafka.delivery.timeout.ms``."""
        return outage_error(
            servers=self.config.bootstrap_servers,
            doing=self._doing,
            option="kafka.delivery.timeout.ms",
            value=self.config.producer_settings.get("delivery_timeout_ms", 120_000),
            cause=cause,
        )

    def finish(self) -> ProducedOutput:
        self._flush_and_count()
        self._close()
        return self.output

    def _flush_and_count(self) -> None:
        """Wait for every record's acknowledgement; the output's counts."""
        seconds = delivery_timeout_s(self.config.producer_settings)
        deadline = time.monotonic() + seconds
        # In slices: a refusal reported meanwhile (error_cb) ends the wait at once.
        left = self._producer.flush(min(1.0, seconds))
        while left and time.monotonic() < deadline:
            self._raise_if_failed()
            left = self._producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
        self._raise_if_failed()
        if left:
            raise self._delivery_timed_out(
                f"{left} records not acknowledged within {seconds:.0f} s"
            )
        counts: dict[str, dict[int, int]] = {}
        for (topic, partition), n in self._counts.items():
            counts.setdefault(topic, {})[partition] = n
        if self.config.topic and self._per_partition:
            counts[self.config.topic] = dict(self._per_partition)
        self.output.counts = counts

    def close(self) -> None:
        try:
            self._producer.purge()  # the attempt failed: nothing of it is worth waiting for
            self._producer.poll(0)
            self._close()
        except (RuntimeError, self._ck.KafkaException) as e:  # the task's error matters
            # INFO: the task's own error, raised next, is the line a user must read first.
            log.info("confluent-kafka: closing a failed attempt's producer: %s", e)

    def _close(self) -> None:
        close = getattr(self._producer, "close", None)  # confluent-kafka >= 2.12 has it
        if close is not None:
            close()  # nothing is left to flush here
