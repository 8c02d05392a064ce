"""The executor's prefetch buffer: records fetched past a range's end, kept for the next batch.

A read task stops at its range's end offset, but the last poll usually returns records
beyond it (a fetch is sized in bytes, not offsets). Instead of dropping them and
fetching them again in the next micro-batch, the task leaves them here, keyed by
consumer settings and topic-partition, together with the offset they follow (the
range's end). The next task of the same Python worker whose range of that partition
*starts exactly there* takes them and seeks its consumer past them. Any other start
(a seek mismatch: another worker read it, a replay, a reset) invalidates the entry.

This is the "buffer after the barrier" of an aligned read: records after a barrier stay
here, not only in Kafka, until the batch that ends at the next barrier takes them.
Bounded by ``prefetchRecords`` per partition and ``max_records`` per worker.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from spark_chkpt.offsets import TopicPartition


@dataclass
class _Ahead:
    follows: int  # the end offset of the range these records were fetched past
    records: list[Any]
    stored: float


@dataclass
class PrefetchStats:
    hits: int = 0
    invalidated: int = 0
    records_served: int = 0
    records_stored: int = 0


class PrefetchBuffer:
    """Records past a range's end by (settings, partition); taken once, by exact offset."""

    def __init__(self, *, max_records: int = 200_000, ttl_s: float = 300.0) -> None:
        self.max_records = max_records
        self.ttl_s = ttl_s
        self._entries: OrderedDict[tuple[Hashable, TopicPartition], _Ahead] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.stats = PrefetchStats()

    def __len__(self) -> int:
        return self._size

    def put(
        self,
        *,
        key: Hashable,
        tp: TopicPartition,
        follows: int,
        records: Sequence[Any],
        limit: int,
    ) -> None:
        """Keep up to ``limit`` of ``records`` (consecutive, from ``follows`` on) for later."""
        kept = list(records[:limit]) if limit > 0 else []
        with self._lock:
            old = self._entries.pop((key, tp), None)
            if old is not None:
                self._size -= len(old.records)
            if not kept:
                return
            self._entries[(key, tp)] = _Ahead(follows, kept, time.monotonic())
            self._size += len(kept)
            self.stats.records_stored += len(kept)
            while self._size > self.max_records and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self._size -= len(evicted.records)

    def take(self, *, key: Hashable, tp: TopicPartition, start: int) -> list[Any]:
        """The records kept for a read of ``tp`` from ``start``; [] and invalidate otherwise."""
        with self._lock:
            ahead = self._entries.pop((key, tp), None)
            if ahead is None:
                return []
            self._size -= len(ahead.records)
            fresh = time.monotonic() - ahead.stored <= self.ttl_s
            if ahead.follows != start or not fresh:
                self.stats.invalidated += 1
                return []
            self.stats.hits += 1
            self.stats.records_served += len(ahead.records)
            return ahead.records

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0


PREFETCH = PrefetchBuffer()  # one per Python worker process
