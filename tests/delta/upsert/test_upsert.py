"""DeltaUpsert through Spark: an update-mode aggregate over a chkpt-kafka source, upserted
into a real Delta table from foreachBatch, read back with deltalake: counts equal to
plain Python's across batches and a restart, a replayed batch that changes nothing,
deletes through ``_delete``, the snapshot records' MERGE figures, another query's
checkpoint refused."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from spark_chkpt import DeltaUpsert
from spark_chkpt.errors import DuplicateKeyError, QueryIdentityError
from spark_chkpt.metrics.reporter import store_records
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, PageViews, produce_page_views
from tests.helpers import kafka_stream, produce

pytestmark = pytest.mark.integration


def page_view_counts(spark: SparkSession, servers: str, topic: str, per_batch: int) -> DataFrame:
    return (
        kafka_stream(spark, servers, topic, maxOffsetsPerTrigger=str(per_batch))
        .selectExpr(f"from_json(CAST(value AS STRING), '{PAGE_VIEW_SCHEMA_DDL}') AS e")
        .select("e.*")
        .groupBy("app")
        .count()
    )


def run(df: DataFrame, write: Callable[[DataFrame, int], Any], checkpoint: Path) -> None:
    """The update-mode query, AvailableNow: every batch, then stop."""
    query = (
        df.writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(240)  # raises the batch's error
    finally:
        query.stop()
    assert query.exception() is None


def expected_counts(count: int, *, seed: int = 1) -> Counter[str]:
    views = PageViews(seed=seed)
    return Counter(str(views.event(i)["app"]) for i in range(count))


def table_counts(path: Path) -> dict[str, int]:
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    assert len({r["app"] for r in rows}) == len(rows), rows  # one row per key
    return {r["app"]: r["count"] for r in rows}


def test_update_mode_counts_upserted_exactly_once(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=700)
    table, chk = tmp_path / "pv_counts", tmp_path / "chk"
    upsert = DeltaUpsert(
        path=str(table), keys=["app"], checkpoint_location=str(chk), query_name="pv_counts"
    )
    replays: list[tuple[SnapshotRecord, SnapshotRecord, int, int]] = []

    def write(batch: DataFrame, batch_id: int) -> None:
        first = upsert(batch, batch_id)
        if batch_id == 1:  # Spark replays a batch after a crash: nothing changes
            version = DeltaTable(str(table)).version()
            again = upsert(batch, batch_id)
            replays.append((first, again, version, DeltaTable(str(table)).version()))

    run(page_view_counts(spark, bootstrap_servers, topic, 300), write, chk)
    assert table_counts(table) == expected_counts(700)

    ((first, again, before, after),) = replays
    assert again == first and after == before
    records = store_records(checkpoint_location=str(chk))
    assert [r.batch_id for r in records] == [0, 1, 2]
    assert {r.mode for r in records} == {"upsert"} and {r.outcome for r in records} == {"committed"}
    apps = len(expected_counts(700))
    for r in records:  # each batch's changed keys: one row per app it saw
        assert r.merge["source_rows"] == r.rows > 0
        assert r.merge["inserted"] + r.merge["updated"] == r.rows and r.merge["deleted"] == 0
    assert records[0].merge["inserted"] == records[0].rows and records[0].table_version == 0
    assert sum(r.merge["inserted"] for r in records) == apps
    delta = DeltaTable(str(table))
    query_id = json.loads((chk / "metadata").read_text())["id"]
    assert delta.transaction_version(query_id) == 2 and records[0].app_id == query_id
    history = [h for h in delta.history() if "chkpt.snapshot" in h]
    assert sorted(json.loads(h["chkpt.snapshot"])["batch_id"] for h in history) == [0, 1, 2]
    assert [h["operation"] for h in sorted(history, key=lambda h: h["version"])][1:] == [
        "MERGE",
        "MERGE",
    ]
    assert not list((table / "_chkpt_staging").glob("*.parquet"))  # staged files removed

    # A restart on the same checkpoint goes on from the state store: counts stay exact.
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=700, count=250)
    run(page_view_counts(spark, bootstrap_servers, topic, 300), upsert, chk)
    assert table_counts(table) == expected_counts(950)
    assert [r.batch_id for r in store_records(checkpoint_location=str(chk))] == [0, 1, 2, 3]


def test_rows_flagged_delete_remove_their_key(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=600)
    table, chk = tmp_path / "pv_counts", tmp_path / "chk"
    # app3 is inserted by batch 0 (its count there is the threshold), deleted by batch 1.
    threshold = expected_counts(300)["app3"]
    counts = page_view_counts(spark, bootstrap_servers, topic, 300).selectExpr(
        "app", "count", f"app = 'app3' AND count > {threshold} AS _delete"
    )
    upsert = DeltaUpsert(path=str(table), keys=["app"], checkpoint_location=str(chk))
    run(counts, upsert, chk)

    want = expected_counts(600)
    del want["app3"]
    assert table_counts(table) == want
    assert DeltaTable(str(table)).schema().to_arrow().names == ["app", "count"]  # no _delete
    first, second = store_records(checkpoint_location=str(chk))
    assert first.merge["inserted"] == len(expected_counts(300))
    assert second.merge["deleted"] == 1
    assert second.merge["updated"] == second.rows - 1


def test_another_querys_checkpoint_is_refused(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=50)
    other = tmp_path / "other_chk"
    other.mkdir()
    (other / "metadata").write_text(json.dumps({"id": "0badc0de-other-query"}))
    table = tmp_path / "pv_counts"
    upsert = DeltaUpsert(path=str(table), keys=["app"], checkpoint_location=str(other))
    with pytest.raises(StreamingQueryException) as info:
        run(page_view_counts(spark, bootstrap_servers, topic, 100), upsert, tmp_path / "chk")
    message = str(info.value)
    assert QueryIdentityError.__name__ in message and "belongs to query" in message
    assert "0badc0de-other-query" in message and str(other) in message
    running = json.loads((tmp_path / "chk" / "metadata").read_text())["id"]
    assert running in message
    assert not table.exists()  # nothing written


def test_null_keys_are_one_row_and_a_duplicate_key_refuses_its_batch(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    """Issue 24, hole 5: groupBy("app").count() with null apps keeps one row for
    app=None across batches (it gained a row per batch). The duplicate-key rule: a
    batch holding a key twice fails the query once, naming the key, with nothing
    written."""
    topic = make_topic(partitions=1)
    apps = [None if i % 3 == 0 else f"app{i % 2}" for i in range(90)]
    produce(producer, topic, [json.dumps({"app": a}).encode() for a in apps])
    table, chk = tmp_path / "counts", tmp_path / "chk"
    upsert = DeltaUpsert(path=str(table), keys=["app"], checkpoint_location=str(chk))
    counts = (
        kafka_stream(spark, bootstrap_servers, topic, maxOffsetsPerTrigger="30")
        .selectExpr("from_json(CAST(value AS STRING), 'app string').app AS app")
        .groupBy("app")
        .count()
    )
    run(counts, upsert, chk)
    assert len(store_records(checkpoint_location=str(chk))) == 3
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert sorted((r["app"] or "", r["count"]) for r in rows) == sorted(
        (a or "", n) for a, n in Counter(apps).items()
    )

    plain = tmp_path / "plain"
    twice = DeltaUpsert(path=str(plain), keys=["app"], checkpoint_location=str(tmp_path / "c2"))
    rows_df = kafka_stream(spark, bootstrap_servers, topic).selectExpr(
        "from_json(CAST(value AS STRING), 'app string').app AS app", "offset"
    )
    with pytest.raises(StreamingQueryException) as info:
        run(rows_df, twice, tmp_path / "c2")
    message = str(info.value)
    assert DuplicateKeyError.__name__ in message and "app='app1' (30 rows)" in message
    assert "app=None (30 rows)" in message and "Nothing was written" in message
    assert not (plain / "_delta_log").exists()
