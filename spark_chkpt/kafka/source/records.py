"""Kafka records as Arrow: Spark's Kafka source schema, built column by column.

Spark's schema: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int`` and, with ``includeHeaders``, ``headers
array<struct<key: string, value: binary>>``, null for a record without headers (as
Spark's connector gives it, not an empty array).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_chkpt.kafka.client.columnar import RecordColumns

SPARK_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"


def spark_schema_ddl(*, include_headers: bool) -> str:
    return SPARK_SCHEMA_DDL + (", " + HEADERS_DDL if include_headers else "")


def arrow_schema(*, include_headers: bool) -> pa.Schema:
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(header)))
    return pa.schema(fields)


def to_record_batch(
    records: Sequence[Any], *, topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """Build one Arrow batch from one partition's records: kafka-python ``ConsumerRecord``s
    or :class:`spark_chkpt.kafka.client.consumer.Record`s (the same field names).

    One pass per column over the records kafka-python returned; no per-record dicts.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(records)
    timestamps = pa.array([r.timestamp for r in records], type=pa.int64())
    columns = [
        pa.array([r.key for r in records], type=pa.binary()),
        pa.array([r.value for r in records], type=pa.binary()),
        pa.repeat(pa.scalar(topic, type=pa.string()), n),
        pa.repeat(pa.scalar(partition, type=pa.int32()), n),
        pa.array([r.offset for r in records], type=pa.int64()),
        pc.multiply(timestamps, 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array([r.timestamp_type for r in records], type=pa.int32()),
    ]
    if len(schema) > 7:
        columns.append(
            pa.array(
                [
                    [{"key": k, "value": v} for k, v in r.headers] if r.headers else None
                    for r in records
                ],
                type=schema.field("headers").type,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _binary(buffer: Any, positions: list[int], lengths: list[int]) -> pa.Array:
    """A binary column of the byte ranges of ``buffer`` at ``positions`` (ascending, not
    overlapping); a negative length is a null. No per-record ``bytes`` and no per-byte
    index: the ranges and the gaps between them, alternately, are one zero-copy binary
    array over ``buffer``, and Arrow's ``take`` of every other element copies the ranges."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(lengths)
    if n == 0:
        return pa.array([], type=pa.binary())
    sizes = np.asarray(lengths, dtype=np.int64)
    valid = sizes >= 0
    nulls = n - int(np.count_nonzero(valid))
    starts = np.asarray(positions, dtype=np.int64)
    bounds = np.empty(2 * n + 1, dtype=np.int32)
    bounds[0 : 2 * n : 2] = starts
    bounds[1 : 2 * n : 2] = starts + np.maximum(sizes, 0)
    bounds[2 * n] = bounds[2 * n - 1]
    spans = pa.Array.from_buffers(
        pa.binary(), 2 * n, [None, pa.py_buffer(bounds), pa.py_buffer(buffer)]
    )
    taken = pc.take(spans, pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
    if not nulls:
        return taken
    validity = pa.array(valid, type=pa.bool_()).buffers()[1]
    _, offsets, data = taken.buffers()
    return pa.Array.from_buffers(pa.binary(), n, [validity, offsets, data], null_count=nulls)


def header_codes(chunk: RecordColumns) -> tuple[Any, list[list[tuple[str, bytes | None]]]]:
    """Each record's headers as a code into a list of distinct header lists: a numpy
    int32 array (-1: no headers) and the parsed lists. Records of one upstream task
    attempt carry the same encoded headers (its ``chkpt.attempt`` tag), so a chunk of a
    barrier topic has a few distinct encodings whatever its size: Arrow's
    ``dictionary_encode`` finds them over the encoded bytes, and only they are parsed.
    Kept on the chunk (its slices share it)."""
    if chunk.codes is not None:
        return chunk.codes
    import numpy as np
    import pyarrow.compute as pc

    from spark_chkpt.kafka.client.record_format import parse_headers

    distinct: list[list[tuple[str, bytes | None]]] = []
    if not chunk.header_index:
        codes = np.full(len(chunk), -1, dtype=np.int32)
    else:
        encoded = pc.dictionary_encode(_binary(chunk.buffer, chunk.header_pos, chunk.header_len))
        distinct = [parse_headers(raw, 0, len(raw)) for raw in encoded.dictionary.to_pylist()]
        found = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
        if chunk.dense_headers:
            codes = found
        else:
            codes = np.full(len(chunk), -1, dtype=np.int32)
            codes[np.asarray(chunk.header_index, dtype=np.int64)] = found
    chunk.codes = (codes, distinct)
    return chunk.codes


def _headers_column(chunk: RecordColumns, kind: pa.DataType) -> pa.Array:
    """Spark's headers column of ``chunk``: each distinct header list built once, then
    taken by the records' codes (null where a record has none)."""
    import pyarrow as pa

    n = len(chunk)
    if not chunk.header_index:
        return pa.nulls(n, kind)
    codes, distinct = header_codes(chunk)
    lists = pa.array(
        [[{"key": k, "value": v} for k, v in found] or None for found in distinct], type=kind
    )
    return lists.take(pa.array(codes, mask=codes < 0))


def columns_to_record_batch(
    chunks: Sequence[RecordColumns], *, topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """Build one Arrow batch from one partition's decoded columns
    (:class:`spark_chkpt.kafka.client.columnar.RecordColumns`); the same table
    :func:`to_record_batch` makes of the same records."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_chkpt.kafka.client.columnar import joined

    batches = []
    for chunk in joined(chunks):
        n = len(chunk)
        timestamps = pa.array(chunk.timestamps, type=pa.int64())
        columns = [
            _binary(chunk.buffer, chunk.key_pos, chunk.key_len),
            _binary(chunk.buffer, chunk.value_pos, chunk.value_len),
            pa.repeat(pa.scalar(topic, type=pa.string()), n),
            pa.repeat(pa.scalar(partition, type=pa.int32()), n),
            pa.array(chunk.offsets, type=pa.int64()),
            pc.multiply(timestamps, 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array(chunk.timestamp_types, type=pa.int32()),
        ]
        if len(schema) > 7:
            columns.append(_headers_column(chunk, schema.field("headers").type))
        batches.append(pa.RecordBatch.from_arrays(columns, schema=schema))
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    return pa.Table.from_batches(batches, schema=schema).combine_chunks().to_batches()[0]
