"""A partition added to a topic with barriers (issue 24, hole 3) on a real broker: the
Kafka sink's real coordinator (its barrier producer cached in this process) and the
source's planner and read tasks, no Spark.

Needs Apache Kafka: the topic grows through CreatePartitions (kafka-python's admin
``create_partitions``), which the embedded Tansu broker does not implement. On a broker
without it this test fails (it does not skip) with a message saying so; CI runs it on
Kafka.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_chkpt.alignment.barrier import ATTEMPT_HEADER
from spark_chkpt.kafka.client.topics import add_partitions, partition_count
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.kafka.sink.committer import KafkaCoordinator
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.source.fetcher import read_task
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.planner import SourcePlanner

pytestmark = pytest.mark.integration


def _write_task(
    bootstrap_servers: str, topic: str, batch_id: int, partitions: int, first: int
) -> tuple[ProducedOutput, int]:
    """One write task attempt with a fresh producer (as each Spark task has): 10 tagged
    records into each partition; what it acknowledged, and the next id."""
    from kafka import KafkaProducer

    attempt = f"t{batch_id}-0"
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers.split(","))
    counts: dict[int, int] = {}
    try:
        for p in range(partitions):
            for _ in range(10):
                producer.send(
                    topic,
                    value=str(first).encode(),
                    partition=p,
                    headers=[(ATTEMPT_HEADER, attempt.encode())],
                )
                first += 1
            counts[p] = 10
        producer.flush()
    finally:
        producer.close()
    output = ProducedOutput(attempt=attempt, batch_id=batch_id, task=0, counts={topic: counts})
    return output, first


def _commit(
    bootstrap_servers: str, topic: str, checkpoint: Path, batch_id: int, output: ProducedOutput
) -> None:
    """Phase 2 of the sink for ``batch_id``, as Spark's driver runs it (Spark's
    ``offsets/<batch_id>`` written first)."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})]
    lines.append(json.dumps({"in": {"0": 100 * (batch_id + 1)}}))
    (checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines) + "\n")
    config = KafkaSinkConfig(
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        control_topic=None,
        checkpoint_location=str(checkpoint),
        query_name=None,
        txn_app_id=f"up-{topic}",
        retained_snapshots=10,
        producer_settings={},
    )
    KafkaCoordinator(config=config, snapshot=config.snapshot_settings()).commit(
        messages=[output], batch_id=batch_id
    )


def _read_all(bootstrap_servers: str, topic: str, alignment: str) -> list[int]:
    """A fresh downstream query: batches from the earliest offset until one is empty."""
    config = SourceConfig.from_options(
        {
            "kafka.bootstrap.servers": bootstrap_servers,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "alignment": alignment,
        }
    )
    planner = SourcePlanner(config=config)
    ids: list[int] = []
    try:
        start = planner.initial_offsets()
        for _ in range(5):
            end = planner.latest_offset(start, max_rows=None, read_all=False)
            if end == start:
                break
            for specs in planner.read_tasks(start, end):
                for batch in read_task(config=config, specs=specs, client_id="down"):
                    values = pa.Table.from_batches([batch])["value"].to_pylist()
                    ids += [int(bytes(v)) for v in values]
            start = end
        return sorted(ids)
    finally:
        planner.stop()


def _grow(bootstrap_servers: str, topic: str, total: int) -> None:
    try:
        add_partitions(bootstrap_servers=bootstrap_servers, name=topic, total=total)
    except Exception as e:
        pytest.fail(
            f"this test needs a broker with CreatePartitions (Apache Kafka); the broker at "
            f"{bootstrap_servers} answered {type(e).__name__}: {e}. The embedded Tansu "
            "broker has no CreatePartitions: run with KAFKA_BOOTSTRAP_SERVERS set to a "
            "Kafka broker.",
            pytrace=False,
        )


@pytest.mark.parametrize("alignment", ["aligned", "unaligned"])
def test_records_in_a_partition_added_between_snapshots_are_read_once(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path, alignment: str
) -> None:
    topic = make_topic(partitions=2)
    checkpoint = tmp_path / "up"
    output, next_id = _write_task(bootstrap_servers, topic, 0, 2, 0)
    _commit(bootstrap_servers, topic, checkpoint, 0, output)  # caches the barrier producer

    _grow(bootstrap_servers, topic, 3)
    assert partition_count(bootstrap_servers=bootstrap_servers, name=topic) == 3
    for batch_id in (1, 2):
        output, next_id = _write_task(bootstrap_servers, topic, batch_id, 3, next_id)
        _commit(bootstrap_servers, topic, checkpoint, batch_id, output)

    read: Any = _read_all(bootstrap_servers, topic, alignment)
    assert next_id == 80
    missing = sorted(set(range(next_id)) - set(read))
    assert not missing, f"{len(missing)} of {next_id} records not read: {missing}"
    assert read == list(range(next_id))  # once each


