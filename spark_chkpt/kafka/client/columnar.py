"""Kafka record batches (message format v2) decoded into columns, not one object per record.

kafka-python turns every fetched record into two Python objects (its ``DefaultRecord``
and a ``ConsumerRecord``) and copies its key and value into new ``bytes``; the source then
walks those objects once per Arrow column. Here a fetch's batches are decoded by one tight
loop into plain lists (offsets, timestamps, and the position and length of each key and
value inside the batch's bytes); :mod:`spark_chkpt.kafka.source.records` gathers keys and
values into Arrow buffers with numpy, so no per-record ``bytes`` is ever made.

Everything around the records stays kafka-python's: fetch requests, sessions, leaders,
errors, positions, CRC checks, decompression (``kafka.codec``: gzip, snappy, lz4, zstd),
and the batch-level rules of ``read_committed`` (aborted transactions from the fetch
response, control batches). :class:`ColumnarPartitionRecords` replaces kafka-python's
``Fetcher.PartitionRecords`` on one consumer's fetcher
(:func:`~spark_chkpt.kafka.client.fetcher_hook.set_columnar`, in its own module: it
subclasses kafka-python's private fetcher classes); its ``take(n)`` returns one
:class:`RecordColumns` of at most ``n`` records. Legacy batches
(magic 0 and 1, never written by Kafka 3+ brokers) go through kafka-python's own
records, converted with :meth:`RecordColumns.from_records`.

The record loop repeats one inlined block for each of a record's five varints (length,
timestamp delta, offset delta, key length, value length): a one-byte varint is decoded in
place and only a longer one calls :func:`_varint`. The loop runs once per record, where a
function call per field costs more than the repetition (``python -m bench.decode``).

(Over 400 lines: the columns and the v2 record decoder that fills them are one format,
read in one place.)
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

log = logging.getLogger(__name__)


class Record(NamedTuple):
    """One Kafka record, with the field names of kafka-python's ``ConsumerRecord``."""

    key: bytes | None
    value: bytes | None
    offset: int
    timestamp: int
    timestamp_type: int  # 0 create time, 1 log-append time (Spark's timestampType)
    headers: list[tuple[str, bytes]] | None


# DefaultRecordBatch attributes (KIP-98): the timestamp type bit.
LOG_APPEND_TIME = 0x08


