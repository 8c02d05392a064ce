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
Bounded by ``prefetchRecords`` per partition and, per worker, by ``max_bytes`` of keys
and values (64 MB by default; the oldest entries go first). Entries are keyed by query
run as well, and expire after ``ttl_s`` (5 minutes), checked on every put and take.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from spark_chkpt.kafka.client.columnar import RecordColumns, count, head
from spark_chkpt.offsets import TopicPartition


@dataclass
class _Ahead:
    follows: int  # the end offset of the range these records were fetched past
    records: list[Any]  # record objects or RecordColumns (a columnar read's)
    stored: float
    size: int  # bytes of keys and values


def _size(records: Sequence[Any]) -> int:
    return sum(
        r.nbytes if isinstance(r, RecordColumns) else len(r.value or b"") + len(r.key or b"")
        for r in records
    )


@dataclass
class PrefetchStats:
    hits: int = 0
    invalidated: int = 0
    records_served: int = 0
    records_stored: int = 0


class PrefetchBuffer:
    """Records past a range's end by (settings, partition); taken once, by exact offset."""

    def __init__(self, *, max_bytes: int = 64 * 1024**2, ttl_s: float = 300.0) -> None:
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._entries: OrderedDict[tuple[Hashable, TopicPartition], _Ahead] = OrderedDict()
        self._records = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = PrefetchStats()

    def __len__(self) -> int:
        return self._records

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _drop(self, key: tuple[Hashable, TopicPartition]) -> _Ahead | None:
        ahead = self._entries.pop(key, None)
        if ahead is not None:
            self._records -= count(ahead.records)
            self._bytes -= ahead.size
        return ahead

    def _expire(self, now: float) -> None:
        while self._entries:
            key, oldest = next(iter(self._entries.items()))
            if now - oldest.stored <= self.ttl_s and self._bytes <= self.max_bytes:
                return
            self._drop(key)

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
        kept = head(records, limit) if limit > 0 else []
        now = time.monotonic()
        with self._lock:
            self._drop((key, tp))
            if kept:
                size = _size(kept)
                self._entries[(key, tp)] = _Ahead(follows, kept, now, size)
                self._records += count(kept)
                self._bytes += size
                self.stats.records_stored += count(kept)
            self._expire(now)

    def take(self, *, key: Hashable, tp: TopicPartition, start: int) -> list[Any]:
        """The records kept for a read of ``tp`` from ``start``; [] and invalidate otherwise."""
        with self._lock:
            ahead = self._drop((key, tp))
            if ahead is None:
                return []
            fresh = time.monotonic() - ahead.stored <= self.ttl_s
            if ahead.follows != start or not fresh:
                self.stats.invalidated += 1
                return []
            self.stats.hits += 1
            self.stats.records_served += count(ahead.records)
            return ahead.records

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._records = 0
            self._bytes = 0


PREFETCH = PrefetchBuffer()  # one per Python worker process
