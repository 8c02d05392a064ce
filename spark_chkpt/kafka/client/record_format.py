"""Kafka's record format v2, read and written by hand: zigzag varints, a batch's records
decoded by one tight loop into the lists of a ``ColumnsBuilder``
(:mod:`spark_chkpt.kafka.client.columnar`; the varints inlined: the loop runs once per
record of every fetch), and record headers parsed and encoded.

More: docs/concepts/kafka-internals.md (spark_chkpt/kafka/client/columnar.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class ColumnLists(Protocol):
    """The lists :func:`decode_records` appends a record's fields to (a
    ``ColumnsBuilder`` of :mod:`spark_chkpt.kafka.client.columnar`)."""

    offsets: list[int]
    timestamps: list[int]
    key_pos: list[int]
    key_len: list[int]
    value_pos: list[int]
    value_len: list[int]
    header_index: list[int]
    header_len: list[int]


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
    cols: ColumnLists,
) -> int:
    """Append ``count`` v2 records of ``buf`` from ``pos`` to ``cols``; the end position.

    Positions are stored plus ``base`` (where ``buf`` starts in the joined buffer)."""
    offsets_append = cols.offsets.append
    timestamps_append = cols.timestamps.append
    key_pos_append = cols.key_pos.append
    key_len_append = cols.key_len.append
    value_pos_append = cols.value_pos.append
    value_len_append = cols.value_len.append
    header_len_append = cols.header_len.append
    varint = _varint
    first = len(cols.offsets)
    first_header = len(cols.header_len)
    try:
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
            # Headers => varint count, [key string, value bytes]: where they lie, parsed later
            # (parse_headers checks they fill the rest of the record)
            if buf[pos] == 0:
                pos += 1
            else:
                header_len_append(end - pos)  # where they start: after the value (header_pos)
                pos = end
            if pos != end:
                from kafka.errors import CorruptRecordError

                raise CorruptRecordError(
                    f"Invalid record size: expected to read {length} bytes in record payload, "
                    f"but instead read {length + pos - end}"
                )
    finally:
        _index_headers(cols, buf, base=base, first=first, first_header=first_header)
    return pos


def _index_headers(
    cols: ColumnLists, buf: bytes | bytearray, *, base: int, first: int, first_header: int
) -> None:
    """Extend ``header_index`` with the records of one record batch, from ``first``, that
    have headers: the decoder appended only their ``header_len`` (from ``first_header``).
    All of them (a barrier topic's batch) or none is the common case and costs one call;
    a batch of both finds them by the header count byte after each value (0: none), in
    numpy. Also after a record that failed to decode, so the two lists stay in step."""
    done = len(cols.value_len) - first  # records that got as far as their value
    added = len(cols.header_len) - first_header
    if added == 0 or done <= 0:
        del cols.header_len[first_header:]
        return
    if added == done:
        cols.header_index.extend(range(first, first + done))
        return
    import numpy as np

    starts = np.asarray(cols.value_pos[first : first + done], dtype=np.int64) - base
    starts += np.maximum(np.asarray(cols.value_len[first : first + done], dtype=np.int64), 0)
    data = np.frombuffer(buf, dtype=np.uint8)
    inside = starts < len(data)
    flagged = np.zeros(done, dtype=np.bool_)
    flagged[inside] = data[starts[inside]] != 0
    found = (np.flatnonzero(flagged) + first)[:added].tolist()
    cols.header_index.extend(found)
    del cols.header_len[first_header + len(found) :]


def parse_headers(buf: bytes | bytearray, pos: int, end: int) -> list[tuple[str, bytes | None]]:
    """The headers Kafka encoded in ``buf[pos:end]`` (v2: varint count, then per header a
    varint-sized key string and a varint-sized value, -1 a null value); they must fill it."""
    from kafka.errors import CorruptRecordError

    try:
        n, pos = _varint(buf, pos)
        if n < 0:
            raise CorruptRecordError(f"Found invalid number of record headers {n}")
        got: list[tuple[str, bytes | None]] = []
        for _ in range(n):
            size, pos = _varint(buf, pos)
            if size < 0:
                raise CorruptRecordError(f"Invalid negative header key size {size}")
            key = bytes(buf[pos : pos + size]).decode("utf-8")
            pos += size
            size, pos = _varint(buf, pos)
            if size >= 0:
                got.append((key, bytes(buf[pos : pos + size])))
                pos += size
            else:
                got.append((key, None))
    except (ValueError, IndexError) as err:
        raise CorruptRecordError(f"Found invalid record structure: {err!r}") from err
    if pos != end:
        raise CorruptRecordError(
            f"Invalid record size: the headers end {pos - end} byte(s) off the record's end"
        )
    return got


def _zigzag(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """``headers`` as Kafka encodes them in a v2 record (what :func:`parse_headers` reads)."""
    out = bytearray(_zigzag(len(headers)))
    for key, value in headers:
        name = key.encode("utf-8")
        out += _zigzag(len(name)) + name
        if value is None:
            out += _zigzag(-1)
        else:
            out += _zigzag(len(value)) + bytes(value)
    return bytes(out)
