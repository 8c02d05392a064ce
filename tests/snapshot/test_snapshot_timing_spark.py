"""``snapshotTimeout`` and ``minPauseBetweenSnapshots`` through Spark.

The timeout: a supervised ``DeltaUpsert`` query whose commit of batch 0 stalls after
staging (a fail point) beyond ``snapshot_timeout`` fails that batch with
``SnapshotTimeoutError``, a snapshot failure the restart strategy counts; nothing
reaches the table, and the restarted query writes every id exactly once. The pause: a
``chkpt-delta`` query's next batch starts no sooner than ``minPauseBetweenSnapshots``
after the Delta commit of the one before."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from spark_chkpt import failpoints
from spark_chkpt.delta.upsert.front import DeltaUpsert
from spark_chkpt.failpoints import FaultPoint
from spark_chkpt.metrics.restarts import RestartMetrics
from spark_chkpt.restart import ExitCode, run_supervised
from spark_chkpt.snapshot.store import SnapshotStore

pytestmark = pytest.mark.integration


def start_json_to_delta(spark: SparkSession, work: Path, **options: str) -> StreamingQuery:
    """One JSON file per batch into chkpt-delta."""
    writer = (
        spark.readStream.format("json")
        .schema("id long")
        .option("maxFilesPerTrigger", 1)
        .load(str(work / "in"))
        .writeStream.format("chkpt-delta")
        .option("path", str(work / "table"))
        .option("checkpointLocation", str(work / "chk"))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.start()


def test_a_commit_stalled_past_snapshot_timeout_fails_the_batch_and_the_restart_is_exact(
    spark: SparkSession, tmp_path: Path
) -> None:
    (tmp_path / "in").mkdir()
    for i in range(2):
        (tmp_path / "in" / f"part-{i}.json").write_text(f'{{"id": {i}}}\n')
    table, chk = tmp_path / "table", tmp_path / "chk"
    upsert = DeltaUpsert(
        path=str(table), keys=["id"], checkpoint_location=str(chk), snapshot_timeout="6s"
    )

    # The timeout leaves room for staging (a Spark job) on a loaded machine; the stall
    # outlasts it.
    def stall_once(point: FaultPoint, batch_id: int) -> None:  # batch 0, staged, not merged
        failpoints.disable(point)
        time.sleep(8)

    def start() -> StreamingQuery:
        return (
            spark.readStream.format("json")
            .schema("id long")
            .option("maxFilesPerTrigger", 1)
            .load(str(tmp_path / "in"))
            .writeStream.foreachBatch(upsert)
            .option("checkpointLocation", str(chk))
            .trigger(availableNow=True)
            .start()
        )

    seen_at_restart: list[tuple[bool, list[str]]] = []
    metrics = RestartMetrics(
        on_restart=lambda event: seen_at_restart.append(
            ((table / "_delta_log").exists(), [p.name for p in table.rglob("*.parquet")])
        )
    )
    failpoints.enable(FaultPoint.AFTER_STAGING, stall_once, batch_id=0)
    try:
        code = run_supervised(
            start=start,
            strategy={
                "restart-strategy.type": "fixed-delay",
                "restart-strategy.fixed-delay.attempts": "2",
                "restart-strategy.fixed-delay.delay": "100ms",
                "execution.checkpointing.tolerable-failed-checkpoints": "1",
            },
            metrics=metrics,
        )
    finally:
        failpoints.disable(FaultPoint.AFTER_STAGING)
    assert code == ExitCode.OK, f"exit {code}: {metrics.history}; last {metrics.last_cause}"
    # One snapshot failure, the timeout; at the restart nothing of batch 0 was in the
    # table or left staged.
    assert (metrics.snapshot_failures, metrics.task_failures, metrics.restarts) == (1, 0, 1)
    assert metrics.last_cause is not None and "SnapshotTimeoutError" in metrics.last_cause
    assert seen_at_restart == [(False, [])]
    [failure] = SnapshotStore(checkpoint_location=str(chk)).failures()
    assert (failure["batch_id"], failure["reason"]) == (0, "timeout")
    assert failure["sink"] == "delta-upsert"
    ids = DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()
    assert sorted(ids) == [0, 1]


def test_the_next_batch_starts_no_sooner_than_the_min_pause_after_a_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    pause_s = 2.0
    (tmp_path / "in").mkdir()
    for i in range(2):
        (tmp_path / "in" / f"part-{i}.json").write_text(f'{{"id": {i}}}\n')
    query = start_json_to_delta(
        spark, tmp_path, minPauseBetweenSnapshots=f"{int(pause_s * 1000)}ms"
    )
    assert query.awaitTermination(240)
    assert query.exception() is None
    starts = {
        int(p["batchId"]): dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        for p in query.recentProgress
    }
    table = DeltaTable(str(tmp_path / "table"))
    committed = {
        int(c["chkpt.batchId"]): dt.datetime.fromtimestamp(c["timestamp"] / 1000, dt.timezone.utc)
        for c in table.history()
        if "chkpt.batchId" in c
    }
    assert sorted(committed) == [0, 1]
    gap = (starts[1] - committed[0]).total_seconds()
    assert gap >= pause_s, f"batch 1 started {gap:.2f} s after batch 0's Delta commit"
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1]
