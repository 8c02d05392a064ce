"""job.badRecords=deadLetter: malformed records go to a dead-letter Delta table with
where they came from, their raw key and value, and why; committed exactly once with the
batch (their own txn), counted in the snapshot record; a batch of only bad records still
commits its snapshot."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from spark_chkpt.jobs import kafka_to_delta
from spark_chkpt.snapshot.store import SnapshotStore
from tests.helpers import produce

pytestmark = pytest.mark.integration


def settings(servers: str, topic: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "source.kafka.bootstrap.servers": servers,
        "source.subscribe": topic,
        "source.startingOffsets": "earliest",
        "source.maxOffsetsPerTrigger": "3",
        "sink.path": str(tmp_path / "table"),
        "sink.deadLetterPath": str(tmp_path / "dead"),
        "sink.checkpointLocation": str(tmp_path / "chk"),
        "job.schema": "id long, name string",
        "job.trigger": "availableNow",
        "job.queryName": "dead_letters",
        "job.badRecords": "deadLetter",
        **extra,
    }


def test_malformed_records_go_to_the_dead_letter_table_once(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    values = [
        b'{"id":1,"name":"a"}',
        b"{not json",
        b'{"id":"three","name":"c"}',  # JSON, but id is not a long
        b"also bad",  # batch 1: only bad records
        b"[1,",
        b"}",
        b'{"id":7,"name":"g"}',
    ]
    produce(producer, topic, values, key=lambda i: b"k%d" % i)
    query = kafka_to_delta.start(spark, settings(bootstrap_servers, topic, tmp_path))
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()

    good = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["name"], r["kafka_offset"]) for r in good) == [
        (1, "a", 0),
        (7, "g", 6),
    ]
    assert "_dead_letter" not in DeltaTable(str(tmp_path / "table")).schema().to_arrow().names
    dead = sorted(
        DeltaTable(str(tmp_path / "dead")).to_pyarrow_table().to_pylist(),
        key=lambda r: r["offset"],
    )
    assert [(r["topic"], r["partition"], r["offset"]) for r in dead] == [
        (topic, 0, o) for o in (1, 2, 3, 4, 5)
    ]
    assert [r["value"] for r in dead] == [values[o] for o in (1, 2, 3, 4, 5)]
    assert [r["key"] for r in dead] == [b"k%d" % o for o in (1, 2, 3, 4, 5)]
    assert dead[0]["error"] == "not valid JSON"
    assert dead[1]["error"].startswith("JSON that does not fit the schema: id long")
    assert all(r["timestamp"] is not None for r in dead)

    store = SnapshotStore(checkpoint_location=str(tmp_path / "chk"))
    records = [store.get(n) for n in store.batch_ids()]
    assert [(r.rows, r.dead_letters) for r in records if r] == [(1, 2), (0, 3), (1, 0)]
    # The dead-letter table carries each batch's txn, with letters or without (batch 2).
    app_id = records[0].app_id if records[0] else ""
    assert DeltaTable(str(tmp_path / "dead")).transaction_version(app_id) == 2


def test_dead_letter_options_must_come_together(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    from spark_chkpt.errors import ConfigError

    topic = make_topic()
    options = settings(bootstrap_servers, topic, tmp_path)
    del options["sink.deadLetterPath"]
    with pytest.raises(ConfigError, match=r"sink\.deadLetterPath"):
        kafka_to_delta.start(spark, options)
    options = settings(bootstrap_servers, topic, tmp_path, **{"job.badRecords": "keep"})
    with pytest.raises(Exception, match=r"deadLetterPath.*_dead_letter"):
        kafka_to_delta.start(spark, options).awaitTermination(60)
