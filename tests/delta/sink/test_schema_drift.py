"""Producers change the JSON mid-stream. A field the declared schema lacks is ignored
and counted; declared later with mergeSchema, its column appears from the snapshot that
first carries it; a changed type fails naming the column and both types, nothing
committed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from spark_chkpt.jobs import kafka_to_delta
from tests.helpers import produce

pytestmark = pytest.mark.integration


def settings(servers: str, topic: str, tmp_path: Path, schema: str, **extra: str) -> dict[str, str]:
    return {
        "source.kafka.bootstrap.servers": servers,
        "source.subscribe": topic,
        "source.startingOffsets": "earliest",
        "sink.path": str(tmp_path / "table"),
        "sink.checkpointLocation": str(tmp_path / "chk"),
        "job.schema": schema,
        "job.trigger": "availableNow",
        "job.queryName": "drift",
        **extra,
    }


def test_new_fields_are_counted_then_merged_and_a_changed_type_fails(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b'{"id":1,"name":"a"}', b'{"id":2,"name":"b","color":"red"}'])
    query = kafka_to_delta.start(
        spark, settings(bootstrap_servers, topic, tmp_path, "id long, name string")
    )
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()
    drift = [
        p["observedMetrics"]["schema_drift"] for p in query.recentProgress if p["numInputRows"]
    ]
    assert [(d["records_with_unknown_fields"], d["records"]) for d in drift] == [(1, 2)]
    assert DeltaTable(str(tmp_path / "table")).schema().to_arrow().names[:2] == ["id", "name"]
    assert "color" not in DeltaTable(str(tmp_path / "table")).schema().to_arrow().names

    # The schema declares the field now; with mergeSchema the column is added by the
    # first snapshot that carries it, and older rows read null there.
    produce(producer, topic, [b'{"id":3,"name":"c","color":"blue"}'])
    query = kafka_to_delta.start(
        spark,
        settings(
            bootstrap_servers,
            topic,
            tmp_path,
            "id long, name string, color string",
            **{"sink.mergeSchema": "true"},
        ),
    )
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()
    table = DeltaTable(str(tmp_path / "table"))
    rows = sorted((r["id"], r["color"]) for r in table.to_pyarrow_table().to_pylist())
    assert rows == [(1, None), (2, None), (3, "blue")]
    version = table.version()

    # A changed type: the batch fails naming the column and both types; nothing committed.
    produce(producer, topic, [b'{"id":"four","name":"d","color":"green"}'])
    query = kafka_to_delta.start(
        spark,
        settings(
            bootstrap_servers,
            topic,
            tmp_path,
            "id string, name string, color string",
            **{"sink.mergeSchema": "true"},
        ),
    )
    with pytest.raises(Exception, match="id"):
        query.awaitTermination(240)
    message = str(query.exception())
    assert "column types differ (id: table int64, batch string)" in message, message[-2000:]
    assert DeltaTable(str(tmp_path / "table")).version() == version
