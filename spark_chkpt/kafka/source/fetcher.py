"""Executor-side reads: offset ranges of one or more partitions as bounded Arrow batches.

Offsets are never assumed contiguous: transaction markers and compaction leave gaps,
so a range ends when the consumer's *position* reaches its end, not after
``end - start`` records. Memory is bounded by ``maxRecordsPerArrowBatch`` per
partition and the client's fetch sizes, never by the size of a range.

More: docs/concepts/kafka-internals.md (spark_chkpt/kafka/source/fetcher.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from spark_chkpt.alignment.aligner import Aligner, Mode
from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import (
    DataLossError,
    KafkaReadError,
    OffsetOutOfRangeError,
)
from spark_chkpt.kafka.client.columnar import (
    Pending,
    RecordColumns,
    as_columns,
    as_records,
    count,
)
from spark_chkpt.kafka.client.consumer import RangeConsumer, build_consumer
from spark_chkpt.kafka.client.outage import broker_calls
from spark_chkpt.kafka.client.pool import POOL, ConsumerPool
from spark_chkpt.kafka.source.intake import (
    RECORD_BYTES,
    Channel,
    ReadSpec,
    ReadStats,
    RecordIntake,
)
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.prefetch import PREFETCH, PrefetchBuffer
from spark_chkpt.kafka.source.records import (
    arrow_schema,
    columns_to_record_batch,
    to_record_batch,
)
from spark_chkpt.offsets import OffsetRange, TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

# Seconds without a record while planned records remain before a read task replaces its
# consumer once (at most half of kafkaConsumer.pollTimeoutMs, which then fails the task).
STALL_S = 10.0

# The fetch size a read task asks per partition: what its largest range needs, by the
# bytes a record of the topic took in this worker's earlier reads, with room to spare.
FETCH_MARGIN = 1.25
FETCH_FLOOR = 64 * 1024
# kafka-python's max_partition_fetch_bytes when the options set none.
DEFAULT_PARTITION_FETCH = 1024 * 1024


def partition_fetch_bytes(*, records: int, record_bytes: float | None, ceiling: int) -> int:
    """Bytes to ask per partition and fetch for a task whose largest range still holds
    ``records`` records of about ``record_bytes`` bytes each: enough for the range in one
    fetch (``FETCH_MARGIN``), at least ``FETCH_FLOOR``, at most ``ceiling`` (the client's
    ``max.partition.fetch.bytes``). Unknown record size: ``FETCH_FLOOR``, and the task
    sizes its later fetches once its first records are in.

    A fetch beyond the range is decoded and kept for a later batch of the same worker
    (the prefetch buffer), which another worker's task then fetches again: at 64
    partitions and 312 records a partition per batch, 1 MB fetches decoded each
    partition's whole remainder, batch after batch (docs/performance)."""
    if records <= 0:
        return ceiling
    if record_bytes is None:
        return min(ceiling, FETCH_FLOOR)
    wanted = math.ceil(records * record_bytes * FETCH_MARGIN)
    return max(min(ceiling, FETCH_FLOOR), min(ceiling, wanted))


