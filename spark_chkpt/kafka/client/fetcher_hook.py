"""The hook into kafka-python's fetcher that hands out :class:`RecordColumns`.

:class:`ColumnarPartitionRecords` subclasses kafka-python's ``Fetcher.PartitionRecords``
(a private class of kafka-python 3.0) and replaces it on one consumer's fetcher
(:func:`set_columnar`): its ``take(n)`` returns one :class:`RecordColumns` of at most
``n`` records, decoded by :func:`~spark_chkpt.kafka.client.columnar.decode_records`.
Everything else stays kafka-python's (see :mod:`.columnar`). Kept apart from the decoder
because it is the one place that leans on kafka-python's internals: a kafka-python
release that changes them is a change here only.
"""

from __future__ import annotations

import bisect
from typing import Any

from spark_chkpt.kafka.client.columnar import (
    LOG_APPEND_TIME,
    ColumnsBuilder,
    RecordColumns,
)
from spark_chkpt.kafka.client.record_format import decode_records


class _Chunk(list):
    """kafka-python's fetcher counts what ``take(n)`` returns with ``len()`` against its
    ``max_records`` and ``extend``s its result list with it: this list holds one
    :class:`RecordColumns` and has its row count as length, so a poll's ``max_records``
    still counts records."""

    __slots__ = ("rows",)

    def __init__(self, columns: RecordColumns) -> None:
        super().__init__([columns])
        self.rows = len(columns)

    def __len__(self) -> int:
        return self.rows


def partition_records_class() -> type:
    from kafka.consumer.fetcher import Fetcher, IsolationLevel

    class ColumnarPartitionRecords(Fetcher.PartitionRecords):
        """``Fetcher.PartitionRecords`` whose ``take(n)`` returns columns (see module doc)."""

        def __init__(self, fetch_offset: int, tp: Any, records: Any, **kwargs: Any) -> None:
            super().__init__(fetch_offset, tp, records, **kwargs)
            self._memory = records
            self._columns: RecordColumns | None = None
            self._cursor = 0
            self._final_offset = fetch_offset
            self._error: Exception | None = None

        def _decode(self) -> RecordColumns:
            from kafka.errors import CorruptRecordError
            from kafka.record.default_records import DefaultRecordBatch

            cols = ColumnsBuilder()
            records = self._memory
            read_committed = self.isolation_level == IsolationLevel.READ_COMMITTED
            try:
                batch = records.next_batch()
                last_batch = None
                while batch is not None:
                    last_batch = batch
                    if self.check_crcs and not batch.validate_crc():
                        raise CorruptRecordError(
                            f"Record batch for partition {self.topic_partition} at offset "
                            f"{batch.base_offset} failed crc check"
                        )
                    if not isinstance(batch, DefaultRecordBatch):  # magic 0/1: kafka-python's
                        legacy = list(batch)
                        if legacy:
                            cols.add(RecordColumns.from_records(legacy))
                            self._final_offset = legacy[-1].offset + 1
                        batch = records.next_batch()
                        continue
                    self.leader_epoch = batch.leader_epoch
                    if read_committed and batch.has_producer_id():
                        # kafka-python's rules, batch by batch (PartitionRecords._unpack_records)
                        self._consume_aborted_transactions_up_to(batch.last_offset)
                        producer_id = batch.producer_id
                        if self._contains_abort_marker(batch):
                            self.aborted_producer_ids.discard(producer_id)
                        elif self._is_batch_aborted(batch):
                            self._final_offset = batch.next_offset
                            batch = records.next_batch()
                            continue
                    if batch.is_control_batch:
                        self._final_offset = batch.next_offset
                        batch = records.next_batch()
                        continue
                    batch._maybe_uncompress()
                    buf = batch._buffer
                    attributes = batch.attributes
                    stamp_type = 1 if attributes & LOG_APPEND_TIME else 0
                    cols.timestamp_types += [stamp_type] * batch.records_count
                    try:
                        decode_records(
                            buf,
                            batch._pos,
                            batch.records_count,
                            base=cols.add_part(buf),
                            base_offset=batch.base_offset,
                            first_timestamp=batch.first_timestamp,
                            append_time=batch.max_timestamp
                            if attributes & LOG_APPEND_TIME
                            else None,
                            cols=cols,
                        )
                    except (ValueError, IndexError) as err:
                        raise CorruptRecordError(
                            f"Found invalid record structure: {err!r}"
                        ) from err
                    if cols.offsets:
                        self._final_offset = cols.offsets[-1] + 1
                    batch = records.next_batch()
                if last_batch is not None and last_batch.magic == 2:
                    # As kafka-python: the batch's last offset survives compaction.
                    self._final_offset = last_batch.next_offset
            except Exception as e:  # raised after the records decoded before it
                self._error = e
                cols.truncate()  # the whole records before the failing one
            columns = cols.build()
            # A fetch from inside a batch (compression) starts before the offset asked for.
            self._cursor = bisect.bisect_left(columns.offsets, self.fetch_offset)
            return columns

        def take(self, n: int | None = None) -> list[Any]:
            self._maybe_raise_next_inline_exception()
            if self.record_iterator is None:
                return []
            if self._columns is None:
                self._columns = self._decode()
            columns = self._columns
            start = self._cursor
            stop = len(columns) if n is None else min(len(columns), start + n)
            self._cursor = stop
            taken = columns.slice(start, stop) if stop > start else None
            if taken is not None:
                self.next_fetch_offset = columns.offsets[stop - 1] + 1
                self.records_read += stop - start
            if stop >= len(columns):
                error, self._error = self._error, None
                if error is None:
                    self.next_fetch_offset = max(self.next_fetch_offset, self._final_offset)
                    self.bytes_read = self._memory.size_in_bytes()
                    self.drain()
                elif taken is None:
                    raise error
                else:
                    self._next_inline_exception = error
            return [] if taken is None else _Chunk(taken)

    return ColumnarPartitionRecords


