"""The read task's fetch size per partition (no broker): about what its ranges need."""

from __future__ import annotations

from spark_chkpt.kafka.source.fetcher import FETCH_FLOOR, partition_fetch_bytes

MB = 1024 * 1024


def test_unknown_record_size_asks_the_floor_first() -> None:
    """A worker's first task on a topic: 64 KB, then sized once records are in."""
    assert partition_fetch_bytes(records=312, record_bytes=None, ceiling=MB) == FETCH_FLOOR
    assert partition_fetch_bytes(records=312, record_bytes=None, ceiling=1_000) == 1_000


def test_a_small_range_asks_what_it_needs_with_room_to_spare() -> None:
    # 64 partitions, 20,000 records a batch: 312 records of ~230 bytes a partition
    assert partition_fetch_bytes(records=312, record_bytes=230.0, ceiling=MB) == 89_700


def test_never_below_the_floor_nor_above_the_clients_size() -> None:
    assert partition_fetch_bytes(records=3, record_bytes=230.0, ceiling=MB) == FETCH_FLOOR
    assert partition_fetch_bytes(records=5_000, record_bytes=230.0, ceiling=MB) == MB
    # a ceiling the user set below the floor wins
    assert partition_fetch_bytes(records=3, record_bytes=230.0, ceiling=1_000) == 1_000
    assert partition_fetch_bytes(records=0, record_bytes=230.0, ceiling=MB) == MB