def _produce_ids(bootstrap_servers: str, topic: str, ids: range, partitions: int) -> None:
    """Records ``ids`` spread round-robin over the first ``partitions`` partitions, from a
    new producer (one that knew the topic before it grew would not see the new ones)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap_servers.split(","), linger_ms=5)
    try:
        for i in ids:
            producer.send(topic, value=str(i).encode(), partition=i % partitions)
        producer.flush()
    finally:
        producer.close()


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
@pytest.mark.parametrize("when", ["between-batches", "during-a-batch"])
def test_a_pooled_consumer_that_read_the_topic_before_it_grew_reads_the_new_partitions(
    bootstrap_servers: str, make_topic: Callable[..., str], client: str, when: str
) -> None:
    """Issue 35, the user's schedule: the read task's pooled consumer read the topic's two
    partitions in batch 1; the topic grows to six while records go on arriving, between
    two batches (batch 2 is planned after the growth) or during one (batch 2 is planned
    before it and read after; batch 3 finds the new partitions, records written before
    the query noticed them included). One task reads old and new partitions together.
    kafka-python's cached metadata knew two partitions: ListOffsets left the new ones out
    and the task died with ``KeyError: TopicPartition(..., partition=2)``. A task given only
    new partitions (the old partition-growth test's grouping) never showed it.
    kafka-python's consumer refreshes and reads on; librdkafka's is retired by the pool."""
    from spark_chkpt.kafka.client.pool import POOL

    topic = make_topic(partitions=2)
    _produce_ids(bootstrap_servers, topic, range(0, 20), 2)
    config = SourceConfig.from_options(
        {
            "kafka.bootstrap.servers": bootstrap_servers,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "kafka.client": client,
            "partitionsPerTask": "6",  # one task reads every partition, old and new
        }
    )
    planner = SourcePlanner(config=config)
    ids: list[int] = []

    def plan(start: Any) -> tuple[Any, list[Any]]:
        end = planner.latest_offset(start, max_rows=None, read_all=False)
        tasks = planner.read_tasks(start, end)
        assert len(tasks) == 1
        return end, tasks[0]

    def read(specs: list[Any]) -> None:
        for b in read_task(config=config, specs=specs, client_id="grow"):
            ids.extend(int(bytes(v)) for v in pa.Table.from_batches([b])["value"].to_pylist())

    try:
        end, specs = plan(planner.initial_offsets())
        read(specs)
        assert sorted(ids) == list(range(20))
        _produce_ids(bootstrap_servers, topic, range(20, 30), 2)
        created, retired = POOL.created, POOL.retired
        if when == "during-a-batch":
            end, specs = plan(end)  # batch 2 planned on two partitions
        _grow(bootstrap_servers, topic, 6)
        _produce_ids(bootstrap_servers, topic, range(30, 90), 6)
        if when == "between-batches":
            end, specs = plan(end)  # batch 2 planned on six partitions
        read(specs)
        if when == "during-a-batch":
            assert sorted(ids) == list(range(30))
            end, specs = plan(end)  # batch 3: the new partitions from their first offset
            read(specs)
        if client == "kafka-python":  # the consumer that read before the growth reads on
            assert POOL.created == created, "the task did not reuse the pooled consumer"
        else:  # librdkafka's metadata is not trusted to follow: a new consumer
            assert POOL.retired > retired, "the stale librdkafka consumer was not retired"
    finally:
        planner.stop()
    assert sorted(ids) == list(range(90)), sorted(set(range(90)) - set(ids))


def test_a_control_topic_that_grew_still_indexes_every_snapshot(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The control topic is read and written on partition 0 only (its entries' order is
    the index): a user who grows it (or a tool that grows every topic) changes nothing,
    for the sink's cached index and the reader alike."""
    from spark_chkpt.alignment.barrier import control_topic_for

    topic = make_topic(partitions=2)
    checkpoint = tmp_path / "up"
    output, next_id = _write_task(bootstrap_servers, topic, 0, 2, 0)
    _commit(bootstrap_servers, topic, checkpoint, 0, output)  # caches the index
    _grow(bootstrap_servers, control_topic_for(topic), 3)
    for batch_id in (1, 2):
        output, next_id = _write_task(bootstrap_servers, topic, batch_id, 2, next_id)
        _commit(bootstrap_servers, topic, checkpoint, batch_id, output)
    assert _read_all(bootstrap_servers, topic, "aligned") == list(range(next_id))
