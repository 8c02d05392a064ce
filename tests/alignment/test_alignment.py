"""Aligned, unaligned, at-least-once and plain reads of a topic that carries barrier markers, the
alignment timeout, a snapshot larger than the read limit, grouped read tasks, and
corrupt markers. The upstream is staged record by record with tests.helpers.Upstream."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_chkpt.alignment.barrier import ATTEMPT_HEADER, BARRIER_HEADER
from spark_chkpt.metrics.reporter import SnapshotReporter
from tests.helpers import Upstream, drain_to_files, kafka_stream, produce

# make test's second pass runs this module again, each format on its other client.
pytestmark = [pytest.mark.integration, pytest.mark.other_clients]

T0 = [b"t0-%d" % i for i in range(6)]  # snapshot 0, confirmed by barrier 0
TX = [b"tx-%d" % i for i in range(3)]  # a failed attempt: no barrier names it
T1 = [b"t1-%d" % i for i in range(3)]  # snapshot 1, in flight until barrier 1


def names(values: list[bytes]) -> list[str]:
    return sorted(v.decode() for v in values)


def reports(checkpoint: Path) -> list[dict[str, Any]]:
    """The alignment report Spark logged with each batch's end offset."""
    logged = sorted(
        (p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    return [json.loads(p.read_text().splitlines()[-1])["__chkpt__"]["topics"] for p in logged]


def last_report(checkpoint: Path) -> dict[str, Any]:
    return reports(checkpoint)[-1]


@pytest.fixture
def upstream(bootstrap_servers: str, make_topic: Callable[..., str], producer: Any) -> Upstream:
    topic = make_topic(partitions=3)
    return Upstream(producer, servers=bootstrap_servers, topic=topic, partitions=3)


def test_aligned_cuts_at_the_barrier_and_drops_unconfirmed(
    spark: SparkSession, bootstrap_servers: str, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.records("T0", T0)
    upstream.barrier(0, ["T0"])
    upstream.records("TX", TX)
    upstream.records("T1", T1)
    reporter = SnapshotReporter.attach(spark)
    try:
        df = kafka_stream(spark, bootstrap_servers, upstream.topic)
        assert drain_to_files(spark, df, tmp_path) == names(T0)  # T1 waits for its barrier
        report = last_report(tmp_path / "chk")[upstream.topic]
        assert report["mode"] == "aligned" and report["snapshots"] == [0]
        assert report["app"] == "upstream-app" and report["barriers"] == 3
        upstream.barrier(1, ["T1"])
        assert drain_to_files(spark, df, tmp_path) == names(T1)  # TX dropped: unconfirmed
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            seen = [
                r
                for runs in reporter.alignment.values()
                for r in runs
                if r["topic"] == upstream.topic
            ]
            if len(seen) >= 2:
                break
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(reporter)
    assert [(r["snapshots"], r["dropped"]) for r in seen] == [([0], 0), ([1], len(TX))]


@pytest.mark.parametrize(
    ("options", "files"),
    [
        ({}, 1),  # the default: a batch of a few records is one read task of 3 partitions
        ({"minPartitions": "6"}, 6),  # each partition's range split over two tasks
    ],
    ids=["grouped", "split"],
)
def test_grouped_and_split_read_tasks_align_every_partition_once(
    spark: SparkSession,
    bootstrap_servers: str,
    upstream: Upstream,
    tmp_path: Path,
    options: dict[str, str],
    files: int,
) -> None:
    upstream.records("T0", T0)
    upstream.barrier(0, ["T0"])
    upstream.records("TX", TX)
    upstream.records("T1", T1)
    upstream.barrier(1, ["T1"])
    df = kafka_stream(spark, bootstrap_servers, upstream.topic, **options)
    # every confirmed record once, the failed attempt's dropped, in one batch
    assert drain_to_files(spark, df, tmp_path) == names(T0 + T1)
    assert last_report(tmp_path / "chk")[upstream.topic]["snapshots"] == [0, 1]
    written = list((tmp_path / "out").glob("part-*.parquet"))
    assert len(written) <= files and (len(written) == 1) == (files == 1), written


def test_at_least_once_reads_in_flight_records_but_drops_failed_attempts(
    spark: SparkSession, bootstrap_servers: str, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.records("T0", T0)
    upstream.records("TX", TX)
    upstream.barrier(0, ["T0"])
    upstream.records("T1", T1)
    df = kafka_stream(spark, bootstrap_servers, upstream.topic, alignment="at-least-once")
    assert drain_to_files(spark, df, tmp_path) == names(T0 + T1)
    assert last_report(tmp_path / "chk")[upstream.topic]["mode"] == "at-least-once"


@pytest.mark.parametrize(
    ("mode", "first"),
    [("unaligned", T0), ("aligned", T0), ("at-least-once", T0 + TX + T1)],
)
def test_a_failed_attempt_after_the_last_barrier_is_read_only_at_least_once(
    spark: SparkSession,
    bootstrap_servers: str,
    upstream: Upstream,
    tmp_path: Path,
    mode: str,
    first: list[bytes],
) -> None:
    """Upstream's attempt TX of snapshot 1 fails after barrier 0, and its replay T1
    commits. unaligned and aligned never read TX; at-least-once reads it (and T1 twice
    would follow an upstream replay): that is what the mode's name says."""
    upstream.records("T0", T0)
    upstream.barrier(0, ["T0"])
    upstream.records("TX", TX)
    upstream.records("T1", T1)
    df = kafka_stream(spark, bootstrap_servers, upstream.topic, alignment=mode)
    assert drain_to_files(spark, df, tmp_path) == names(first)
    upstream.barrier(1, ["T1"])
    rest = drain_to_files(spark, df, tmp_path)
    assert rest == ([] if mode == "at-least-once" else names(T1))


def test_none_reads_everything_but_barriers(
    spark: SparkSession, bootstrap_servers: str, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.records("T0", T0)
    upstream.records("TX", TX)
    upstream.barrier(0, ["T0"])
    upstream.records("T1", T1)
    upstream.records(None, [b"plain"])  # an ordinary producer on the same topic
    df = kafka_stream(spark, bootstrap_servers, upstream.topic, alignment="none")
    assert drain_to_files(spark, df, tmp_path) == names(T0 + TX + T1 + [b"plain"])


def test_untagged_records_pass_through_aligned_reads(
    spark: SparkSession, bootstrap_servers: str, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.records(None, [b"plain-a", b"plain-b"])
    upstream.records("T0", T0)
    upstream.barrier(0, ["T0"])
    df = kafka_stream(spark, bootstrap_servers, upstream.topic)
    assert drain_to_files(spark, df, tmp_path) == names([*T0, b"plain-a", b"plain-b"])


def test_a_snapshot_larger_than_the_limit_is_read_whole(
    spark: SparkSession, bootstrap_servers: str, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.records("T0", T0)
    upstream.barrier(0, ["T0"])
    upstream.records("T1", T1)
    upstream.barrier(1, ["T1"])
    df = kafka_stream(spark, bootstrap_servers, upstream.topic, maxOffsetsPerTrigger="2")
    assert drain_to_files(spark, df, tmp_path) == names(T0 + T1)
    logged = [r[upstream.topic] for r in reports(tmp_path / "chk")]
    assert [r["snapshots"] for r in logged] == [[0], [1]]  # one snapshot per batch
    assert "read whole" in logged[0]["note"]


def test_alignment_timeout_falls_back_to_unaligned_never_to_at_least_once(
    spark: SparkSession, bootstrap_servers: str, upstream: Upstream, tmp_path: Path
) -> None:
    """Snapshot 1's barrier is late on partition 2. After alignmentTimeout the batch reads
    partitions 0 and 1 up to barrier 1 and partition 2 up to barrier 0, never an
    unconfirmed record; when the late barrier lands, partition 2's rest follows and the
    cut is consistent again. Every record exactly once."""
    upstream.records("T0", T0)
    upstream.barrier(0, ["T0"])
    df = kafka_stream(spark, bootstrap_servers, upstream.topic, alignmentTimeout="1500ms")
    name = "aligned_timeout"
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def seen() -> list[str]:
        return sorted(
            r[0] for r in spark.sql(f"SELECT CAST(value AS STRING) FROM {name}").collect()
        )

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 30
        while spark.table(name).count() < n and time.monotonic() < deadline:
            time.sleep(0.3)

    try:
        query.processAllAvailable()
        upstream.records("T1", T1)  # one record per partition
        upstream.records("TX", TX[:1])  # a failed attempt, partition 0, never confirmed
        upstream.barrier(1, ["T1"], partitions=[0, 1])
        time.sleep(0.6)
        query.processAllAvailable()
        assert seen() == names(T0)  # still aligned: waiting for barrier 1 on partition 2
        wait_for(len(T0) + 2)
        assert seen() == names(T0 + T1[:2])  # unaligned: partitions 0 and 1 only
        timed_out = last_report(tmp_path / "chk")[upstream.topic]
        upstream.late_barrier(1, ["T1"], partition=2)
        wait_for(len(T0 + T1))
        query.processAllAvailable()
    finally:
        query.stop()
    assert seen() == names(T0 + T1)
    assert timed_out["mode"] == "unaligned" and timed_out["waited_ms"] >= 1500
    assert "alignment timeout" in timed_out["note"]
    assert timed_out["reached"] == {"0": 1, "1": 1, "2": 0}
    final = last_report(tmp_path / "chk")[upstream.topic]
    assert final["mode"] == "aligned" and final["snapshots"] == [1]


def test_corrupt_barrier_names_topic_partition_and_offset(
    spark: SparkSession, bootstrap_servers: str, upstream: Upstream, producer: Any, tmp_path: Path
) -> None:
    upstream.records("T0", T0[:3])
    producer.send(upstream.topic, value=b"{broken", partition=1, headers=[(BARRIER_HEADER, b"1")])
    producer.flush()
    upstream.barrier(0, ["T0"])
    df = kafka_stream(spark, bootstrap_servers, upstream.topic)
    with pytest.raises(Exception, match=rf"corrupt barrier record at {upstream.topic}-1 offset 1"):
        drain_to_files(spark, df, tmp_path)


def _to_kafka(df: Any, servers: str, topic: str, checkpoint: Path) -> None:
    """Run an availableNow query from ``df`` into ``chkpt-kafka`` topic ``topic``."""
    query = (
        df.writeStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", topic)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()


def test_headers_forwarded_by_a_middle_stage_keep_every_record(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    """Kafka → A → Kafka → B → Kafka → C: stage B reads with includeHeaders=true and
    writes the headers on, as a pass-through job would. B's output must carry B's own
    attempt tag, not A's, or C's aligned read drops every record as unconfirmed."""
    plain, middle, final = (make_topic(partitions=2, suffix=s) for s in ("in", "mid", "out"))
    values = [b"h-%d" % i for i in range(20)]
    produce(producer, plain, values, partitions=2, headers=lambda i: [("trace", b"t%d" % i)])
    _to_kafka(
        kafka_stream(spark, bootstrap_servers, plain, includeHeaders="true").select(
            "key", "value", "headers"
        ),
        bootstrap_servers,
        middle,
        tmp_path / "a",
    )
    _to_kafka(
        kafka_stream(spark, bootstrap_servers, middle, includeHeaders="true").select(
            "key", "value", "headers"
        ),
        bootstrap_servers,
        final,
        tmp_path / "b",
    )
    assert drain_to_files(spark, kafka_stream(spark, bootstrap_servers, final), tmp_path) == (
        names(values)
    )
    # The user's header travels on; each record carries exactly one attempt tag.
    rows = (
        kafka_stream(spark, bootstrap_servers, final, includeHeaders="true")
        .writeStream.format("memory")
        .queryName("forwarded_headers")
        .option("checkpointLocation", str(tmp_path / "c2"))
        .trigger(availableNow=True)
        .start()
    )
    rows.awaitTermination(180)
    keys = [
        sorted(h["key"] for h in r["headers"])
        for r in spark.sql("SELECT headers FROM forwarded_headers").collect()
    ]
    assert len(keys) == len(values)
    assert all(k == sorted([ATTEMPT_HEADER, "trace"]) for k in keys), keys[:3]


def test_a_topic_reads_aligned_before_its_first_snapshot_completes(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The sink creates the control topic before any task produces: a reader that runs
    while batch 0 is in flight (or after its attempt failed) must not take the topic for a
    plain one and read unconfirmed records."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from spark_chkpt.connectors.kafka import KafkaDataSource
    from spark_chkpt.kafka.client.topics import topic_names
    from spark_chkpt.kafka.sink.options import KafkaSinkConfig
    from spark_chkpt.kafka.sink.writer import build_producer

    named, by_column = make_topic(partitions=2, suffix="named"), make_topic(suffix="column")
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "topic": named,
        "checkpointLocation": str(tmp_path / "upstream"),
        "txnAppId": "upstream-run",
    }
    KafkaDataSource(options).streamWriter(StructType([StructField("value", BinaryType())]), False)
    # A write task of batch 0 produces, and its commit never comes (the attempt failed).
    task = build_producer(config=KafkaSinkConfig.from_options(options), batch_id=0, task=0)
    task.send(pa.record_batch({"value": [b"u-%d" % i for i in range(6)]}))
    task.finish()
    assert drain_to_files(spark, kafka_stream(spark, bootstrap_servers, named), tmp_path) == []

    # Without a topic option, the task creates the control topic of each topic it writes.
    del options["topic"]
    column_task = build_producer(config=KafkaSinkConfig.from_options(options), batch_id=0, task=1)
    column_task.send(pa.record_batch({"value": [b"c-0"], "topic": [by_column]}))
    column_task.finish()
    assert f"__chkpt.{by_column}" in topic_names(bootstrap_servers=bootstrap_servers)


def test_a_recreated_topic_is_not_cut_by_the_old_topics_index(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    """The data topic is deleted and created again under its name; its control topic
    survives with the old topic's entries. The upstream job restarts (fresh checkpoint,
    same txnAppId) and writes snapshots 0 and 1 again: the old entries must neither make
    its commits look done nor cut the new topic. Entries carry the topic's Kafka id.
    """

    from spark_chkpt.kafka.client.topics import create_topic, delete_topic

    first_in, second_in = make_topic(suffix="in1"), make_topic(suffix="in2")
    data = make_topic(partitions=2, suffix="data")
    old = [b"old-%d" % i for i in range(10)]
    new = [b"new-%d" % i for i in range(10)]
    produce(producer, first_in, old)
    produce(producer, second_in, new)

    def upstream_run(source: str, checkpoint: str) -> None:
        df = kafka_stream(spark, bootstrap_servers, source, maxOffsetsPerTrigger="5")
        query = (
            df.select("value")
            .writeStream.format("chkpt-kafka")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("topic", data)
            .option("txnAppId", "recreated-upstream")
            .option("checkpointLocation", str(tmp_path / checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()

    upstream_run(first_in, "up-1")
    old_id = _topic_id(bootstrap_servers, data)
    assert old_id is not None
    delete_topic(bootstrap_servers=bootstrap_servers, name=data)
    create_topic(bootstrap_servers=bootstrap_servers, name=data, partitions=2)
    assert _topic_id(bootstrap_servers, data) not in (None, old_id)
    upstream_run(second_in, "up-2")
    df = kafka_stream(spark, bootstrap_servers, data)
    assert drain_to_files(spark, df, tmp_path) == names(new)


def _topic_id(servers: str, topic: str) -> str | None:
    """The Kafka id of ``topic`` now (None when it does not exist)."""
    from kafka import KafkaConsumer

    from spark_chkpt.kafka.control.topic import topic_id_of

    consumer = KafkaConsumer(bootstrap_servers=servers.split(","))
    try:
        if topic not in consumer.topics():
            return None
        return topic_id_of(consumer, topic)
    finally:
        consumer.close()


def _fan_in_upstream(df: Any, servers: str, topic: str, app: str, checkpoint: Path) -> Any:
    """Start (not await) an availableNow ``chkpt-kafka`` sink query of app ``app``."""
    return (
        df.select("value")
        .writeStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", topic)
        .option("txnAppId", app)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def _log_end(servers: str, topic: str) -> int:
    """The sum of the log ends of ``topic``'s two partitions."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=servers.split(","))
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        return sum(consumer.end_offsets(tps).values())
    finally:
        consumer.close()


def test_two_upstream_queries_into_one_topic_are_read_aligned_exactly_once(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    """Fan-in: two real chkpt-kafka sink queries (apps fan-a1, fan-a2) write one topic.
    Twice A2's batch is in flight (one task wrote, the other holds) while A1 commits a
    snapshot after A2's records: the aligned reader takes A1's snapshot and keeps A2's
    records pending. The first time A2 then commits: the reader takes those records,
    which lie before A1's barrier, in a later batch. The second time A2's attempt fails
    and runs again: the reader drops the failed attempt's records. Every id of both
    exactly once."""
    from pyspark.sql import functions as F

    mid = make_topic(partitions=2)
    in1 = make_topic(partitions=1, suffix="in1")
    in2 = make_topic(partitions=2, suffix="in2")
    gate = tmp_path / "gate"
    gate.mkdir()
    hold, holding, fail = (str(gate / n) for n in ("hold", "holding", "fail"))

    def gated(value: bytes) -> bytes:  # the task of A2's partition 1 holds (and fails)
        import os
        import time

        if value in (b"a2-19", b"a2-29") and os.path.exists(hold):
            open(holding, "w").close()
            deadline = time.monotonic() + 120
            while os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.1)
            if os.path.exists(fail):
                raise RuntimeError("injected: A2's attempt fails")
        return value

    gate_udf = F.udf(gated, "binary")

    def a1(values: list[bytes]) -> None:
        produce(producer, in1, values)
        query = _fan_in_upstream(
            kafka_stream(spark, bootstrap_servers, in1),
            bootstrap_servers,
            mid,
            "fan-a1",
            tmp_path / "a1",
        )
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()

    def a2() -> Any:
        df = kafka_stream(spark, bootstrap_servers, in2, partitionsPerTask="1").select(
            gate_udf("value").alias("value")
        )
        return _fan_in_upstream(df, bootstrap_servers, mid, "fan-a2", tmp_path / "a2")

    def down() -> list[str]:
        df = kafka_stream(spark, bootstrap_servers, mid, upstreamApps="fan-a1,fan-a2")
        return drain_to_files(spark, df, tmp_path / "down")

    def a2_in_flight(values: list[bytes], *, fails: bool) -> Any:
        """Start A2's next batch: partition 0's task writes all values but the last,
        partition 1's task holds on the last; return once the first ones are in mid."""
        produce(producer, in2, values[:-1], partition_of=lambda i: 0)
        produce(producer, in2, values[-1:], partition_of=lambda i: 1)
        before = _log_end(bootstrap_servers, mid)
        (gate / "hold").touch()
        if fails:
            (gate / "fail").touch()
        query = a2()
        deadline = time.monotonic() + 120
        while not (
            os.path.exists(holding) and _log_end(bootstrap_servers, mid) >= before + len(values) - 1
        ):
            assert time.monotonic() < deadline, "A2's first task never wrote"
            time.sleep(0.2)
        os.unlink(holding)
        return query

    a1_ids = [b"a1-%d" % i for i in range(30)]
    a2_ids = [b"a2-%d" % i for i in range(30)]
    a1(a1_ids[:10])
    produce(producer, in2, a2_ids[:10], partitions=2)
    first = a2()
    first.awaitTermination(180)
    assert first.exception() is None, first.exception()
    assert down() == names(a1_ids[:10] + a2_ids[:10])

    # A2's batch 1 in flight under A1's snapshot 1, then committed.
    query = a2_in_flight(a2_ids[10:20], fails=False)
    try:
        a1(a1_ids[10:20])
        assert down() == names(a1_ids[10:20])  # A2's records wait: neither read nor dropped
    finally:
        (gate / "hold").unlink()
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    assert down() == names(a2_ids[10:20])  # before A1's barrier 1, read now, once

    # A2's batch 2 in flight under A1's snapshot 2, then failed and run again.
    query = a2_in_flight(a2_ids[20:], fails=True)
    try:
        a1(a1_ids[20:])
        assert down() == names(a1_ids[20:])
    finally:
        (gate / "hold").unlink()
    with pytest.raises(Exception, match="injected: A2's attempt fails"):
        query.awaitTermination(180)
    (gate / "fail").unlink()
    again = a2()  # batch 2 again, new attempts, then barrier 2 of fan-a2
    again.awaitTermination(180)
    assert again.exception() is None, again.exception()
    assert down() == names(a2_ids[20:])  # the failed attempt's nine records dropped
    assert down() == []
    last = [r for r in reports(tmp_path / "down" / "chk") if r.get(mid)][-1][mid]
    assert sorted(last["apps"]) == ["fan-a1", "fan-a2"]
    assert last["apps"]["fan-a2"]["snapshots"] == [2]
