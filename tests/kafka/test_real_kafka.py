"""What only a real Kafka broker does, against chkpt-kafka: partitions added to a topic
(CreatePartitions) under a running query, records deleted under a query (DeleteRecords,
as retention does), the control topic's settings, and read_committed under an open
transaction. Tansu has none of these (no CreatePartitions, no transaction isolation), so
the module runs on the session's Kafka broker only."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.kafka.client.topics import create_topic, topic_configs
from tests.helpers import BROKER_ENV, drain_to_files, kafka_stream, produce
from tests.kafka.source.test_kafka_source import batch

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get(BROKER_ENV) == "tansu",
        reason="Tansu has no CreatePartitions, DeleteRecords or transaction isolation",
    ),
]


def _delete_records(servers: str, topic: str, before: int) -> None:
    """Move partition 0's log start to ``before``, as retention deleting old segments does."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition

    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.delete_records({KafkaTopicPartition(topic, 0): before})
    finally:
        admin.close()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_records_deleted_before_the_query_read_them(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
    fail_on_data_loss: str,
) -> None:
    """The query read offsets 0-9 and stopped; 10-19 arrive and retention deletes up to
    15 before it runs again. failOnDataLoss=true fails naming the partition and the lost
    offsets; false reads on from 15, the new log start."""
    topic = make_topic()
    produce(producer, topic, [b"a%d" % i for i in range(10)])
    df = kafka_stream(spark, bootstrap_servers, topic, failOnDataLoss=fail_on_data_loss)
    assert len(drain_to_files(spark, df, tmp_path)) == 10
    produce(producer, topic, [b"b%d" % i for i in range(10)])
    _delete_records(bootstrap_servers, topic, 15)
    if fail_on_data_loss == "true":
        with pytest.raises(Exception, match=rf"(?s){topic}-0.*failOnDataLoss"):
            drain_to_files(spark, df, tmp_path)
    else:
        assert drain_to_files(spark, df, tmp_path) == [f"b{i}" for i in range(5, 10)]
        produce(producer, topic, [b"c0"])
        assert drain_to_files(spark, df, tmp_path) == ["c0"]


def test_a_batch_read_from_earliest_starts_at_the_log_start(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"%d" % i for i in range(10)])
    _delete_records(bootstrap_servers, topic, 4)
    got = batch(spark, bootstrap_servers, subscribe=topic).select("offset").collect()
    assert sorted(r.offset for r in got) == list(range(4, 10))


def _sink(df: Any, servers: str, topic: str, checkpoint: Path) -> Any:
    return (
        df.select("value")
        .writeStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", topic)
        .option("txnAppId", f"app-{uuid.uuid4().hex[:6]}")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_the_control_topic_keeps_every_entry_and_a_lossy_one_is_refused(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    source, out = make_topic(suffix="in"), make_topic(suffix="out")
    produce(producer, source, [b"%d" % i for i in range(5)])
    query = _sink(kafka_stream(spark, bootstrap_servers, source), bootstrap_servers, out, tmp_path)
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    control = control_topic_for(out)
    keys = ["cleanup.policy", "retention.ms", "retention.bytes"]
    configs = topic_configs(bootstrap_servers=bootstrap_servers, names=[control], keys=keys)
    assert configs == {
        control: {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
    }

    # A control topic someone created compacted (or with a short retention) would lose
    # index entries: the sink refuses it before writing anything.
    compacted = make_topic(suffix="compacted")
    create_topic(
        bootstrap_servers=bootstrap_servers,
        name=control_topic_for(compacted),
        partitions=1,
        config={"cleanup.policy": "compact"},
    )
    query = _sink(
        kafka_stream(spark, bootstrap_servers, source), bootstrap_servers, compacted, tmp_path / "c"
    )
    with pytest.raises(Exception, match=rf"__chkpt\.{compacted}.*cleanup\.policy=compact"):
        query.awaitTermination(120)
    short = make_topic(suffix="short")
    create_topic(
        bootstrap_servers=bootstrap_servers,
        name=control_topic_for(short),
        partitions=1,
        config={"retention.ms": "60000"},
    )
    query = _sink(
        kafka_stream(spark, bootstrap_servers, source), bootstrap_servers, short, tmp_path / "s"
    )
    with pytest.raises(Exception, match=rf"__chkpt\.{short}.*retention\.ms=60000"):
        query.awaitTermination(120)


def test_read_committed_stops_at_an_open_transaction(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    """Kafka answers ListOffsets(latest) under read_committed with the last stable
    offset: a batch read ends before an open transaction's records instead of waiting
    for them; read_uncommitted reads them."""
    from kafka import KafkaProducer

    topic = make_topic()
    produce(producer, topic, [b"c%d" % i for i in range(3)])
    tx = KafkaProducer(
        bootstrap_servers=bootstrap_servers, transactional_id=f"open-{uuid.uuid4().hex[:6]}"
    )
    try:
        tx.init_transactions()
        tx.begin_transaction()
        for i in range(3):
            tx.send(topic, value=b"open%d" % i, partition=0)
        tx.flush()
        produce(producer, topic, [b"late"])  # after the open transaction's records
        committed = batch(
            spark, bootstrap_servers, subscribe=topic, **{"kafka.isolation.level": "read_committed"}
        )
        started = time.monotonic()
        assert sorted(r[0] for r in committed.selectExpr("CAST(value AS STRING)").collect()) == [
            "c0",
            "c1",
            "c2",
        ]
        assert time.monotonic() - started < 30
        everything = batch(spark, bootstrap_servers, subscribe=topic)
        got = sorted(r[0] for r in everything.selectExpr("CAST(value AS STRING)").collect())
        assert got == ["c0", "c1", "c2", "late", "open0", "open1", "open2"]
    finally:
        tx.abort_transaction()
        tx.close()
