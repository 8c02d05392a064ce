"""Tables the project writes, read back by delta-spark (``format("delta")``, the reader
users have): chkpt-delta in append and complete mode, DeltaUpsert, and a savepoint
rewind. Each is compared with chispa against the expected rows and against what
deltalake (delta-rs) reads, version by version (``versionAsOf``); ``DESCRIBE HISTORY``
and delta-spark's own writer show the ``txn(appId, N)``; a downstream
``readStream.format("delta")`` sees every row once."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from spark_chkpt import DeltaUpsert
from spark_chkpt.savepoint.manifest import create_savepoint
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.snapshot.record import SNAPSHOT_KEY
from tests.helpers import kafka_stream, produce

pytestmark = pytest.mark.integration


def delta(spark: SparkSession, path: Path, **options: Any) -> DataFrame:
    reader = spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(str(path))


def delta_rs(spark: SparkSession, path: Path, schema: Any, version: int | None = None) -> DataFrame:
    """What deltalake reads at ``version``, as a Spark DataFrame of ``schema``."""
    rows = DeltaTable(str(path), version=version).to_pyarrow_table().to_pylist()
    return spark.createDataFrame([tuple(r[f.name] for f in schema) for r in rows], schema)


def assert_rows(actual: DataFrame, expected: DataFrame) -> None:
    assert_df_equality(
        actual.select(*sorted(expected.columns)),
        expected.select(*sorted(expected.columns)),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def history(spark: SparkSession, path: Path) -> list[Any]:
    return sorted(spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect(), key=lambda r: r.version)


def to_delta(
    df: DataFrame, table: Path, chk: Path, *, output_mode: str = "append", **options: str
) -> None:
    writer = (
        df.writeStream.format("chkpt-delta")
        .outputMode(output_mode)
        .option("path", str(table))
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start()
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()


def numbers(spark: SparkSession, servers: str, topic: str, per_batch: int) -> DataFrame:
    return kafka_stream(spark, servers, topic, maxOffsetsPerTrigger=str(per_batch)).selectExpr(
        "CAST(CAST(value AS STRING) AS long) AS n", "partition", "offset"
    )


def expected_numbers(spark: SparkSession, ns: range, partitions: int) -> DataFrame:
    return spark.createDataFrame(
        [(n, n % partitions, n // partitions) for n in ns], "n long, partition int, offset long"
    )


def query_id(chk: Path) -> str:
    return str(json.loads((chk / "metadata").read_text())["id"])


def downstream(spark: SparkSession, table: Path, chk: Path, collected: list[Any]) -> int:
    """A readStream.format("delta") over ``table`` (one file per micro-batch), AvailableNow:
    appends each batch's rows to ``collected``; returns how many batches it ran."""

    def write(batch: DataFrame, batch_id: int) -> None:
        collected.extend((batch_id, r.n) for r in batch.select("n").collect())

    query = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", "1")
        .load(str(table))
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()
    return len([p for p in query.recentProgress if p["numInputRows"] > 0])


