"""The prefetch buffer's rules: taken once, only at the exact offset, bounded."""

from __future__ import annotations

from spark_chkpt.kafka.client.consumer import Record
from spark_chkpt.kafka.source.prefetch import PrefetchBuffer
from spark_chkpt.offsets import TopicPartition

TP = TopicPartition("t", 0)


def _records(first: int, count: int) -> list[Record]:
    return [Record(None, b"v", o, 0, 0, None) for o in range(first, first + count)]


def test_records_are_served_once_to_the_read_that_starts_where_they_follow() -> None:
    buffer = PrefetchBuffer()
    buffer.put(key="k", tp=TP, follows=10, records=_records(10, 5), limit=100)
    assert [r.offset for r in buffer.take(key="k", tp=TP, start=10)] == [10, 11, 12, 13, 14]
    assert buffer.take(key="k", tp=TP, start=15) == [] and len(buffer) == 0
    assert buffer.stats.hits == 1 and buffer.stats.records_served == 5


def test_a_seek_mismatch_invalidates_the_entry() -> None:
    buffer = PrefetchBuffer()
    buffer.put(key="k", tp=TP, follows=10, records=_records(10, 5), limit=100)
    assert buffer.take(key="k", tp=TP, start=7) == []  # a replay from an older offset
    assert buffer.take(key="k", tp=TP, start=10) == []  # gone, not kept for later
    assert buffer.stats.invalidated == 1 and len(buffer) == 0


def test_other_settings_and_partitions_never_see_the_records() -> None:
    buffer = PrefetchBuffer()
    buffer.put(key="k", tp=TP, follows=10, records=_records(10, 5), limit=100)
    assert buffer.take(key="other", tp=TP, start=10) == []
    assert buffer.take(key="k", tp=TopicPartition("t", 1), start=10) == []
    assert len(buffer.take(key="k", tp=TP, start=10)) == 5


def test_bounded_per_partition_and_per_worker_oldest_evicted_first() -> None:
    buffer = PrefetchBuffer(max_bytes=8)  # each record here is one byte (b"v")
    buffer.put(key="k", tp=TP, follows=0, records=_records(0, 10), limit=6)
    assert len(buffer) == 6 and buffer.nbytes == 6
    buffer.put(key="k", tp=TopicPartition("t", 1), follows=0, records=_records(0, 4), limit=6)
    assert len(buffer) == 4  # the first entry went to stay under 8 bytes
    assert buffer.take(key="k", tp=TP, start=0) == []
    buffer.put(key="k", tp=TP, follows=0, records=_records(0, 3), limit=0)
    assert len(buffer) == 4  # limit 0 keeps nothing


def test_stale_entries_are_not_served_and_are_freed_without_a_take() -> None:
    buffer = PrefetchBuffer(ttl_s=60.0)
    buffer.put(key="k", tp=TP, follows=10, records=_records(10, 2), limit=100)
    buffer.ttl_s = -1.0  # the entry is now older than the TTL
    assert buffer.take(key="k", tp=TP, start=10) == []
    assert buffer.stats.invalidated == 1
    buffer.ttl_s = 60.0
    buffer.put(key="k", tp=TP, follows=10, records=_records(10, 2), limit=100)
    buffer.ttl_s = -1.0
    buffer.put(key="k", tp=TopicPartition("t", 9), follows=0, records=[], limit=100)
    assert len(buffer) == 0 and buffer.nbytes == 0  # a put expires what nobody took


def test_sizes_of_records_and_of_columns_count_keys_and_values() -> None:
    """The byte bound's sizes: record objects summed through ``map`` (null keys and
    values count 0), a list mixing in columns summed per item."""
    from spark_chkpt.kafka.client.columnar import RecordColumns
    from spark_chkpt.kafka.source.prefetch import _size

    records = [
        Record(b"ab", b"cde", 0, 0, 0, None),
        Record(None, b"f", 1, 0, 0, None),
        Record(b"g", None, 2, 0, 0, None),
    ]
    assert _size(records) == 7
    assert _size([]) == 0
    columns = RecordColumns.from_records(records)
    assert _size([columns, records[0]]) == columns.nbytes + 5
