"""chkpt-delta through Spark: table creation, partitions, schema rules, output modes,
another writer on the same table, snapshot metrics, and the job's bad-record policy."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from spark_chkpt.jobs import kafka_to_delta
from spark_chkpt.metrics.lag import source_lags
from spark_chkpt.metrics.reporter import SnapshotReporter, store_records
from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, produce_page_views
from tests.helpers import kafka_stream, produce

pytestmark = pytest.mark.integration


def to_delta(df: DataFrame, tmp_path: Path, *, wait: bool = True, **options: str) -> Any:
    writer = (
        df.writeStream.format("chkpt-delta")
        .option("path", str(tmp_path / "table"))
        .option("checkpointLocation", str(tmp_path / options.pop("chk", "chk")))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start()
    if wait:  # a failure is asserted through query.exception()
        with contextlib.suppress(Exception):
            query.awaitTermination(240)
    return query


def test_stream_creates_a_partitioned_table_with_snapshot_records(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    topic = make_topic(partitions=2)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=900)
    events = (
        kafka_stream(spark, bootstrap_servers, topic, maxOffsetsPerTrigger="400")
        .selectExpr(
            f"from_json(CAST(value AS STRING), '{PAGE_VIEW_SCHEMA_DDL}') AS e",
            "offset",
            "partition",
        )
        .select("e.*", "offset", "partition")
    )
    reporter = SnapshotReporter.attach(spark)
    query = to_delta(events, tmp_path, wait=False, partitionBy="app", queryName="pv_test")
    reporter.track(query, checkpoint_location=str(tmp_path / "chk"))
    query.awaitTermination(240)
    assert query.exception() is None
    table = DeltaTable(str(tmp_path / "table"))
    data = table.to_pyarrow_table()
    assert sorted(data.column("event_id").to_pylist()) == list(range(900))
    assert table.metadata().partition_columns == ["app"]
    assert data.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert {Path(f).parent.name for f in table.file_uris()} == {
        f"app={a}" for a in data.column("app").unique().to_pylist()
    }
    records = store_records(checkpoint_location=str(tmp_path / "chk"))
    assert [r.batch_id for r in records] == [0, 1, 2]
    assert [r.rows for r in records] == [400, 400, 100]
    assert all(r.commit_ms > 0 and r.query_name == "pv_test" for r in records)
    (last,) = records[-1].source_offsets  # Spark's plan: the topic's end, all 900 read
    assert list(last) == [topic] and sum(last[topic].values()) == 900
    commit_info = [h for h in table.history() if "chkpt.snapshot" in h]
    assert sorted(json.loads(h["chkpt.snapshot"])["batch_id"] for h in commit_info) == [0, 1, 2]
    # The listener saw each batch after its progress event (the last may still be queued).
    deadline = time.monotonic() + 10
    while len(reporter.records(query)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [r.batch_id for r in reporter.records(query)] == [0, 1, 2]
    # Lag, as Spark's own Kafka source reports it: offsets behind the latest after each
    # batch, in every progress and in the reporter's line (printed with no logging set up).
    assert [source_lags(p)[0].behind for p in query.recentProgress] == [500, 100, 0]
    assert reporter.lag[str(query.id)][0].metrics() == {
        "avgOffsetsBehindLatest": "0.0",
        "maxOffsetsBehindLatest": "0",
        "minOffsetsBehindLatest": "0",
    }
    printed = capfd.readouterr().err
    assert "pv_test: snapshot 1 " in printed and ": 400 rows, " in printed
    assert "lag 100 offsets over 2 partitions" in printed


def test_new_column_fails_naming_it_unless_merge_schema(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"a", b"b"])
    base = kafka_stream(spark, bootstrap_servers, topic).selectExpr(
        "CAST(value AS STRING) v", "offset"
    )
    assert to_delta(base, tmp_path).exception() is None
    produce(producer, topic, [b"c"])
    wider = base.selectExpr("v", "offset", "length(v) AS extra")
    failed = to_delta(wider, tmp_path, chk="chk")
    assert failed.exception() is not None
    assert "extra" in str(failed.exception()) and "mergeSchema" in str(failed.exception())
    assert DeltaTable(str(tmp_path / "table")).to_pyarrow_table().num_rows == 2
    assert to_delta(wider, tmp_path, chk="chk", mergeSchema="true").exception() is None
    rows = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist()
    assert sorted((r["v"], r["extra"]) for r in rows) == [("a", None), ("b", None), ("c", 1)]


def test_changed_type_fails_naming_the_column(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"1"])
    as_long = kafka_stream(spark, bootstrap_servers, topic).selectExpr(
        "CAST(CAST(value AS STRING) AS long) n"
    )
    assert to_delta(as_long, tmp_path).exception() is None
    produce(producer, topic, [b"2"])
    as_text = kafka_stream(spark, bootstrap_servers, topic).selectExpr("CAST(value AS STRING) n")
    failed = to_delta(as_text, tmp_path, mergeSchema="true")
    assert failed.exception() is not None
    assert "n: table int64, batch string" in str(failed.exception())


def test_a_missing_path_is_rejected(spark: SparkSession, tmp_path: Path) -> None:
    rows = spark.readStream.format("rate").load()
    with pytest.raises(Exception, match="'path'"):
        query = (
            rows.writeStream.format("chkpt-delta")
            .option("checkpointLocation", str(tmp_path / "c2"))
            .start()
        )
        query.awaitTermination(60)


def test_another_writer_appending_concurrently(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    produce(producer, topic, [b"%d" % i for i in range(600)], partitions=2)
    stream = kafka_stream(spark, bootstrap_servers, topic, maxOffsetsPerTrigger="100").selectExpr(
        "CAST(CAST(value AS STRING) AS long) n", "'stream' AS writer"
    )
    write_deltalake(
        str(tmp_path / "table"), pa.table({"n": pa.array([-1], pa.int64()), "writer": ["other"]})
    )
    stop = threading.Event()

    def other_writer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            write_deltalake(
                str(tmp_path / "table"),
                pa.table({"n": pa.array([-1 - i], pa.int64()), "writer": ["other"]}),
                mode="append",
            )
            time.sleep(0.05)

    thread = threading.Thread(target=other_writer)
    thread.start()
    try:
        query = to_delta(stream, tmp_path)
    finally:
        stop.set()
        thread.join()
    assert query.exception() is None
    rows = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist()
    ours = sorted(r["n"] for r in rows if r["writer"] == "stream")
    assert ours == list(range(600))
    others = [r["n"] for r in rows if r["writer"] == "other"]
    assert len(others) == len(set(others)) > 1


def _values(tmp_path: Path) -> list[int]:
    rows = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().column("n").to_pylist()
    return sorted(rows)


def test_fresh_checkpoint_reusing_the_txn_app_id_fails_instead_of_dropping_batches(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"%d" % i for i in range(300)])

    def numbers(per_batch: str) -> DataFrame:
        return kafka_stream(
            spark, bootstrap_servers, topic, maxOffsetsPerTrigger=per_batch
        ).selectExpr("CAST(CAST(value AS STRING) AS long) n")

    first = to_delta(numbers("100"), tmp_path, chk="chk1", txnAppId="orders-to-delta")
    assert first.exception() is None
    assert _values(tmp_path) == list(range(300))  # batches 0, 1, 2
    produce(producer, topic, [b"%d" % i for i in range(300, 600)])

    # The checkpoint is gone; a fresh one keeps txnAppId and plans batch 0 = 0..250.
    fresh = to_delta(numbers("250"), tmp_path, chk="chk2", txnAppId="orders-to-delta")

    assert fresh.exception() is not None
    text = str(fresh.exception())
    assert "QueryIdentityError" in text or "already holds batch 0" in text
    assert "orders-to-delta" in text and "txnAppId" in text
    assert f"{topic}-0: 100" in text and f"{topic}-0: 250" in text
    assert _values(tmp_path) == list(range(300))  # every committed row, exactly once


def test_second_copy_of_a_checkpoint_fails_and_the_table_keeps_no_duplicates(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    numbers = kafka_stream(spark, bootstrap_servers, topic).selectExpr(
        "CAST(CAST(value AS STRING) AS long) n"
    )
    produce(producer, topic, [b"%d" % i for i in range(100)])
    assert to_delta(numbers, tmp_path, chk="original").exception() is None  # batch 0
    shutil.copytree(tmp_path / "original", tmp_path / "copy")

    produce(producer, topic, [b"%d" % i for i in range(100, 200)])
    assert to_delta(numbers, tmp_path, chk="original").exception() is None  # batch 1: ..200
    produce(producer, topic, [b"%d" % i for i in range(200, 300)])
    copy = to_delta(numbers, tmp_path, chk="copy")  # its batch 1: 100..300

    assert copy.exception() is not None
    text = str(copy.exception())
    assert "batch 1" in text and "copies" in text
    assert f"{topic}-0: 200" in text and f"{topic}-0: 300" in text
    assert _values(tmp_path) == list(range(200))
    # The original carries on and the table holds every record once.
    assert to_delta(numbers, tmp_path, chk="original").exception() is None
    assert _values(tmp_path) == list(range(300))


def _job_settings(servers: str, topic: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "source.kafka.bootstrap.servers": servers,
        "source.subscribe": topic,
        "source.startingOffsets": "earliest",
        "sink.path": str(tmp_path / "table"),
        "sink.checkpointLocation": str(tmp_path / "chk"),
        "job.schema": "id long, name string",
        "job.trigger": "availableNow",
        "job.queryName": "bad_records",
        **extra,
    }


def test_job_fails_on_a_malformed_record_naming_its_offset(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b'{"id":1,"name":"a"}', b"{not json", b'{"id":3,"name":"c"}'])
    query = kafka_to_delta.start(spark, _job_settings(bootstrap_servers, topic, tmp_path))
    with pytest.raises(Exception, match="malformed JSON"):
        query.awaitTermination(240)
    assert query.exception() is not None
    assert f"malformed JSON value at {topic}-0 offset 1" in str(query.exception())
    assert not (tmp_path / "table" / "_delta_log").exists()  # nothing half-written


def test_job_keeps_malformed_records_when_asked(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b'{"id":1,"name":"a"}', b"{not json"])
    query = kafka_to_delta.start(
        spark, _job_settings(bootstrap_servers, topic, tmp_path, **{"job.badRecords": "keep"})
    )
    query.awaitTermination(240)
    assert query.exception() is None
    rows = sorted(
        DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist(),
        key=lambda r: r["kafka_offset"],
    )
    assert [(r["id"], r["_malformed"]) for r in rows] == [(1, None), (None, "{not json")]