class RecordColumns:
    """Records of one partition as columns over one buffer, in offset order.

    ``key_pos``/``key_len`` (and ``value_*``) locate each key in ``buffer``; a length of
    -1 is a null key. ``headers`` maps a record's index to its headers, for the records
    that have any (most have none).
    """

    __slots__ = (
        "buffer",
        "headers",
        "key_len",
        "key_pos",
        "offsets",
        "timestamp_types",
        "timestamps",
        "value_len",
        "value_pos",
    )

    def __init__(
        self,
        *,
        buffer: bytes | bytearray,
        offsets: list[int],
        timestamps: list[int],
        timestamp_types: list[int],
        key_pos: list[int],
        key_len: list[int],
        value_pos: list[int],
        value_len: list[int],
        headers: dict[int, list[tuple[str, bytes | None]]],
    ) -> None:
        self.buffer = buffer
        self.offsets = offsets
        self.timestamps = timestamps
        self.timestamp_types = timestamp_types
        self.key_pos = key_pos
        self.key_len = key_len
        self.value_pos = value_pos
        self.value_len = value_len
        self.headers = headers

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def first_offset(self) -> int:
        return self.offsets[0]

    @property
    def last_offset(self) -> int:
        return self.offsets[-1]

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values (what the prefetch buffer counts)."""
        return sum(n for n in self.key_len if n > 0) + sum(n for n in self.value_len if n > 0)

    def slice(self, start: int, stop: int) -> RecordColumns:
        return RecordColumns(
            buffer=self.buffer,
            offsets=self.offsets[start:stop],
            timestamps=self.timestamps[start:stop],
            timestamp_types=self.timestamp_types[start:stop],
            key_pos=self.key_pos[start:stop],
            key_len=self.key_len[start:stop],
            value_pos=self.value_pos[start:stop],
            value_len=self.value_len[start:stop],
            headers={i - start: h for i, h in self.headers.items() if start <= i < stop},
        )

    def split_at(self, offset: int) -> tuple[RecordColumns, RecordColumns]:
        """The records before ``offset`` and those from it on."""
        cut = bisect.bisect_left(self.offsets, offset)
        return self.slice(0, cut), self.slice(cut, len(self))

    def without(self, indices: Iterable[int]) -> RecordColumns:
        """These columns less the records at ``indices``."""
        drop = set(indices)
        keep = [i for i in range(len(self)) if i not in drop]
        renumber = {old: new for new, old in enumerate(keep)}
        return RecordColumns(
            buffer=self.buffer,
            offsets=[self.offsets[i] for i in keep],
            timestamps=[self.timestamps[i] for i in keep],
            timestamp_types=[self.timestamp_types[i] for i in keep],
            key_pos=[self.key_pos[i] for i in keep],
            key_len=[self.key_len[i] for i in keep],
            value_pos=[self.value_pos[i] for i in keep],
            value_len=[self.value_len[i] for i in keep],
            headers={renumber[i]: h for i, h in self.headers.items() if i in renumber},
        )

    def _bytes(self, pos: int, length: int) -> bytes | None:
        return None if length < 0 else bytes(self.buffer[pos : pos + length])

    def record(self, index: int) -> Record:
        """One record as an object (for the few that need one: headers, barriers)."""
        return Record(
            self._bytes(self.key_pos[index], self.key_len[index]),
            self._bytes(self.value_pos[index], self.value_len[index]),
            self.offsets[index],
            self.timestamps[index],
            self.timestamp_types[index],
            self.headers.get(index),  # type: ignore[arg-type]
        )

    def records(self) -> list[Record]:
        return [self.record(i) for i in range(len(self))]

    @classmethod
    def from_records(cls, records: Sequence[Any]) -> RecordColumns:
        """Columns of record objects (kafka-python's ``ConsumerRecord`` or :class:`Record`)."""
        buffer = bytearray()
        key_pos: list[int] = []
        key_len: list[int] = []
        value_pos: list[int] = []
        value_len: list[int] = []
        headers: dict[int, list[tuple[str, bytes | None]]] = {}
        for i, r in enumerate(records):
            for data, positions, lengths in (
                (r.key, key_pos, key_len),
                (r.value, value_pos, value_len),
            ):
                positions.append(len(buffer))
                if data is None:
                    lengths.append(-1)
                else:
                    lengths.append(len(data))
                    buffer += data
            if r.headers:
                headers[i] = list(r.headers)
        return cls(
            buffer=bytes(buffer),
            offsets=[r.offset for r in records],
            timestamps=[r.timestamp for r in records],
            timestamp_types=[r.timestamp_type for r in records],
            key_pos=key_pos,
            key_len=key_len,
            value_pos=value_pos,
            value_len=value_len,
            headers=headers,
        )


def as_columns(items: Sequence[Any]) -> list[RecordColumns]:
    """``items`` (columns, record objects or both) as a list of columns, in order."""
    out: list[RecordColumns] = []
    loose: list[Any] = []
    for item in items:
        if isinstance(item, RecordColumns):
            if loose:
                out.append(RecordColumns.from_records(loose))
                loose = []
            if len(item):
                out.append(item)
        else:
            loose.append(item)
    if loose:
        out.append(RecordColumns.from_records(loose))
    return out


def as_records(items: Sequence[Any]) -> list[Any]:
    """``items`` (columns, record objects or both) as record objects, in order."""
    if not any(isinstance(item, RecordColumns) for item in items):
        return list(items)
    out: list[Any] = []
    for item in items:
        if isinstance(item, RecordColumns):
            out.extend(item.records())
        else:
            out.append(item)
    return out


def count(items: Sequence[Any]) -> int:
    """Records in ``items`` (columns count their rows)."""
    return sum(len(i) if isinstance(i, RecordColumns) else 1 for i in items)


def head(items: Sequence[Any], n: int) -> list[Any]:
    """The first ``n`` records of ``items``, columns cut where needed."""
    out: list[Any] = []
    left = n
    for item in items:
        if left <= 0:
            break
        if isinstance(item, RecordColumns):
            if len(item) > left:
                item = item.slice(0, left)
            left -= len(item)
        else:
            left -= 1
        out.append(item)
    return out


def last_offset(items: Sequence[Any]) -> int:
    last = items[-1]
    return last.last_offset if isinstance(last, RecordColumns) else int(last.offset)


def _varint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: (value, next position)."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift >= 64:
            raise ValueError("varint out of int64 range")


def decode_records(
    buf: bytearray,
    pos: int,
    count: int,
    *,
    base: int,
    base_offset: int,
    first_timestamp: int,
    append_time: int | None,
    cols: ColumnsBuilder,
) -> int:
    """Append ``count`` v2 records of ``buf`` from ``pos`` to ``cols``; the end position.

    Positions are stored plus ``base`` (where ``buf`` starts in the joined buffer)."""
    offsets_append = cols.offsets.append
    timestamps_append = cols.timestamps.append
    key_pos_append = cols.key_pos.append
    key_len_append = cols.key_len.append
    value_pos_append = cols.value_pos.append
    value_len_append = cols.value_len.append
    headers = cols.headers
    varint = _varint
    index = len(cols.offsets)
    for _ in range(count):
        # Length => varint; Attributes => int8 (unused)
        b = buf[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            length, pos = varint(buf, pos)
        end = pos + length
        pos += 1
        # TimestampDelta => varlong
        b = buf[pos]
        if b < 0x80:
            delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            delta, pos = varint(buf, pos)
        timestamps_append(first_timestamp + delta if append_time is None else append_time)
        # OffsetDelta => varint
        b = buf[pos]
        if b < 0x80:
            delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            delta, pos = varint(buf, pos)
        offsets_append(base_offset + delta)
        # Key => varint length, bytes (-1: null)
        b = buf[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = varint(buf, pos)
        key_pos_append(pos + base)
        key_len_append(n)
        if n > 0:
            pos += n
        # Value => varint length, bytes (-1: null)
        b = buf[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = varint(buf, pos)
        value_pos_append(pos + base)
        value_len_append(n)
        if n > 0:
            pos += n
        # Headers => varint count, [key string, value bytes]
        if buf[pos] == 0:
            pos += 1
        else:
            pos = _decode_headers(buf, pos, index, headers)
        if pos != end:
            from kafka.errors import CorruptRecordError

            raise CorruptRecordError(
                f"Invalid record size: expected to read {length} bytes in record payload, "
                f"but instead read {length + pos - end}"
            )
        index += 1
    return pos


def _decode_headers(
    buf: bytearray, pos: int, index: int, headers: dict[int, list[tuple[str, bytes | None]]]
) -> int:
    from kafka.errors import CorruptRecordError

    n, pos = _varint(buf, pos)
    if n < 0:
        raise CorruptRecordError(f"Found invalid number of record headers {n}")
    got: list[tuple[str, bytes | None]] = []
    for _ in range(n):
        size, pos = _varint(buf, pos)
        if size < 0:
            raise CorruptRecordError(f"Invalid negative header key size {size}")
        key = buf[pos : pos + size].decode("utf-8")
        pos += size
        size, pos = _varint(buf, pos)
        if size >= 0:
            got.append((key, bytes(buf[pos : pos + size])))
            pos += size
        else:
            got.append((key, None))
    if got:
        headers[index] = got
    return pos


class ColumnsBuilder:
    """Columns being filled from one fetch, with the buffers they point into."""

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray] = []
        self.size = 0
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.key_pos: list[int] = []
        self.key_len: list[int] = []
        self.value_pos: list[int] = []
        self.value_len: list[int] = []
        self.headers: dict[int, list[tuple[str, bytes | None]]] = {}

    def add_part(self, data: bytes | bytearray) -> int:
        base = self.size
        self.parts.append(data)
        self.size += len(data)
        return base

    def add(self, columns: RecordColumns) -> None:
        base = self.add_part(columns.buffer)
        start = len(self.offsets)
        self.offsets += columns.offsets
        self.timestamps += columns.timestamps
        self.timestamp_types += columns.timestamp_types
        self.key_pos += [p + base for p in columns.key_pos]
        self.key_len += columns.key_len
        self.value_pos += [p + base for p in columns.value_pos]
        self.value_len += columns.value_len
        for i, h in columns.headers.items():
            self.headers[start + i] = h

    def truncate(self) -> None:
        """Drop what a failed record left behind: keep the records every column holds."""
        lists = (
            self.offsets,
            self.timestamps,
            self.timestamp_types,
            self.key_pos,
            self.key_len,
            self.value_pos,
            self.value_len,
        )
        keep = min(len(column) for column in lists)
        for column in lists:
            del column[keep:]
        for index in [i for i in self.headers if i >= keep]:
            del self.headers[index]

    def build(self) -> RecordColumns:
        parts = self.parts
        buffer: bytes | bytearray = parts[0] if len(parts) == 1 else b"".join(parts)
        return RecordColumns(
            buffer=buffer,
            offsets=self.offsets,
            timestamps=self.timestamps,
            timestamp_types=self.timestamp_types,
            key_pos=self.key_pos,
            key_len=self.key_len,
            value_pos=self.value_pos,
            value_len=self.value_len,
            headers=self.headers,
        )
