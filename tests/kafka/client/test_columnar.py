"""The v2 record-batch decoder against kafka-python's own records, without a broker:
batches built with kafka-python's builder, every codec, reads from inside a batch."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.structs import TopicPartition

from spark_chkpt.kafka.client.columnar import RecordColumns
from spark_chkpt.kafka.client.fetcher_hook import partition_records_class
from spark_chkpt.kafka.source.records import (
    arrow_schema,
    columns_to_record_batch,
    to_record_batch,
)

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


HEADERS = {
    "every 5th": lambda n: n % 5 == 0,
    "all": lambda n: True,
    "none": lambda n: False,
    # whole batches with and without, and batches that start or end with either
    "runs": lambda n: (n // 150) % 2 == 0 or n % 97 == 0 or n % 97 == 96,
}


def _fetch(
    records: int, *, codec: int, per_batch: int = 97, has_headers: Any = HEADERS["every 5th"]
) -> bytes:
    """Bytes of a fetch response's records: batches of ``per_batch``, offsets from 0;
    record ``n`` has headers where ``has_headers(n)``."""
    out = bytearray()
    for base in range(0, records, per_batch):
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        for i in range(min(per_batch, records - base)):
            n = base + i
            builder.append(
                i,
                timestamp=1_700_000_000_000 + n * 37,
                key=None if n % 7 == 0 else b"k%d" % n,
                value=None if n % 11 == 0 else (b"" if n % 13 == 0 else b"v%d-" % n * (n % 40)),
                headers=[("h", b"%d" % n), ("none", None)] if has_headers(n) else [],
            )
        batch = bytearray(builder.build())
        struct.pack_into(">q", batch, 0, base)
        out += batch
    return bytes(out)


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("fetch_offset", [0, 150])
@pytest.mark.parametrize("headers", list(HEADERS))
def test_columns_equal_kafka_pythons_records(codec: str, fetch_offset: int, headers: str) -> None:
    data = _fetch(1000, codec=CODECS[codec], has_headers=HEADERS[headers])
    tp = TopicPartition("t", 0)
    old = Fetcher.PartitionRecords(fetch_offset, tp, MemoryRecords(data))
    records = old.take(None)
    new = partition_records_class()(fetch_offset, tp, MemoryRecords(data))
    chunks: list[RecordColumns] = []
    while got := new.take(128):
        assert len(got) <= 128  # kafka-python counts take()'s rows against max_records
        chunks += list(got)
    schema = arrow_schema(include_headers=True)
    expected = to_record_batch(records, topic="t", partition=0, schema=schema)
    table = columns_to_record_batch(chunks, topic="t", partition=0, schema=schema)
    assert table.num_rows == 1000 - fetch_offset
    assert table.equals(expected)
    assert new.next_fetch_offset == old.next_fetch_offset == 1000
    assert not new  # drained, as kafka-python's is after its last record


def test_columns_round_trip_through_records_and_slices() -> None:
    data = _fetch(300, codec=0)
    new = partition_records_class()(0, TopicPartition("t", 0), MemoryRecords(data))
    (chunk,) = new.take(None)
    before, after = chunk.split_at(120)
    assert (len(before), after.first_offset) == (120, 120)
    again = RecordColumns.from_records(after.records())
    schema = arrow_schema(include_headers=True)
    assert columns_to_record_batch([again], topic="t", partition=0, schema=schema).equals(
        columns_to_record_batch([after], topic="t", partition=0, schema=schema)
    )
    dropped = chunk.without([0, 5, 299])
    assert len(dropped) == 297 and 5 not in dropped.offsets
    assert dropped.record(4).offset == 6 and dropped.record(4).headers is None
    assert dropped.record(8).offset == 10
    assert dropped.record(8).headers == [("h", b"10"), ("none", None)]


def test_a_corrupt_record_fails_after_the_records_before_it() -> None:
    data = bytearray(_fetch(50, codec=0, per_batch=50))
    struct.pack_into(">i", data, 57, 51)  # the batch claims one record more than it holds
    new = partition_records_class()(0, TopicPartition("t", 0), MemoryRecords(bytes(data)))
    new.check_crcs = False
    (chunk,) = new.take(None)
    assert len(chunk) == 50
    with pytest.raises(CorruptRecordError, match=r"invalid record structure"):
        new.take(None)


def test_headers_stay_encoded_until_coded_once_per_distinct_encoding() -> None:
    """Headers are kept as spans of the fetch and parsed per distinct encoding: records
    of one attempt share one; every record with headers keeps a range, not a list; the
    coded chunk's slices share the codes; a header section that does not fill its record
    is a corrupt record."""
    from spark_chkpt.kafka.client.columnar import Record
    from spark_chkpt.kafka.client.record_format import encode_headers, parse_headers
    from spark_chkpt.kafka.source.records import header_codes

    headers = [("chkpt.attempt", b"a.1.0"), ("ключ", None), ("", b"")]
    encoded = encode_headers(headers)
    assert parse_headers(encoded, 0, len(encoded)) == headers
    with pytest.raises(CorruptRecordError, match="headers end"):
        parse_headers(encoded + b"\x00", 0, len(encoded) + 1)
    with pytest.raises(CorruptRecordError):
        parse_headers(encoded[:-3], 0, len(encoded) - 3)
    records = [
        Record(None, b"v%d" % i, i, i, 0, [("chkpt.attempt", b"a.%d.0" % (i % 3))])
        for i in range(30)
    ]
    chunk = RecordColumns.from_records(records)
    assert chunk.dense_headers and chunk.header_index == range(30)
    codes, distinct = header_codes(chunk)
    assert len(distinct) == 3 and codes.tolist() == [i % 3 for i in range(30)]
    part = chunk.slice(10, 20)
    assert part.dense_headers and part.codes is not None
    assert part.codes[0].tolist() == codes[10:20].tolist()
    assert part.record(4).headers == [("chkpt.attempt", b"a.2.0")]
    kept = chunk.compress(codes != 1)
    assert kept.offsets == [i for i in range(30) if i % 3 != 1] and kept.dense_headers
    assert [kept.record(i).headers for i in (0, 1)] == [
        [("chkpt.attempt", b"a.0.0")],
        [("chkpt.attempt", b"a.2.0")],
    ]
    mixed = RecordColumns.from_records([*records[:3], Record(None, b"x", 3, 3, 0, None)])
    assert not mixed.dense_headers and header_codes(mixed)[0].tolist() == [0, 1, 2, -1]