_CLASS: list[type] = []


def set_columnar(fetcher: Any, *, on: bool) -> bool:
    """Make a kafka-python ``Fetcher`` hand out :class:`RecordColumns` (or records again).

    False if it cannot: a fetcher without the hook this relies on, or one with key or
    value deserializers (columns carry raw bytes)."""
    if not on:
        if "PartitionRecords" in vars(fetcher):
            del fetcher.PartitionRecords
        return False
    config = getattr(fetcher, "config", {})
    if not hasattr(type(fetcher), "PartitionRecords") or (
        config.get("key_deserializer") is not None or config.get("value_deserializer") is not None
    ):
        return False
    if not _CLASS:
        _CLASS.append(partition_records_class())
    fetcher.PartitionRecords = _CLASS[0]
    return True


def drain_before_sleeping(fetcher: Any) -> bool:
    """Make a kafka-python ``Fetcher`` hand out records that arrived while it was sending.

    kafka-python 3.0's ``poll`` sleeps ``retry_backoff_ms`` (100 ms by default) when
    ``fetch_records`` says it is idle: nothing drained and no fetch in flight. A fetch
    whose answer comes back while ``send_fetches`` is still running (a broker close by
    answers at once) is no longer in flight when that is judged, so the poll sleeps with
    the answer in ``_completed_fetches``: 100 ms lost per poll, seen 4 to 11 times in a
    200,000-record read (bench/aligned_read.py's records through a profile). This wraps
    the fetcher's ``fetch_records``: judged idle with answers waiting, it drains them
    first and sleeps only if that gave nothing.

    False if the fetcher lacks what this relies on (another kafka-python)."""
    original = getattr(fetcher, "fetch_records", None)
    if (
        original is None
        or getattr(original, "_chkpt_drains", False)
        or not hasattr(fetcher, "_completed_fetches")
        or not hasattr(fetcher, "fetched_records")
    ):
        return False

    def fetch_records(
        max_records: int | None = None, update_offsets: bool = True, timeout_ms: Any = None
    ) -> tuple[Any, bool]:
        records, idle = original(max_records, update_offsets=update_offsets, timeout_ms=timeout_ms)
        if records or not idle or not fetcher._completed_fetches:
            return records, idle
        records, _ = fetcher.fetched_records(max_records, update_offsets=update_offsets)
        return records, not records

    fetch_records._chkpt_drains = True  # type: ignore[attr-defined]
    fetcher.fetch_records = fetch_records
    return True
