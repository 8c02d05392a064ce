"""The sink's two producers against the real broker (no Spark here): librdkafka's must
write what kafka-python's writes, record for record, and count the same."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_chkpt.alignment.barrier import ATTEMPT_HEADER
from spark_chkpt.errors import ChkptError
from spark_chkpt.kafka.client.consumer import CLIENTS
from spark_chkpt.kafka.client.topics import topic_names
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.sink.writer import build_producer

pytestmark = pytest.mark.integration

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _read_all(servers: str, topic: str, partitions: int) -> list[Any]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    tps = [KTP(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(tps)
    records: list[Any] = []
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        for batch in consumer.poll(timeout_ms=1000).values():
            records += batch
    consumer.close()
    return records


def test_librdkafka_writes_what_kafka_python_writes(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Keys (murmur2: the same partition for the same key), string and binary values, a
    partition column with nulls, forwarded headers (an upstream tag dropped, the user's
    kept), one tag per record, and the acknowledged counts per partition. A 'topic'
    column naming a new topic gets its control topic before the first record."""
    n = 300
    batch = pa.record_batch(
        {
            "key": pa.array([None if i % 7 == 0 else f"app{i % 5}" for i in range(n)]),
            "value": pa.array([f"v-{i}" for i in range(n)]),
            "partition": pa.array([2 if i % 10 == 0 else None for i in range(n)], pa.int32()),
            "headers": pa.array(
                [
                    [{"key": "trace", "value": b"t%d" % i}, {"key": ATTEMPT_HEADER, "value": b"up"}]
                    if i % 3 == 0
                    else None
                    for i in range(n)
                ],
                HEADERS,
            ),
        }
    )
    seen: dict[str, list[tuple[Any, ...]]] = {}
    for client in CLIENTS:
        topic = make_topic(partitions=3, suffix=client)
        config = KafkaSinkConfig.from_options(
            {
                "kafka.bootstrap.servers": bootstrap_servers,
                "checkpointLocation": str(tmp_path / client),
                "kafka.client": client,
            }
        )
        producer = build_producer(config=config, batch_id=3, task=1)
        producer.send(batch.append_column("topic", pa.array([topic] * n)))
        output = producer.finish()
        assert f"__chkpt.{topic}" in topic_names(bootstrap_servers=bootstrap_servers)
        records = _read_all(bootstrap_servers, topic, 3)
        assert len(records) == n and output.rows == n and (output.batch_id, output.task) == (3, 1)
        # A partition that got no record has no count: null keys may all land on one
        # partition (librdkafka's sticky partitioner), so which ones are empty is random.
        per_partition = {p: sum(r.partition == p for r in records) for p in range(3)}
        assert output.counts == {topic: {p: c for p, c in per_partition.items() if c}}, client
        tags = [[v for k, v in r.headers if k == ATTEMPT_HEADER] for r in records]
        assert all(t == [output.attempt.encode()] for t in tags), (client, tags[:3])
        seen[client] = sorted(
            (
                r.value,
                r.key,
                r.partition,
                tuple((k, v) for k, v in r.headers if k != ATTEMPT_HEADER),
            )
            for r in records
        )
    # Null keys go to a random partition with either client: compare them without it.
    rows = {c: [(v, k, p if k else None, h) for v, k, p, h in s] for c, s in seen.items()}
    assert rows["confluent"] == rows["kafka-python"]
    assert (b"v-70", None, 2, ()) in seen["confluent"]  # the partition column wins
    (v3,) = [r for r in seen["confluent"] if r[0] == b"v-3"]
    assert (v3[1], v3[3]) == (b"app3", (("trace", b"t3"),))  # the upstream tag dropped


@pytest.mark.parametrize("client", CLIENTS)
def test_bad_rows_fail_naming_the_problem(
    bootstrap_servers: str, tmp_path: Path, client: str
) -> None:
    config = KafkaSinkConfig.from_options(
        {
            "kafka.bootstrap.servers": bootstrap_servers,
            "checkpointLocation": str(tmp_path),
            "kafka.client": client,
        }
    )
    producer = build_producer(config=config, batch_id=0, task=0)
    with pytest.raises(ChkptError, match="row 1 of the batch has a null topic"):
        producer.send(pa.record_batch({"value": [b"a", b"b"], "topic": ["t", None]}))
    with pytest.raises(ChkptError, match="no 'value' column"):
        producer.send(pa.record_batch({"key": [b"a"]}))
    producer.close()


def test_a_missing_topic_is_refused_naming_it_before_any_task_waits(
    bootstrap_servers: str, tmp_path: Path, spark: Any
) -> None:
    """The embedded broker does not create topics on demand: the sink's first batch fails
    at once with the topic named, not after kafka.max.block.ms as a broker outage."""
    import time

    from pyspark.errors import StreamingQueryException

    import spark_chkpt

    spark_chkpt.register(spark)
    missing = f"no-such-topic-{tmp_path.name}"
    started = time.monotonic()
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 10)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", missing)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    with pytest.raises(StreamingQueryException) as raised:
        query.awaitTermination(120)
    assert f"option 'topic' = '{missing}'" in str(raised.value)
    assert "does not exist" in str(raised.value)
    assert time.monotonic() - started < 55  # kafka.max.block.ms is 60 s
    assert missing not in topic_names(bootstrap_servers=bootstrap_servers)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_a_topic_deleted_under_the_query_fails_the_task_naming_the_option(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path, client: str
) -> None:
    """The driver checks the output topic once per process (it remembers finding it),
    so a topic deleted under a running query, on a broker that does not create topics,
    is met by the write tasks. They fail with one error naming option 'topic' and the
    topic; on the old code librdkafka said "Message timed out" and kafka-python
    "Failed to update metadata", which the sink reports as a broker outage."""
    from spark_chkpt.errors import ConfigError
    from spark_chkpt.kafka.client.topics import delete_topic, partition_count
    from spark_chkpt.kafka.sink.options import KafkaSinkConfig
    from spark_chkpt.kafka.sink.writer import build_producer, produce_all

    topic = make_topic(partitions=2)
    config = KafkaSinkConfig.from_options(
        {
            "kafka.bootstrap.servers": bootstrap_servers,
            "topic": topic,
            "checkpointLocation": str(tmp_path),
            "kafka.client": client,
            "kafka.max.block.ms": "5000",
            "kafka.request.timeout.ms": "3000",
            "kafka.delivery.timeout.ms": "5000",
        }
    )
    batch = pa.record_batch({"value": pa.array([b"x"] * 5)})
    written = produce_all(build_producer(config=config, batch_id=0, task=0), iter([batch]))
    assert written.rows == 5
    delete_topic(bootstrap_servers=bootstrap_servers, name=topic)
    while partition_count(bootstrap_servers=bootstrap_servers, name=topic):
        pass
    with pytest.raises(ConfigError) as raised:
        produce_all(build_producer(config=config, batch_id=1, task=0), iter([batch]))
    assert raised.value.option == "topic" and raised.value.value == topic
    assert "does not exist" in str(raised.value) and "deleted while the query ran" in str(
        raised.value
    )
