"""The offset reader's log-end probe (``OffsetReader.latest`` under read_uncommitted) on
both brokers: on Kafka, whose ListOffsets answer is the high watermark, the probe's fetch
decodes no record; on Tansu, which lists the last batch's base offset + 1, it still
finds the high watermark past a last batch of many records."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_chkpt.kafka.client.topics import create_topic
from spark_chkpt.kafka.source.offset_reader import OffsetReader
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.offsets import TopicPartition
from tests.helpers import BROKER_ENV

pytestmark = pytest.mark.integration

RECORDS = 600  # per partition, in one record batch


def _one_batch_each(servers: str, topic: str, partitions: int) -> None:
    """``RECORDS`` records into each partition, batched by the producer (one batch each)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=servers, linger_ms=200, batch_size=1024 * 1024, acks="all"
    )
    try:
        for p in range(partitions):
            for i in range(RECORDS):
                producer.send(topic, value=b"record-%d" % i, partition=p)
        producer.flush()
    finally:
        producer.close()


def _reader(servers: str, topic: str) -> OffsetReader:
    config = SourceConfig.from_options({"kafka.bootstrap.servers": servers, "subscribe": topic})
    return OffsetReader(config=config, client_id="probe-test")


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many records kafka-python decodes from fetch responses (one per record)."""
    from kafka.record import default_records

    count = [0]
    read = default_records.DefaultRecordBatch._read_msg

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return read(self, *args, **kwargs)

    monkeypatch.setattr(default_records.DefaultRecordBatch, "_read_msg", counting)
    yield count


@pytest.mark.skipif(
    os.environ.get(BROKER_ENV) == "tansu", reason="the session broker is Tansu: see the next test"
)
def test_on_kafka_the_probe_decodes_no_record(
    bootstrap_servers: str, make_topic: Callable[..., str], decoded: list[int]
) -> None:
    """It fetched from the last record before, and kafka-python decoded that record's
    whole batch: 4 x 600 records here, 0.25 s per restart in the kafka-age bench."""
    topic = make_topic(partitions=4)
    _one_batch_each(bootstrap_servers, topic, 4)
    reader = _reader(bootstrap_servers, topic)
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        decoded[0] = 0
        assert reader.latest(tps) == dict.fromkeys(tps, RECORDS)
        assert reader._probed == {tp: (RECORDS, RECORDS) for tp in tps}  # it did probe
        assert decoded[0] == 0
    finally:
        reader.close()


def test_on_tansu_the_probe_finds_the_high_watermark_past_a_batch_of_many() -> None:
    """Tansu's own broker (started here, 0.3 s): the listed end falls inside the last
    batch and the probe's fetch from there returns the high watermark."""
    from spark_chkpt.testing.embedded_broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers
        create_topic(bootstrap_servers=servers, name="probe", partitions=2)
        _one_batch_each(servers, "probe", 2)
        reader = _reader(servers, "probe")
        try:
            tps = [TopicPartition("probe", p) for p in range(2)]
            listed = reader.consumer.end_offsets([_ktp(tp) for tp in tps])
            assert sorted(listed.values()) != [RECORDS, RECORDS]  # Tansu lists short
            assert reader.latest(tps) == dict.fromkeys(tps, RECORDS)
        finally:
            reader.close()


def _ktp(tp: TopicPartition) -> Any:
    from kafka import TopicPartition as KafkaTopicPartition

    return KafkaTopicPartition(tp.topic, tp.partition)
