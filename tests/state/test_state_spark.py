"""Keyed state in the snapshot (issue 11): what Spark's state stores write per snapshot
with RocksDB (the default here) and the HDFS provider, the record's ``state_operators``,
and the state of an older snapshot read back (library and ``spark-chkpt state``) against
counts computed in plain Python from the Kafka records the snapshot covers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.offsets import from_json
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.state.operators import check_retained, committed_batches, state_operators
from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, PageViews
from tests.helpers import kafka_stream, produce, user_env

pytestmark = pytest.mark.integration

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
EVENTS = 90
PER_BATCH = 20  # maxOffsetsPerTrigger: 5 batches


@contextmanager
def session_conf(spark: Any, key: str, value: str) -> Iterator[None]:
    """``key`` set for the queries started inside (the session is shared)."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def page_views(producer: Any, topic: str) -> None:
    produce(producer, topic, [v for _, v in PageViews(seed=11).events(0, EVENTS)], partitions=2)


def app_counts(spark: Any, servers: str, topic: str) -> Any:
    """chkpt-kafka -> parse the page view -> ``groupBy("app").count()``."""
    from pyspark.sql import functions as F

    views = kafka_stream(spark, servers, topic, maxOffsetsPerTrigger=str(PER_BATCH))
    parsed = views.select(
        F.from_json(F.col("value").cast("string"), PAGE_VIEW_SCHEMA_DDL).alias("v")
    )
    return parsed.select("v.*").groupBy("app").count()


