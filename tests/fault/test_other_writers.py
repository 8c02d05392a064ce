"""Other writers on the same table: two streaming queries (different topics, different
query ids), an outside delta-rs writer, and OPTIMIZE (compaction) plus VACUUM with the
default retention, all at once. No failed batch, no duplicate, no lost row; conflict
retries are bounded and recorded in each snapshot record."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from spark_chkpt.recovery.rebuild import table_snapshots
from tests.helpers import kafka_stream, produce

pytestmark = pytest.mark.fault

PER_TOPIC = 1500


def test_two_queries_an_outside_writer_optimize_and_vacuum_at_once(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    table = str(tmp_path / "table")
    write_deltalake(table, pa.table({"n": pa.array([-1], pa.int64()), "writer": ["outside"]}))
    queries = []
    for name, offset in (("a", 0), ("b", 100_000)):
        topic = make_topic(partitions=2, suffix=name)
        produce(producer, topic, [b"%d" % (offset + i) for i in range(PER_TOPIC)], partitions=2)
        stream = kafka_stream(
            spark, bootstrap_servers, topic, maxOffsetsPerTrigger="150"
        ).selectExpr("CAST(CAST(value AS STRING) AS long) n", f"'{name}' AS writer")
        queries.append(
            stream.writeStream.format("chkpt-delta")
            .option("path", table)
            .option("checkpointLocation", str(tmp_path / f"chk-{name}"))
            .trigger(availableNow=True)
            .start()
        )
    stop = threading.Event()
    done: dict[str, int] = {"outside": 0, "optimize": 0, "vacuum": 0}
    errors: list[BaseException] = []

    def outside() -> None:
        while not stop.is_set():
            n = done["outside"] + 2
            write_deltalake(
                table,
                pa.table({"n": pa.array([-n], pa.int64()), "writer": ["outside"]}),
                mode="append",
            )
            done["outside"] += 1
            time.sleep(0.05)

    def maintenance() -> None:
        while not stop.is_set():
            try:
                DeltaTable(table).optimize.compact()
                done["optimize"] += 1
                DeltaTable(table).vacuum(dry_run=False)  # default retention: 7 days
                done["vacuum"] += 1
            except Exception as e:  # a conflict with a concurrent commit: try again
                if "conflict" not in str(e).lower() and "concurrent" not in str(e).lower():
                    errors.append(e)
                    return
            time.sleep(0.3)

    threads = [threading.Thread(target=outside), threading.Thread(target=maintenance)]
    for thread in threads:
        thread.start()
    try:
        for query in queries:
            query.awaitTermination(300)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors, errors
    for query in queries:
        assert query.exception() is None, query.exception()
    assert done["optimize"] > 0 and done["vacuum"] > 0 and done["outside"] > 0, done

    rows = DeltaTable(table).to_pyarrow_table().to_pylist()
    for name, offset in (("a", 0), ("b", 100_000)):
        ours = sorted(r["n"] for r in rows if r["writer"] == name)
        assert ours == list(range(offset, offset + PER_TOPIC)), name
    outside_rows = sorted(r["n"] for r in rows if r["writer"] == "outside")
    assert outside_rows == sorted(-i for i in range(1, done["outside"] + 2))
    # Each query's snapshots are in the table with their retries, bounded by the limit.
    snapshots = table_snapshots(table_uri=table)
    assert len(snapshots) == 2
    assert all(0 <= s.record.retries < 10 for s in snapshots.values())
