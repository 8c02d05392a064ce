"""Other writers on the same table, on S3: two streaming queries (different topics,
different query ids), an outside delta-rs writer, and OPTIMIZE (compaction) plus VACUUM
with the default retention, all at once, each committing Delta versions against the
others many times. Commits of one version conflicted (the server answered 412 to some
of them), and still: no failed batch, no duplicate, no lost row; conflict retries are
bounded and recorded in each snapshot record.

The table is on the project's S3 server (moto, tests/conftest.py's ``s3_server``), which
enforces ``If-None-Match: *`` as S3 does: where two commits of one version race, one
gets 412 and retries. That the assertions can fail where the header is ignored,
tests/test_s3_store.py shows with delta-rs's racing commits through a proxy
that strips it. Checkpoints stay local: the race is the table's. Then delta-rs's own
answer to the settings that would give put-if-absent up."""

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
from spark_chkpt.testing.s3_server import S3Server
from tests.helpers import kafka_stream, produce, racing_appends

pytestmark = pytest.mark.fault

PER_TOPIC = 1500


def test_two_queries_an_outside_writer_optimize_and_vacuum_at_once_on_s3(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
    s3_server: S3Server,
    s3_bucket: str,
) -> None:
    table = f"s3://{s3_bucket}/table"
    options = s3_server.storage_options  # the outside writers: delta-rs's own defaults
    write_deltalake(
        table,
        pa.table({"n": pa.array([-1], pa.int64()), "writer": ["outside"]}),
        storage_options=options,
    )
    queries = []
    for name, offset in (("a", 0), ("b", 100_000)):
        topic = make_topic(partitions=2, suffix=name)
        produce(producer, topic, [b"%d" % (offset + i) for i in range(PER_TOPIC)], partitions=2)
        stream = kafka_stream(
            spark, bootstrap_servers, topic, maxOffsetsPerTrigger="150"
        ).selectExpr("CAST(CAST(value AS STRING) AS long) n", f"'{name}' AS writer")
        writer = stream.writeStream.format("chkpt-delta").option("path", table)
        for key, value in options.items():
            writer = writer.option(f"storage.{key}", value)
        queries.append(
            writer.option("checkpointLocation", str(tmp_path / f"chk-{name}"))
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
                storage_options=options,
            )
            done["outside"] += 1
            time.sleep(0.05)

    def maintenance() -> None:
        while not stop.is_set():
            try:
                DeltaTable(table, storage_options=options).optimize.compact()
                done["optimize"] += 1
                DeltaTable(table, storage_options=options).vacuum(
                    dry_run=False
                )  # default retention: 7 days
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
    # The writers raced for versions: the server refused some commits of a version
    # another writer had taken (412 on a _delta_log file), and they retried.
    conflicts = s3_server.answers(method="PUT", status=412, under=f"/{s3_bucket}/table/_delta_log/")
    assert conflicts > 0

    rows = DeltaTable(table, storage_options=options).to_pyarrow_table().to_pylist()
    for name, offset in (("a", 0), ("b", 100_000)):
        ours = sorted(r["n"] for r in rows if r["writer"] == name)
        assert ours == list(range(offset, offset + PER_TOPIC)), name
    outside_rows = sorted(r["n"] for r in rows if r["writer"] == "outside")
    assert outside_rows == sorted(-i for i in range(1, done["outside"] + 2))
    # Each query's snapshots are in the table with their retries, bounded by the limit.
    snapshots = table_snapshots(table_uri=table, storage_options=options)
    assert len(snapshots) == 2
    assert all(0 <= s.record.retries < 10 for s in snapshots.values())


def test_delta_rs_gives_up_no_put_if_absent_on_s3(s3_server: S3Server, s3_bucket: str) -> None:
    # The settings chkpt-delta refuses (UnsafeCommitError, commit_safety.py), given to
    # delta-rs 1.x directly: with conditional put disabled it cannot commit on S3 at all
    # (no lock configured) and says so; AWS_S3_ALLOW_UNSAFE_RENAME alone still commits
    # put-if-absent: of 8 threads appending at once, every commit that succeeded is there.

    table = f"s3://{s3_bucket}/unsafe"
    unsafe = {**s3_server.storage_options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    disabled = {**unsafe, "aws_conditional_put": "disabled"}
    with pytest.raises(OSError, match="conditional put is disabled"):
        write_deltalake(f"{table}-disabled", pa.table({"n": [0]}), storage_options=disabled)
    committed = racing_appends(table, unsafe)
    found = DeltaTable(table, storage_options=unsafe)
    assert sorted(found.to_pyarrow_table().column("n").to_pylist()) == [-1, *committed]
    assert found.version() == len(committed)
