"""Stateful queries into chkpt-delta: the seeds' per-app page-view counts.

* ``outputMode("complete")``: each snapshot's commit replaces the table with the whole
  result; every Delta version of the query equals the counts of the input up to that
  snapshot's source offsets (time travel proves readers never see a mix);
* windowed counts in append mode with a watermark: each closed window appended once,
  exact.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.functions import window

from spark_chkpt.metrics.reporter import store_records
from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, PageViews, produce_page_views
from tests.helpers import kafka_stream

pytestmark = pytest.mark.integration


def page_views(spark: SparkSession, servers: str, topic: str, **options: str) -> Any:
    return (
        kafka_stream(spark, servers, topic, **options)
        .selectExpr(f"from_json(CAST(value AS STRING), '{PAGE_VIEW_SCHEMA_DDL}') AS e", "partition")
        .select("e.*", "partition")
    )


def test_complete_mode_replaces_the_table_once_per_snapshot(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=3000)
    counts = (
        page_views(spark, bootstrap_servers, topic, maxOffsetsPerTrigger="1000")
        .groupBy("app")
        .count()
    )
    table_path, chk = str(tmp_path / "counts"), str(tmp_path / "chk")
    query = (
        counts.writeStream.format("chkpt-delta")
        .outputMode("complete")
        .option("path", table_path)
        .option("checkpointLocation", chk)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    records = store_records(checkpoint_location=chk)
    assert [r.batch_id for r in records] == [0, 1, 2]
    assert {r.mode for r in records} == {"complete"}
    table = DeltaTable(table_path)
    final = {r["app"]: r["count"] for r in table.to_pyarrow_table().to_pylist()}
    assert sum(final.values()) == 3000
    views = PageViews()
    assert final == dict(Counter(str(views.event(i)["app"]) for i in range(3000)))
    # Each snapshot's Delta version holds exactly the counts of its source offsets.
    for record in records:
        (offsets,) = record.source_offsets
        at = DeltaTable(table_path, version=record.table_version).to_pyarrow_table()
        rows = {r["app"]: r["count"] for r in at.to_pylist()}
        assert sum(rows.values()) == sum(offsets[topic].values())
        assert len(at) == len(rows)  # one row per app: the old result was removed
    log = [
        json.loads(line)
        for line in (Path(table_path) / "_delta_log" / f"{records[-1].table_version:020d}.json")
        .read_text()
        .splitlines()
    ]
    assert any("remove" in a for a in log) and any("add" in a for a in log)


def test_windowed_counts_append_each_closed_window_once(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    total = 6000  # one event per 37 ms: about 3.7 one-minute windows
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=total)
    windowed = (
        page_views(spark, bootstrap_servers, topic, maxOffsetsPerTrigger="1500")
        .withWatermark("ts", "10 seconds")
        .groupBy("app", window("ts", "1 minute"))
        .count()
        .selectExpr("app", "window.start AS window_start", "window.end AS window_end", "count")
    )
    table_path, chk = str(tmp_path / "windows"), str(tmp_path / "chk")
    query = (
        windowed.writeStream.format("chkpt-delta")
        .outputMode("append")
        .option("path", table_path)
        .option("checkpointLocation", chk)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    rows = DeltaTable(table_path).to_pyarrow_table().to_pylist()
    views = PageViews()
    expected: Counter[tuple[str, int]] = Counter()
    last_ts = views.start_ms + (total - 1) * 37
    watermark = last_ts - 10_000
    for event_id in range(total):
        ts = views.start_ms + event_id * 37
        start = ts - ts % 60_000
        if start + 60_000 <= watermark:  # closed by the final watermark
            expected[(str(views.event(event_id)["app"]), start)] += 1
    got = {(r["app"], int(r["window_start"].timestamp() * 1000)): r["count"] for r in rows}
    assert len(got) == len(rows)  # each window once
    assert got == dict(expected) and len(expected) >= 10
