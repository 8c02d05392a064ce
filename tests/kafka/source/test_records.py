"""Kafka records as Arrow rows: the headers column as Spark's connector fills it."""

from __future__ import annotations

import pytest
from pyspark.sql.datasource import InputPartition

from spark_chkpt.connectors.kafka_source import KafkaBatchReader
from spark_chkpt.kafka.client.consumer import Record
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.records import arrow_schema, to_record_batch


def test_a_record_without_headers_has_null_headers_as_in_spark() -> None:
    records = [
        Record(
            offset=0,
            key=b"k",
            value=b"v",
            timestamp=1000,
            timestamp_type=0,
            headers=[("h", b"1"), ("h", b"2")],
        ),
        Record(offset=1, key=None, value=b"w", timestamp=2000, timestamp_type=0, headers=[]),
    ]
    batch = to_record_batch(
        records, topic="t", partition=3, schema=arrow_schema(include_headers=True)
    )
    assert batch.column(batch.schema.get_field_index("headers")).to_pylist() == [
        [{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}],
        None,
    ]
    assert batch.column(batch.schema.get_field_index("partition")).to_pylist() == [3, 3]


def test_an_empty_batch_plan_reads_nothing() -> None:
    """A batch read with nothing between its start and end plans no read task; Spark then
    runs one task with its placeholder partition, which must read nothing (not fail)."""
    config = SourceConfig.from_options(
        {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}, streaming=False
    )
    reader = KafkaBatchReader(config=config)
    assert list(reader.read(InputPartition(None))) == []
    with pytest.raises(TypeError, match="cannot read"):
        reader.read(InputPartition(3))
