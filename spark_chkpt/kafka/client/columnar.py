"""Kafka record batches (message format v2) decoded into columns, not one object per record.

kafka-python turns every fetched record into two Python objects (its ``DefaultRecord``
and a ``ConsumerRecord``) and copies its key and value into new ``bytes``; the source then
walks those objects once per Arrow column. Here a fetch's batches are decoded by one tight
loop into plain lists (offsets, timestamps, and the position and length of each key and
value inside the batch's bytes); :mod:`spark_chkpt.kafka.source.records` gathers keys and
values into Arrow buffers with numpy, so no per-record ``bytes`` is ever made.

More: docs/concepts/kafka-internals.md (spark_chkpt/kafka/client/columnar.py).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from spark_chkpt.kafka.client.record_format import encode_headers, parse_headers

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
    -1 is a null key. A record's headers stay encoded in ``buffer`` as Kafka wrote them
    (v2: count, then key and value per header): ``header_index`` lists the records that
    have any (ascending), ``header_len`` how long their encoded headers are, and
    :attr:`header_pos` where they start: right after the value (Kafka's record layout, and
    :meth:`from_records`'), so it is worked out from the value columns, not stored: the
    decoder appends two numbers per record with headers, not three.
    Parsed on demand: per distinct encoding (:mod:`spark_chkpt.kafka.source.records`,
    where every record of one upstream attempt shares one), or per record
    (:attr:`headers`, for the few that need objects).
    """

    __slots__ = (
        "_header_pos",
        "buffer",
        "codes",
        "header_index",
        "header_len",
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
        header_index: Sequence[int] | None = None,
        header_len: list[int] | None = None,
    ) -> None:
        self.buffer = buffer
        self.offsets = offsets
        self.timestamps = timestamps
        self.timestamp_types = timestamp_types
        self.key_pos = key_pos
        self.key_len = key_len
        self.value_pos = value_pos
        self.value_len = value_len
        self._header_pos: Any = None  # worked out on first use (header_pos)
        self.header_len = header_len if header_len is not None else []
        # Every record has headers (a barrier topic's): a range, no list to renumber.
        index = header_index if header_index is not None else []
        self.header_index: Sequence[int] = (
            range(len(offsets)) if len(index) == len(offsets) else index
        )
        self.codes: Any = None  # the headers' codes, once computed (records.header_codes)

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

    @property
    def dense_headers(self) -> bool:
        """Every record has headers (``header_index`` is ``range(len(self))``)."""
        return isinstance(self.header_index, range)

    @property
    def header_pos(self) -> Any:
        """Where each record with headers has them in ``buffer`` (a numpy int64 array,
        in ``header_index`` order): right after its value."""
        if self._header_pos is None:
            import numpy as np

            value_pos = np.asarray(self.value_pos, dtype=np.int64)
            value_len = np.asarray(self.value_len, dtype=np.int64)
            if not self.dense_headers:
                picked = np.asarray(self.header_index, dtype=np.int64)
                value_pos, value_len = value_pos[picked], value_len[picked]
            self._header_pos = value_pos + np.maximum(value_len, 0)
        return self._header_pos

    @property
    def headers(self) -> dict[int, list[tuple[str, bytes | None]]]:
        """Each record with headers (by index) and its headers, parsed: one object per
        record, for the few callers that need them."""
        buf = self.buffer
        return {
            i: parse_headers(buf, p, p + n)
            for i, p, n in zip(
                self.header_index, self.header_pos.tolist(), self.header_len, strict=True
            )
        }

    def slice(self, start: int, stop: int) -> RecordColumns:
        index = self.header_index
        lo, hi = (
            (bisect.bisect_left(index, start), bisect.bisect_left(index, stop)) if index else (0, 0)
        )
        out = RecordColumns(
            buffer=self.buffer,
            offsets=self.offsets[start:stop],
            timestamps=self.timestamps[start:stop],
            timestamp_types=self.timestamp_types[start:stop],
            key_pos=self.key_pos[start:stop],
            key_len=self.key_len[start:stop],
            value_pos=self.value_pos[start:stop],
            value_len=self.value_len[start:stop],
            header_index=(
                range(hi - lo)
                if isinstance(index, range)
                else [i - start for i in index[lo:hi]]
                if start
                else index[lo:hi]
            ),
            header_len=self.header_len[lo:hi],
        )
        if self.codes is not None:
            codes, distinct = self.codes
            out.codes = (codes[start:stop], distinct)
        return out

    def split_at(self, offset: int) -> tuple[RecordColumns, RecordColumns]:
        """The records before ``offset`` and those from it on."""
        cut = bisect.bisect_left(self.offsets, offset)
        return self.slice(0, cut), self.slice(cut, len(self))

    def without(self, indices: Iterable[int]) -> RecordColumns:
        """These columns less the records at ``indices``."""
        import numpy as np

        keep = np.ones(len(self), dtype=np.bool_)
        keep[np.fromiter(indices, dtype=np.int64)] = False
        return self.compress(keep)

    def compress(self, keep: Any) -> RecordColumns:
        """The records where the boolean numpy array ``keep`` is true (vectorised: numpy
        picks from each column; no object per record is made in Python code)."""
        import numpy as np

        picked = np.flatnonzero(keep)

        def pick(column: list[int]) -> list[int]:
            return np.asarray(column, dtype=np.int64)[picked].tolist()

        spans = np.asarray(self.header_index, dtype=np.int64)
        kept_spans = keep[spans] if len(spans) else np.zeros(0, dtype=np.bool_)
        renumbered = (np.cumsum(keep) - 1)[spans[kept_spans]] if len(spans) else spans
        out = RecordColumns(
            buffer=self.buffer,
            offsets=pick(self.offsets),
            timestamps=pick(self.timestamps),
            timestamp_types=pick(self.timestamp_types),
            key_pos=pick(self.key_pos),
            key_len=pick(self.key_len),
            value_pos=pick(self.value_pos),
            value_len=pick(self.value_len),
            header_index=renumbered.tolist(),
            header_len=np.asarray(self.header_len, dtype=np.int64)[kept_spans].tolist(),
        )
        if self.codes is not None:
            codes, distinct = self.codes
            out.codes = (codes[picked], distinct)
        return out

    def _bytes(self, pos: int, length: int) -> bytes | None:
        return None if length < 0 else bytes(self.buffer[pos : pos + length])

    def record_headers(self, index: int) -> list[tuple[str, bytes | None]] | None:
        """The headers of the record at ``index``, parsed (None: it has none)."""
        at = bisect.bisect_left(self.header_index, index)
        if at == len(self.header_index) or self.header_index[at] != index:
            return None
        pos = int(self.header_pos[at])
        return parse_headers(self.buffer, pos, pos + self.header_len[at])

    def record(self, index: int) -> Record:
        """One record as an object (for the few that need one: headers, barriers)."""
        return Record(
            self._bytes(self.key_pos[index], self.key_len[index]),
            self._bytes(self.value_pos[index], self.value_len[index]),
            self.offsets[index],
            self.timestamps[index],
            self.timestamp_types[index],
            self.record_headers(index),  # type: ignore[arg-type]
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
        header_index: list[int] = []
        header_len: list[int] = []
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
                encoded = encode_headers(r.headers)
                header_index.append(i)  # at len(buffer): right after the value
                header_len.append(len(encoded))
                buffer += encoded
        return cls(
            buffer=bytes(buffer),
            offsets=[r.offset for r in records],
            timestamps=[r.timestamp for r in records],
            timestamp_types=[r.timestamp_type for r in records],
            key_pos=key_pos,
            key_len=key_len,
            value_pos=value_pos,
            value_len=value_len,
            header_index=header_index,
            header_len=header_len,
        )


def joined(chunks: Sequence[RecordColumns]) -> list[RecordColumns]:
    """``chunks`` with each run of neighbours over one buffer (slices of one fetch, in
    order: the rows a barrier split) joined into one, without copying the buffer: each
    chunk costs a fixed share when it becomes Arrow."""
    import numpy as np

    out: list[RecordColumns] = []
    run: list[RecordColumns] = []
    for chunk in [*chunks, None]:
        if run and (chunk is None or chunk.buffer is not run[0].buffer):
            if len(run) == 1:
                out.append(run[0])
            else:
                out.append(_join(run, np))
            run = []
        if chunk is not None and len(chunk):
            run.append(chunk)
    return out


def _cat(lists: Iterable[list[int]]) -> list[int]:
    out: list[int] = []
    for part in lists:
        out += part
    return out


def _join(run: list[RecordColumns], np: Any) -> RecordColumns:
    header_index: list[int] = []
    base = 0
    for part in run:
        header_index += (
            range(base, base + len(part))
            if isinstance(part.header_index, range)
            else [i + base for i in part.header_index]
        )
        base += len(part)
    out = RecordColumns(
        buffer=run[0].buffer,
        offsets=_cat(part.offsets for part in run),
        timestamps=_cat(part.timestamps for part in run),
        timestamp_types=_cat(part.timestamp_types for part in run),
        key_pos=_cat(part.key_pos for part in run),
        key_len=_cat(part.key_len for part in run),
        value_pos=_cat(part.value_pos for part in run),
        value_len=_cat(part.value_len for part in run),
        header_index=header_index,
        header_len=_cat(part.header_len for part in run),
    )
    if all(part.codes is not None for part in run) and all(
        part.codes[1] is run[0].codes[1] for part in run
    ):
        out.codes = (np.concatenate([part.codes[0] for part in run]), run[0].codes[1])
    return out


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


class Pending(list[Any]):
    """A read task's records waiting for their Arrow batch (record objects or columns),
    with their count kept as they come: the task asks for it after every poll, and
    :func:`count` over the whole list each time walked it about a hundred times per
    batch."""

    rows: int = 0

    def append(self, item: Any) -> None:
        super().append(item)
        self.rows += len(item) if isinstance(item, RecordColumns) else 1

    def extend(self, items: Iterable[Any]) -> None:
        items = list(items)
        super().extend(items)
        self.rows += count(items)

    def extend_records(self, records: list[Any]) -> None:
        """:meth:`extend` by record objects only (a record path's poll): counted by
        ``len``, not walked."""
        super().extend(records)
        self.rows += len(records)


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
        self.header_index: list[int] = []
        self.header_len: list[int] = []

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
        self.header_index += [i + start for i in columns.header_index]
        self.header_len += columns.header_len

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
        spans = bisect.bisect_left(self.header_index, keep)
        for column in (self.header_index, self.header_len):
            del column[spans:]

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
            header_index=self.header_index,
            header_len=self.header_len,
        )
