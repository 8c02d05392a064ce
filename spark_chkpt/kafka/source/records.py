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
