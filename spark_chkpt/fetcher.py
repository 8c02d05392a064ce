"""Executor-side reads: one offset range of one partition as bounded Arrow batches.

Offsets are never assumed contiguous: transaction markers and compaction leave gaps,
so a range ends when the consumer's *position* reaches its end, not after
``end - start`` records. Memory is bounded by ``maxRecordsPerArrowBatch`` and the
client's fetch sizes, never by the size of the range.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from spark_chkpt.config import SourceConfig
from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import DataLossError, KafkaReadError
from spark_chkpt.offsets import OffsetRange
from spark_chkpt.records import arrow_schema, to_record_batch

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


class RangeFetcher:
    """Reads offset ranges with one kafka-python consumer (assign + seek, no group)."""

    def __init__(self, *, config: SourceConfig, client_id: str) -> None:
        from kafka import KafkaConsumer

        self._config = config
        settings = config.consumer_settings(client_id=client_id)
        settings.setdefault("max_poll_records", min(config.max_records_per_arrow_batch, 10_000))
        self._consumer: Any = KafkaConsumer(**settings)
        self._schema = arrow_schema(include_headers=config.include_headers)

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> RangeFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lost(self, rng: OffsetRange, missing_from: int, missing_to: int, why: str) -> None:
        message = (
            f"{rng.tp}: offsets [{missing_from}, {missing_to}) of the planned range "
            f"[{rng.start}, {rng.end}) are no longer in Kafka ({why})"
        )
        if self._config.fail_on_data_loss:
            raise DataLossError(
                message + ". Some data may have been lost. Set failOnDataLoss=false to skip "
                "missing offsets with a warning instead."
            )
        log.warning("%s; skipping them because failOnDataLoss=false", message)

    def read(self, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
        """Yield ``rng``'s records as Arrow batches of at most ``maxRecordsPerArrowBatch``."""
        from kafka import TopicPartition as KafkaTopicPartition
        from kafka.errors import OffsetOutOfRangeError

        if rng.size == 0:
            return
        ktp = KafkaTopicPartition(rng.tp.topic, rng.tp.partition)
        consumer = self._consumer
        consumer.assign([ktp])
        begin = int(consumer.beginning_offsets([ktp])[ktp])
        position = rng.start
        if position < begin:
            self._lost(
                rng,
                position,
                min(begin, rng.end),
                "deleted by retention or the topic was recreated",
            )
            position = begin
        if position >= rng.end:
            return
        consumer.seek(ktp, position)
        limit = self._config.max_records_per_arrow_batch
        timeout_s = self._config.poll_timeout_ms / 1000
        pending: list[Any] = []
        idle = Deadline.after(seconds=timeout_s)
        while position < rng.end:
            try:
                polled = consumer.poll(
                    timeout_ms=min(1000, self._config.poll_timeout_ms),
                    max_records=limit - len(pending),
                )
            except OffsetOutOfRangeError as e:
                begin = int(consumer.beginning_offsets([ktp])[ktp])
                self._lost(rng, position, min(begin, rng.end), f"out of range: {e}")
                if begin >= rng.end:
                    break
                position = max(begin, position)
                consumer.seek(ktp, position)
                continue
            records = polled.get(ktp, [])
            if records:
                idle = Deadline.after(seconds=timeout_s)
                if records[-1].offset >= rng.end:
                    records = [r for r in records if r.offset < rng.end]
                pending.extend(records)
                if len(pending) >= limit:
                    yield to_record_batch(
                        pending, topic=rng.tp.topic, partition=rng.tp.partition, schema=self._schema
                    )
                    pending = []
            position = max(position, int(consumer.position(ktp)))
            if records or position >= rng.end:
                continue
            hw = consumer.highwater(ktp)  # fresh from the empty fetch just made
            if hw is not None and int(hw) <= position:
                self._lost(rng, position, rng.end, f"the partition now ends at offset {hw}")
                break
            if idle.expired():
                raise KafkaReadError(
                    f"{rng.tp}: no records after waiting {self._config.poll_timeout_ms} ms at "
                    f"offset {position} of [{rng.start}, {rng.end}); raise "
                    "kafkaConsumer.pollTimeoutMs if the broker is slow"
                )
        if pending:
            yield to_record_batch(
                pending, topic=rng.tp.topic, partition=rng.tp.partition, schema=self._schema
            )