def run_counts(spark: Any, servers: str, topic: str, checkpoint: Path) -> None:
    """The counts into the ``noop`` sink in complete mode, until the topic is drained."""
    query = (
        app_counts(spark, servers, topic)
        .writeStream.format("noop")
        .outputMode("complete")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()


def counts_up_to(servers: str, topic: str, ends: dict[int, int]) -> dict[str, int]:
    """Per app, the page views in ``topic`` before ``ends`` (partition -> offset), read
    with a plain consumer."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in ends]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    counts: Counter[str] = Counter()
    deadline = time.monotonic() + 60
    try:
        while any(consumer.position(tp) < ends[tp.partition] for tp in parts):
            assert time.monotonic() < deadline, "timed out reading the topic"
            for tp, records in consumer.poll(timeout_ms=500).items():
                for record in records:
                    if record.offset < ends[tp.partition]:
                        counts[json.loads(record.value)["app"]] += 1
    finally:
        consumer.close()
    return dict(counts)


def ends_of(checkpoint: Path, batch: int, topic: str) -> dict[int, int]:
    offsets = from_json(SparkCheckpoint(location=str(checkpoint)).plan(batch).sources[0])
    return {tp.partition: end for tp, end in offsets.items() if tp.topic == topic}


@pytest.fixture(scope="module")
def drained(  # type: ignore[no-untyped-def]
    spark, bootstrap_servers: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path]:
    """One RocksDB query over the page views, shared by the read-back tests."""
    from kafka import KafkaProducer

    from spark_chkpt.kafka.client.topics import create_topic

    topic = f"state-counts-{time.time_ns() % 10**9}"
    create_topic(bootstrap_servers=bootstrap_servers, name=topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=5)
    page_views(producer, topic)
    producer.close()
    checkpoint = tmp_path_factory.mktemp("state") / "chk"
    run_counts(spark, bootstrap_servers, topic, checkpoint)
    return topic, checkpoint


def version_files(partition: Path, version: int) -> list[str]:
    return sorted(p.name for p in partition.iterdir() if p.name.startswith(f"{version}."))


@pytest.mark.parametrize("provider", ["rocksdb", "hdfs"])
def test_state_operators_list_the_files_of_each_snapshot(
    spark: Any,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
    provider: str,
) -> None:
    topic = make_topic(partitions=2)
    page_views(producer, topic)
    checkpoint = tmp_path / "chk"
    if provider == "hdfs":
        with session_conf(spark, PROVIDER, HDFS):
            run_counts(spark, bootstrap_servers, topic, checkpoint)
    else:
        assert "RocksDB" in spark.conf.get(PROVIDER)  # the session's default
        run_counts(spark, bootstrap_servers, topic, checkpoint)
    batches = committed_batches(checkpoint_location=str(checkpoint))
    assert len(batches) >= 3
    kind = "changelog" if provider == "rocksdb" else "delta"
    for batch in batches:
        (op,) = state_operators(checkpoint_location=str(checkpoint), batch_id=batch)
        assert (op.operator_id, op.name, op.version) == (0, "stateStoreSave", batch + 1)
        assert (op.partitions, op.provider, op.store_names) == (2, provider, ["default"])
        for p in (0, 1):  # every partition commits its version, changed or not
            assert f"{batch + 1}.{kind}" in version_files(
                checkpoint / "state" / "0" / str(p), batch + 1
            )
        assert op.files == 2 + op.snapshot_files
        on_disk = sum(
            f.stat().st_size
            for p in (0, 1)
            for f in (checkpoint / "state" / "0" / str(p)).iterdir()
            if f.name.split(".")[0] == str(batch + 1) and not f.name.endswith(".crc")
        )
        assert op.bytes == on_disk > 0
    assert (
        state_operators(checkpoint_location=str(checkpoint), batch_id=batches[-1] + 5)[0].files == 0
    )


def test_read_state_of_an_older_snapshot_equals_the_counts_of_its_records(
    spark: Any, bootstrap_servers: str, drained: tuple[str, Path]
) -> None:
    from spark_chkpt.state.reader import read_state

    topic, checkpoint = drained
    batches = committed_batches(checkpoint_location=str(checkpoint))
    for batch in (1, batches[-1]):
        expected = counts_up_to(bootstrap_servers, topic, ends_of(checkpoint, batch, topic))
        snap = read_state(spark, checkpoint_location=str(checkpoint), batch_id=batch)
        assert (snap.batch_id, snap.version, snap.operator_name) == (
            batch,
            batch + 1,
            "stateStoreSave",
        )
        assert (snap.key_columns, snap.value_columns) == (["app"], ["count"])
        assert snap.rows == [{"app": app, "count": n} for app, n in sorted(expected.items())]
        assert snap.keys == len(expected)
    assert sum(expected.values()) == EVENTS  # the last snapshot covers the whole topic
    newest = read_state(spark, checkpoint_location=str(checkpoint))
    assert newest.batch_id == batches[-1]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "spark-chkpt"), "state", *args],
        cwd=cwd,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_spark_chkpt_state_prints_the_counts_of_a_snapshot(
    bootstrap_servers: str, drained: tuple[str, Path], tmp_path: Path
) -> None:
    topic, checkpoint = drained
    expected = counts_up_to(bootstrap_servers, topic, ends_of(checkpoint, 2, topic))
    done = cli(str(checkpoint), "--batch", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"# snapshot 2 of {checkpoint}: operator 0 (stateStoreSave)")
    assert f"state version 3, {len(expected)} keys" in lines[0]
    assert lines[1].split() == ["app", "count"]
    assert [line.split() for line in lines[2:]] == [
        [a, str(n)] for a, n in sorted(expected.items())
    ]
    newest = committed_batches(checkpoint_location=str(checkpoint))[-1]
    bad = cli(str(checkpoint), "--batch", str(newest + 7), cwd=tmp_path)
    assert bad.returncode == 2
    assert f"batch {newest + 7} is not committed" in bad.stderr
    assert str(checkpoint) in bad.stderr and f"batches 0..{newest}" in bad.stderr


def test_a_batch_older_than_min_batches_to_retain_is_refused(
    spark: Any,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    page_views(producer, topic)
    checkpoint = tmp_path / "chk"
    with session_conf(spark, "spark.sql.streaming.minBatchesToRetain", "2"):
        run_counts(spark, bootstrap_servers, topic, checkpoint)
    deadline = time.monotonic() + 30  # Spark purges its logs asynchronously
    while 0 in committed_batches(checkpoint_location=str(checkpoint)):
        assert time.monotonic() < deadline, "Spark kept commits/0"
        time.sleep(0.5)
    held = committed_batches(checkpoint_location=str(checkpoint))
    with pytest.raises(Exception, match="batch 0 is no longer retained") as e:
        check_retained(checkpoint_location=str(checkpoint), batch_id=0)
    assert f"batches {held[0]}..{held[-1]}" in str(e.value)


def test_the_delta_sink_records_the_state_and_the_reporter_adds_keys(
    spark: Any,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    """A stateful append query (``dropDuplicates(["app"])``: one state row per app) into
    chkpt-delta: the coordinator lists the state in its commit, the reporter merges the
    number of keys from Spark's progress into the stored records."""
    from pyspark.sql import functions as F

    from spark_chkpt.metrics.reporter import SnapshotReporter, store_records

    topic = make_topic(partitions=2)
    page_views(producer, topic)
    checkpoint = tmp_path / "chk"
    views = kafka_stream(spark, bootstrap_servers, topic, maxOffsetsPerTrigger=str(PER_BATCH))
    first_per_app = (
        views.select(F.from_json(F.col("value").cast("string"), PAGE_VIEW_SCHEMA_DDL).alias("v"))
        .select("v.app", "v.event_id")
        .dropDuplicates(["app"])
    )
    reporter = SnapshotReporter.attach(spark)
    try:
        query = (
            first_per_app.writeStream.format("chkpt-delta")
            .option("path", str(tmp_path / "table"))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        reporter.track(query, checkpoint_location=str(checkpoint))
        query.awaitTermination(240)
        assert query.exception() is None, query.exception()
        deadline = time.monotonic() + 30  # the listener runs after the batch
        while True:
            records = store_records(checkpoint_location=str(checkpoint))
            if records and all("keys" in r.state_operators[0] for r in records):
                break
            assert time.monotonic() < deadline, [r.state_operators for r in records]
            time.sleep(0.5)
    finally:
        spark.streams.removeListener(reporter)
    assert len(records) >= 3
    for record in records:
        (op,) = record.state_operators
        assert (op["operator_id"], op["name"], op["version"]) == (0, "dedupe", record.batch_id + 1)
        assert (op["partitions"], op["provider"]) == (2, "rocksdb")
        assert op["files"] >= 2 and op["bytes"] > 0  # both changelogs existed at the commit
    seen: set[str] = set()
    for record in records:  # keys: the apps seen up to the snapshot
        ends = ends_of(checkpoint, record.batch_id, topic)
        seen = set(counts_up_to(bootstrap_servers, topic, ends))
        assert record.state_operators[0]["keys"] == len(seen)
    assert len(seen) == 5
    done = subprocess.run(
        [str(Path(sys.executable).parent / "spark-chkpt"), "snapshots", str(checkpoint)],
        cwd=tmp_path,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split()[-5:] == ["dead", "operators", "keys", "state", "bytes"]
    assert rows[len(records) - 1].split()[-2] == "5"