def test_chkpt_delta_append_reads_back_with_time_travel_history_and_a_downstream_stream(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    produce(producer, topic, [b"%d" % i for i in range(90)], partitions=2)
    table, chk = tmp_path / "table", tmp_path / "chk"
    to_delta(numbers(spark, bootstrap_servers, topic, 30), table, chk)

    got = delta(spark, table)
    assert_rows(got, expected_numbers(spark, range(90), 2))
    assert_rows(got, delta_rs(spark, table, got.schema))
    for version in range(3):  # one commit per micro-batch of 30
        old = delta(spark, table, versionAsOf=version)
        assert old.count() == 30 * (version + 1)
        assert_rows(old, delta_rs(spark, table, got.schema, version))

    # DESCRIBE HISTORY: delta-spark parses commitInfo into its own fields and drops
    # the keys it does not know, chkpt.snapshot among them (the test pins that).
    rows = history(spark, table)
    assert [r.version for r in rows] == [0, 1, 2]
    assert [r.operation for r in rows] == ["CREATE TABLE", "WRITE", "WRITE"]
    assert all(SNAPSHOT_KEY not in r.asDict() and r.userMetadata is None for r in rows)
    info = DeltaTable(str(table)).history()
    assert sorted(json.loads(h[SNAPSHOT_KEY])["batch_id"] for h in info) == [0, 1, 2]

    # The txn: delta-spark's own writer skips a write whose (txnAppId, txnVersion) the
    # table has seen, which is chkpt-delta's txn(query id, batch id).
    app = query_id(chk)
    copy = tmp_path / "copy"
    shutil.copytree(table, copy)
    extra = spark.createDataFrame([(-1, 0, 0)], "n long, partition int, offset long")
    for version in (2, 3):
        extra.write.format("delta").mode("append").option("txnAppId", app).option(
            "txnVersion", version
        ).save(str(copy))
    assert delta(spark, copy).where("n = -1").count() == 1  # 2 was skipped, 3 written
    assert DeltaTable(str(copy)).transaction_version(app) == 3

    # Downstream: a Delta stream over the table, one commit's file per batch, every
    # row once; after chkpt-delta commits more, it goes on with the new rows only.
    seen: list[tuple[int, int]] = []
    assert downstream(spark, table, tmp_path / "down", seen) >= 3
    produce(producer, topic, [b"%d" % i for i in range(90, 120)], partitions=2)
    to_delta(numbers(spark, bootstrap_servers, topic, 30), table, chk)
    assert downstream(spark, table, tmp_path / "down", seen) >= 1
    assert Counter(n for _, n in seen) == Counter(range(120))


def test_chkpt_delta_complete_mode_reads_back(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"%d" % (i % 4) for i in range(40)])
    counts = (
        kafka_stream(spark, bootstrap_servers, topic, maxOffsetsPerTrigger="20")
        .selectExpr("CAST(value AS STRING) AS k")
        .groupBy("k")
        .count()
    )
    table = tmp_path / "table"
    to_delta(counts, table, tmp_path / "chk", output_mode="complete")
    got = delta(spark, table)
    expected = spark.createDataFrame([(str(k), 10) for k in range(4)], "k string, count long")
    assert_rows(got, expected)
    assert_rows(got, delta_rs(spark, table, got.schema))
    half = spark.createDataFrame([(str(k), 5) for k in range(4)], "k string, count long")
    assert_rows(delta(spark, table, versionAsOf=0), half)
    assert_rows(delta(spark, table, versionAsOf=0), delta_rs(spark, table, got.schema, 0))
    assert [r.operation for r in history(spark, table)] == ["CREATE TABLE", "WRITE"]


def test_delta_upsert_reads_back(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    keys = [b"k%d" % (i % 7) for i in range(70)]
    produce(producer, topic, keys)
    counts = (
        kafka_stream(spark, bootstrap_servers, topic, maxOffsetsPerTrigger="25")
        .selectExpr("CAST(value AS STRING) AS k")
        .groupBy("k")
        .count()
    )
    table, chk = tmp_path / "table", tmp_path / "chk"
    upsert = DeltaUpsert(path=str(table), keys=["k"], checkpoint_location=str(chk))
    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(upsert)
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()
    got = delta(spark, table)
    expected = spark.createDataFrame(
        [(k.decode(), n) for k, n in Counter(keys).items()], "k string, count long"
    )
    assert_rows(got, expected)
    versions = DeltaTable(str(table)).version()
    assert versions == 2
    for version in range(versions + 1):
        assert_rows(
            delta(spark, table, versionAsOf=version),
            delta_rs(spark, table, got.schema, version),
        )
    rows = history(spark, table)
    assert [r.operation for r in rows][1:] == ["MERGE", "MERGE"]
    assert DeltaTable(str(table)).transaction_version(query_id(chk)) == 2


def test_savepoint_rewind_reads_back(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"%d" % i for i in range(40)])
    table, chk = tmp_path / "table", tmp_path / "chk"
    to_delta(numbers(spark, bootstrap_servers, topic, 10), table, chk)
    point = create_savepoint(
        checkpoint_location=str(chk), savepoint_dir=str(tmp_path / "sp"), batch_id=1
    )
    new = tmp_path / "new"
    result = restore_savepoint(
        savepoint=point.location, checkpoint_location=str(new), mode="rewind"
    )
    assert result.rewound.restore_version == 4
    got = delta(spark, table)
    assert_rows(got, expected_numbers(spark, range(20), 1))
    assert_rows(got, delta_rs(spark, table, got.schema))
    # Time travel still reaches the undone versions.
    assert_rows(delta(spark, table, versionAsOf=3), expected_numbers(spark, range(40), 1))
    last = history(spark, table)[-1]
    assert (last.version, last.operation) == (4, "RESTORE")
    # The query resumes from the new checkpoint: batches 2 and 3 commit again, once.
    to_delta(numbers(spark, bootstrap_servers, topic, 10), table, new)
    assert_rows(delta(spark, table), expected_numbers(spark, range(40), 1))
    assert DeltaTable(str(table)).transaction_version(query_id(chk)) == 3
    assert query_id(new) == query_id(chk)
