"""chkpt-kafka source against the real broker and a real SparkSession."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from spark_chkpt.kafka.client.topics import create_topic, delete_topic
from tests.helpers import drain_to_files, produce, produce_transactions

# make test's second pass runs this module again, each format on its other client.
pytestmark = [pytest.mark.integration, pytest.mark.other_clients]

KEY_COLUMNS = ["key", "value", "topic", "partition", "offset"]


def source(spark: SparkSession, servers: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("chkpt-kafka").option("kafka.bootstrap.servers", servers)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def batch(spark: SparkSession, servers: str, **options: str) -> DataFrame:
    reader = spark.read.format("chkpt-kafka").option("kafka.bootstrap.servers", servers)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def to_memory(df: DataFrame, checkpoint: Path, **trigger: Any) -> tuple[StreamingQuery, str]:
    name = "q_" + uuid.uuid4().hex[:10]
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )
    return query, name


def drain(df: DataFrame, checkpoint: Path) -> tuple[StreamingQuery, str]:
    query, name = to_memory(df, checkpoint, availableNow=True)
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return query, name


def values(spark: SparkSession, table: str) -> list[str]:
    return sorted(r[0] for r in spark.sql(f"SELECT CAST(value AS STRING) FROM {table}").collect())


def expected(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long"
    )


def test_batch_read_matches_what_was_produced(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    topic = make_topic(partitions=3)
    produce(
        producer, topic, [b"v%d" % i for i in range(30)], partitions=3, key=lambda i: b"k%d" % i
    )
    df = batch(spark, bootstrap_servers, subscribe=topic)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    rows = [(b"k%d" % i, b"v%d" % i, topic, i % 3, i // 3) for i in range(30)]
    assert_df_equality(
        df.select(*KEY_COLUMNS), expected(spark, rows), ignore_row_order=True, ignore_nullable=True
    )
    assert {r[0] for r in df.select("timestampType").distinct().collect()} == {0}


def test_reads_take_one_wave_of_the_sessions_task_slots(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    """local[2] has two task slots: with recordsPerTask=10, four partitions of 40
    records are read by two tasks of two partitions each, every record once; by default
    (5,000 records a task) by one task; partitionsPerTask=1 gives Spark's one per task."""
    topic = make_topic(partitions=4)
    produce(producer, topic, [b"v%d" % i for i in range(40)], partitions=4)
    every = sorted((i % 4, i // 4) for i in range(40))
    for options, tasks in (({"recordsPerTask": "10"}, 2), ({}, 1), ({"partitionsPerTask": "1"}, 4)):
        df = batch(spark, bootstrap_servers, subscribe=topic, **options)
        assert df.rdd.getNumPartitions() == tasks, options
        got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
        assert got == every, options


def test_batch_offsets_json_with_earliest_and_latest(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    topic = make_topic(partitions=2)
    produce(producer, topic, [b"%d" % i for i in range(20)], partitions=2)
    df = batch(
        spark,
        bootstrap_servers,
        subscribe=topic,
        startingOffsets=f'{{"{topic}":{{"0":-2,"1":3}}}}',
        endingOffsets=f'{{"{topic}":{{"0":4,"1":-1}}}}',
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(4)] + [(1, o) for o in range(3, 10)]


def test_headers_are_returned_when_asked(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    topic = make_topic()
    produce(
        producer,
        topic,
        [b"a", b"b"],
        headers=lambda i: [("trace", b"t%d" % i), ("n", b"%d" % i)] if i == 0 else None,
    )
    df = batch(spark, bootstrap_servers, subscribe=topic, includeHeaders="true")
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = {r.offset: r.headers for r in df.collect()}
    assert [(h.key, bytes(h.value)) for h in rows[0]] == [("trace", b"t0"), ("n", b"0")]
    assert rows[1] is None  # no headers: null, as format("kafka") gives it


def test_stream_honours_max_offsets_per_trigger(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=4)
    produce(producer, topic, [b"%d" % i for i in range(1000)], partitions=4)
    df = source(
        spark,
        bootstrap_servers,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="300",
    )
    query, name = drain(df, tmp_path / "chk")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [300, 300, 300, 100]
    assert values(spark, name) == sorted(b"%d".decode() % i for i in range(1000))
    # The offset log holds Spark's Kafka JSON, readable by an operator.
    last = (tmp_path / "chk" / "offsets" / "3").read_text().splitlines()[-1]
    assert json.loads(last) == {topic: {"0": 250, "1": 250, "2": 250, "3": 250}}


def test_available_now_then_restart_reads_only_new_records(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    produce(producer, topic, [b"old%d" % i for i in range(10)], partitions=2)
    df = source(spark, bootstrap_servers, subscribe=topic, startingOffsets="earliest")
    first = drain_to_files(spark, df, tmp_path)
    produce(producer, topic, [b"new%d" % i for i in range(6)], partitions=2)
    second = drain_to_files(spark, df, tmp_path)
    assert first == sorted(f"old{i}" for i in range(10))
    assert second == sorted(f"new{i}" for i in range(6))


@pytest.mark.parametrize("form", ["latest", "json", "timestamp"])
def test_starting_offsets_forms(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
    form: str,
) -> None:
    topic = make_topic(partitions=2)
    produce(producer, topic, [b"before%d" % i for i in range(8)], partitions=2)
    time.sleep(0.05)
    since = int(time.time() * 1000)
    time.sleep(0.05)
    if form == "timestamp":  # records at or after the timestamp, before the query starts
        produce(producer, topic, [b"since%d" % i for i in range(2)], partitions=2)
    options = {
        "latest": {"startingOffsets": "latest"},
        "json": {"startingOffsets": f'{{"{topic}":{{"0":-1,"1":2}}}}'},
        "timestamp": {"startingTimestamp": str(since)},
    }[form]
    df = source(spark, bootstrap_servers, subscribe=topic, **options)
    query, name = to_memory(df, tmp_path / "chk", processingTime="200 milliseconds")
    try:
        query.processAllAvailable()  # initial offsets are fixed before the new records
        produce(producer, topic, [b"after%d" % i for i in range(4)], partitions=2)
        query.processAllAvailable()
    finally:
        query.stop()
    want = sorted(f"after{i}" for i in range(4))
    if form == "json":  # partition 1 from offset 2: before3 (offset 1) skipped, 5 and 7 read
        want = sorted([*want, "before5", "before7"])
    if form == "timestamp":
        want = sorted([*want, "since0", "since1"])
    assert values(spark, name) == want


def test_partitions_appearing_mid_stream_are_read_from_earliest(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    # A new topic matching the subscribed pattern: its partitions are absent from the
    # batch's start offsets (partitions added to a topic with CreatePartitions are
    # tests/kafka/test_real_kafka.py's).
    first = make_topic(partitions=1, suffix="a")
    produce(producer, first, [b"a-%d" % i for i in range(5)])
    pattern = re.escape(first[:-1]) + "[ab]"
    df = source(spark, bootstrap_servers, subscribePattern=pattern, startingOffsets="latest")
    query, name = to_memory(df, tmp_path / "chk", processingTime="200 milliseconds")
    try:
        query.processAllAvailable()
        produce(producer, first, [b"a-late"])
        second = make_topic(partitions=2, suffix="b")
        produce(producer, second, [b"b-%d" % i for i in range(6)], partitions=2)
        deadline = time.monotonic() + 60
        while spark.table(name).count() < 7 and time.monotonic() < deadline:
            query.processAllAvailable()
            time.sleep(0.2)
    finally:
        query.stop()
    got = spark.sql(f"SELECT topic, partition, CAST(value AS STRING) v FROM {name}").collect()
    # "latest" applies to what existed at the start; the new topic is read from earliest.
    assert sorted(r.v for r in got) == sorted(["a-late"] + [f"b-{i}" for i in range(6)])
    assert {(r.topic, r.partition) for r in got} == {(first, 0), (second, 0), (second, 1)}


def test_subscribe_pattern_and_assign(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    first = make_topic(partitions=2, suffix="x1")
    second = make_topic(partitions=1, suffix="x2")
    produce(producer, first, [b"a", b"b"], partitions=2)
    produce(producer, second, [b"c"])
    prefix = first[: -len("x1")]
    got = batch(spark, bootstrap_servers, subscribePattern=prefix.replace("-", "\\-") + "x.")
    assert sorted(values(spark, _view(got))) == ["a", "b", "c"]
    got = batch(spark, bootstrap_servers, assign=f'{{"{first}":[1]}}')
    assert values(spark, _view(got)) == ["b"]


def _view(df: DataFrame) -> str:
    name = "v_" + uuid.uuid4().hex[:8]
    df.createOrReplaceTempView(name)
    return name


def test_transaction_markers_leave_gaps_that_are_read_past(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic()
    produce_transactions(bootstrap_servers, topic, batches=3, size=3)
    df = source(
        spark,
        bootstrap_servers,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="4",
    )
    _, name = drain(df, tmp_path / "chk")
    rows = spark.sql(f"SELECT offset, CAST(value AS STRING) v FROM {name}").collect()
    assert sorted(r.v for r in rows) == sorted(f"t{b}-{i}" for b in range(3) for i in range(3))
    assert len({r.offset for r in rows}) == 9
    assert max(r.offset for r in rows) > 9  # the markers took offsets: not contiguous


def test_consumer_group_offsets_are_committed(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = make_topic(partitions=2)
    produce(producer, topic, [b"%d" % i for i in range(10)], partitions=2)
    group = f"lag-{uuid.uuid4().hex[:6]}"
    df = source(
        spark,
        bootstrap_servers,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="4",
        **{"kafka.group.id": group},
    )
    query, _ = drain(df, tmp_path / "chk")
    ends = [
        json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress if p["numInputRows"]
    ]
    watcher = KafkaConsumer(
        bootstrap_servers=bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    try:
        committed = {p: watcher.committed(TopicPartition(topic, p)) for p in (0, 1)}
    finally:
        watcher.close()
    # Spark tells a source that batch N is done only when it plans batch N+1, which
    # left the group one batch behind (the end of the second of three batches) for as
    # long as no record came (issue 51). The source commits the group where the last
    # completed batch ended when Spark next asks for the latest offsets: the topic's end.
    assert len(ends) == 3
    assert committed == {int(p): off for p, off in ends[2][topic].items()} == {0: 5, 1: 5}


def test_recreated_topic_fails_with_data_loss(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"%d" % i for i in range(10)])
    df = source(
        spark,
        bootstrap_servers,
        subscribe=topic,
        startingOffsets="earliest",
    )
    assert len(drain_to_files(spark, df, tmp_path)) == 10
    delete_topic(bootstrap_servers=bootstrap_servers, name=topic)
    create_topic(bootstrap_servers=bootstrap_servers, name=topic, partitions=1)
    produce(producer, topic, [b"again%d" % i for i in range(3)])
    with pytest.raises(Exception, match=rf"(?s){topic}-0.*ends at 3.*failOnDataLoss"):
        drain_to_files(spark, df, tmp_path)


def test_recreated_topic_goes_on_without_fail_on_data_loss(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"%d" % i for i in range(10)])
    df = source(
        spark,
        bootstrap_servers,
        subscribe=topic,
        startingOffsets="earliest",
        failOnDataLoss="false",
    )
    assert len(drain_to_files(spark, df, tmp_path)) == 10
    delete_topic(bootstrap_servers=bootstrap_servers, name=topic)
    create_topic(bootstrap_servers=bootstrap_servers, name=topic, partitions=1)
    produce(producer, topic, [b"again%d" % i for i in range(3)])
    recreated = drain_to_files(spark, df, tmp_path)  # offsets went back: warn, read earliest
    produce(producer, topic, [b"later%d" % i for i in range(2)])
    assert recreated == ["again0", "again1", "again2"]
    assert drain_to_files(spark, df, tmp_path) == ["later0", "later1"]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"maxOffsetsPerTrigger": "lots"}, "maxOffsetsPerTrigger"),
        ({"kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
        ({"startingOffsets": "{bad json"}, "startingOffsets"),
    ],
)
def test_bad_options_fail_at_load_naming_the_option(
    spark: SparkSession, bootstrap_servers: str, options: dict[str, str], named: str
) -> None:
    with pytest.raises(Exception, match=named):
        source(spark, bootstrap_servers, subscribe="whatever", **options)