class RangeFetcher(RecordIntake):
    """Reads offset ranges with one pooled consumer (assign + seek, no group)."""

    def __init__(
        self,
        *,
        config: SourceConfig,
        client_id: str,
        align: Mode = "aligned",
        pool: ConsumerPool | None = POOL,
        prefetch: PrefetchBuffer | None = PREFETCH,
    ) -> None:
        self._config = config
        self._settings = config.fetch_settings(client_id=client_id)
        self._pool = pool
        self._held: RangeConsumer | None = None  # acquired by the first read, for its topics
        self._prefetch = prefetch if config.prefetch_records > 0 else None
        # Entries belong to one run of one query (the client id carries its run id): another
        # query, or the same query restarted, never takes what this one left.
        self._prefetch_key = (self._settings.key(), client_id)
        self._schema = arrow_schema(include_headers=config.include_headers)
        self._align = align
        self._columnar = False  # this task's records come as RecordColumns
        self._learned: set[str] = set()  # topics whose record size this task measured
        self._resize = False  # a record size learned first-hand: size the fetches again
        self.stats = ReadStats()

    @property
    def _consumer(self) -> RangeConsumer:
        if self._held is None:
            raise RuntimeError("RangeFetcher: no consumer before the first read")
        return self._held

    @_consumer.setter
    def _consumer(self, consumer: RangeConsumer) -> None:
        self._held = consumer

    def _acquire(self, topics: set[str]) -> RangeConsumer:
        """The task's consumer: from the pool, which checks the topics' ids (first read)."""
        if self._held is None:
            self._held = (
                self._pool.acquire(self._settings, topics=topics)
                if self._pool is not None
                else build_consumer(self._settings)
            )
        return self._held

    def close(self, *, healthy: bool = True) -> None:
        """Give the consumer back to the pool (or close it after a failure)."""
        consumer, self._held = self._held, None
        if consumer is None:
            return
        if self._pool is not None:
            self._pool.release(consumer, self._settings, healthy=healthy)
        else:
            consumer.close()

    def __enter__(self) -> RangeFetcher:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(healthy=exc_type is None)

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
        """Yield one range's records as Arrow batches (no barrier handling)."""
        return self.read_group([ReadSpec(range=rng)])

    def read_group(self, specs: Sequence[ReadSpec]) -> Iterator[pa.RecordBatch]:
        """Yield the records of every spec's range, one consumer for all of them."""
        channels = {
            spec.range.tp: Channel(spec, spec.range.start) for spec in specs if spec.range.size > 0
        }
        if not channels:
            return
        consumer = self._acquire({tp.topic for tp in channels})
        # Every topic is read as columns where the client can: on a topic that carries
        # barriers the filters judge whole chunks (column_judge) and the aligner is
        # handed segments of columns cut at the barriers.
        self._columnar = self._set_columnar(consumer, want=True)
        begins = consumer.beginning_offsets(list(channels))
        aligner: Aligner[Any] | None = None
        if any(c.spec.markers for c in channels.values()) and len(channels) > 1:
            aligner = Aligner(channels=list(channels), mode=self._align)
        for channel in channels.values():
            self._start(channel, begins[channel.tp], aligner, channels)
        starts = {c.tp: c.position for c in channels.values() if not c.done}
        self._size_fetches(consumer, channels)
        consumer.assign(starts)
        for channel in channels.values():
            channel.assigned = not channel.done
            if channel.done:  # the prefetch buffer held the whole range
                self._end_of_range(channel, aligner, channels)
        limit = self._config.max_records_per_arrow_batch
        timeout_s = self._config.poll_timeout_ms / 1000
        idle = Deadline.after(seconds=timeout_s)
        stall_s = min(STALL_S, timeout_s / 2)
        stalled = Deadline.after(seconds=stall_s)
        replaced = False
        while not all(c.done for c in channels.values()):
            polled = self._poll(channels, limit)
            got_any = False
            for tp, records in polled.items():
                reading = channels.get(tp)
                if reading is None or reading.done or not records:
                    continue
                got_any = True
                self._take(reading, records, aligner, channels)
            for channel in channels.values():
                if channel.done:
                    continue
                channel.position = max(channel.position, consumer.position(channel.tp))
                if channel.position >= channel.spec.range.end:
                    self._finish(channel, aligner, channels)
            if self._resize:
                self._resize = False
                self._size_fetches(consumer, channels)
            yield from self._flush(channels, limit)
            if got_any:
                idle = Deadline.after(seconds=timeout_s)
                stalled = Deadline.after(seconds=stall_s)
                continue
            if not replaced and stalled.expired():
                # Records are planned past every open position, yet none came: a client
                # that stopped fetching gets one fresh stand-in. The one cause seen (parked
                # records of a paused partition in kafka-python) is cured in consumer.py;
                # this is the safety net for a client bug not yet known.
                self._replace_consumer(channels, stall_s)
                replaced = True
                consumer = self._consumer
                continue
            for channel in channels.values():
                if channel.done:
                    continue
                hw = consumer.highwater(channel.tp)  # fresh from the empty fetch just made
                if hw is not None and hw <= channel.position:
                    self._lost(
                        channel.spec.range,
                        channel.position,
                        channel.spec.range.end,
                        f"the partition now ends at offset {hw}",
                    )
                    self._finish(channel, aligner, channels)
                elif idle.expired():
                    rng = channel.spec.range
                    error = consumer.last_error()
                    raise KafkaReadError(
                        f"{rng.tp}: no records from {self._config.bootstrap_servers} after "
                        f"waiting {self._config.poll_timeout_ms} ms at offset "
                        f"{channel.position} of [{rng.start}, {rng.end})"
                        + (f"; the client's last error: {error}" if error else "")
                        + "; raise kafkaConsumer.pollTimeoutMs if the broker is slow"
                    )
        yield from self._flush(channels, 1)
        if self._prefetch is not None:
            for channel in channels.values():
                self._prefetch.put(
                    key=self._prefetch_key,
                    tp=channel.tp,
                    follows=channel.spec.range.end,
                    records=channel.ahead,
                    limit=self._config.prefetch_records,
                )
        if self.stats.revoked:
            log.warning(
                "skipped %d record(s) and barrier(s) of revoked upstream snapshots in %s",
                self.stats.revoked,
                ", ".join(str(c.spec.range) for c in channels.values()),
            )
        if self.stats.dropped:
            log.warning(
                "dropped %d record(s) of unconfirmed upstream attempt(s) %s in %s",
                self.stats.dropped,
                ", ".join(sorted(self.stats.dropped_attempts)),
                ", ".join(str(c.spec.range) for c in channels.values()),
            )

    def _size_fetches(
        self, consumer: RangeConsumer, channels: dict[TopicPartition, Channel]
    ) -> None:
        """Fetch about what the open ranges need (:func:`partition_fetch_bytes`)."""
        limit = getattr(consumer, "limit_partition_fetch", None)
        if limit is None:  # the confluent client: queued.min.messages bounds its prefetch
            return
        open_channels = [c for c in channels.values() if not c.done]
        sizes = [RECORD_BYTES.get(c.tp.topic) for c in open_channels]
        known = [size for size in sizes if size is not None]
        ceiling = int(
            self._settings.settings.get("max_partition_fetch_bytes", DEFAULT_PARTITION_FETCH)
        )
        limit(
            partition_fetch_bytes(
                records=max((c.spec.range.end - c.position for c in open_channels), default=0),
                # a topic not read yet in this worker: FETCH_FLOOR for all, until it is
                record_bytes=max(known) if known and len(known) == len(sizes) else None,
                ceiling=ceiling,
            )
        )

    def _set_columnar(self, consumer: RangeConsumer, *, want: bool) -> bool:
        """Switch ``consumer`` to columns (``decode=columns`` and ``want``) or to records."""
        switch = getattr(consumer, "set_columnar", None)
        if switch is None:  # the confluent client hands out records
            return False
        return bool(switch(on=want and self._config.decode == "columns"))

    def _replace_consumer(self, channels: dict[TopicPartition, Channel], stall_s: float) -> None:
        """Close the consumer and go on with a new one at the open channels' positions."""
        open_channels = [c for c in channels.values() if not c.done]
        log.warning(
            "no records for %.1f s at %s although the planned ranges go on; replacing the consumer",
            stall_s,
            ", ".join(f"{c.tp} offset {c.position} of {c.spec.range}" for c in open_channels),
        )
        if self._pool is not None:
            old = self._consumer
            self._consumer = self._pool.build(self._settings, replacing=old)
            self._pool.release(old, self._settings, healthy=False)
        else:
            self._consumer.close()
            self._consumer = build_consumer(self._settings)
        self._columnar = self._set_columnar(self._consumer, want=self._columnar)
        self._consumer.assign({c.tp: c.position for c in open_channels})
        for channel in channels.values():
            channel.assigned = not channel.done

    def _start(
        self,
        channel: Channel,
        begin: int,
        aligner: Aligner[Any] | None,
        channels: dict[TopicPartition, Channel],
    ) -> None:
        """Check the range still exists; take what the prefetch buffer holds for it."""
        rng = channel.spec.range
        if channel.position < begin:
            self._lost(
                rng,
                channel.position,
                min(begin, rng.end),
                "deleted by retention or the topic was recreated",
            )
            channel.position = begin
        if channel.position < rng.end and self._prefetch is not None:
            ahead = self._prefetch.take(
                key=self._prefetch_key, tp=channel.tp, start=channel.position
            )
            if ahead:
                ahead = as_columns(ahead) if self._columnar else as_records(ahead)
                self.stats.prefetched += count(ahead)
                last = ahead[-1]
                self._take(channel, ahead, aligner, channels)
                channel.position = max(
                    channel.position,
                    (last.last_offset if isinstance(last, RecordColumns) else last.offset) + 1,
                )
        if channel.position >= rng.end:
            channel.done = True

    def _poll(
        self, channels: dict[TopicPartition, Channel], limit: int
    ) -> dict[TopicPartition, list[Any]]:
        try:
            return self._consumer.poll(
                timeout_ms=min(1000, self._config.poll_timeout_ms), max_records=limit
            )
        except OffsetOutOfRangeError as e:
            open_channels = [c for c in channels.values() if not c.done]
            begins = self._consumer.beginning_offsets([c.tp for c in open_channels])
            for channel in open_channels:
                begin = begins[channel.tp]
                if begin > channel.position:
                    rng = channel.spec.range
                    self._lost(rng, channel.position, min(begin, rng.end), f"out of range: {e}")
                    channel.position = begin
                    if begin >= rng.end:
                        channel.done = True
                        self._consumer.pause(channel.tp)
                    else:
                        self._consumer.seek(channel.tp, begin)
            return {}

    def _finish(
        self,
        channel: Channel,
        aligner: Aligner[Any] | None,
        channels: dict[TopicPartition, Channel],
    ) -> None:
        channel.done = True
        if channel.assigned:
            self._consumer.pause(channel.tp)
        self._end_of_range(channel, aligner, channels)

    def _flush(
        self, channels: dict[TopicPartition, Channel], minimum: int
    ) -> Iterator[pa.RecordBatch]:
        for channel in channels.values():
            if channel.pending and channel.pending.rows >= minimum:
                pending, channel.pending = channel.pending, Pending()
                build = columns_to_record_batch if self._columnar else to_record_batch
                yield build(
                    pending,
                    topic=channel.tp.topic,
                    partition=channel.tp.partition,
                    schema=self._schema,
                )


# A read task's alignment by the source's mode: 'none' passes every record but barriers.
_TASK_ALIGNMENT: dict[str, Mode] = {
    "aligned": "aligned",
    "unaligned": "unaligned",
    "at-least-once": "at-least-once",
    "none": "at-least-once",
}


def read_task(
    *, config: SourceConfig, specs: Sequence[ReadSpec], client_id: str
) -> Iterator[pa.RecordBatch]:
    """One read task on an executor: the ranges of ``specs`` with one pooled consumer."""
    with (
        broker_calls(
            servers=config.bootstrap_servers,
            settings=config.client_settings,
            doing="reading " + ", ".join(str(s.range) for s in specs),
            operation="READ",
            resource=",".join(sorted({s.range.tp.topic for s in specs})),
        ),
        RangeFetcher(
            config=config, client_id=client_id, align=_TASK_ALIGNMENT[config.alignment]
        ) as fetcher,
    ):
        yield from fetcher.read_group(specs)
