"""Reading where a query stood from a Delta table's commits (no Spark): the newest
snapshot per query, the choice among several queries, and the checkpoint it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, write_deltalake

from spark_chkpt.recovery.rebuild import (
    RecoveryError,
    last_snapshot,
    recover_checkpoint,
    table_snapshots,
)
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord

pytestmark = pytest.mark.integration


def commit(table: Path, *, app: str, batch: int, end: int) -> None:
    record = SnapshotRecord(
        batch_id=batch,
        app_id=app,
        query_name="q",
        sink="chkpt-delta",
        source_offsets=[{"views": {"0": end}}],
        table_version=None,
        rows=1,
        files=1,
        bytes=1,
        commit_ms=1.0,
    )
    write_deltalake(
        str(table),
        pa.table({"x": [batch]}),
        mode="append",
        commit_properties=CommitProperties(custom_metadata={SNAPSHOT_KEY: record.to_json()}),
    )


def test_the_newest_snapshot_of_each_query(tmp_path: Path) -> None:
    table = tmp_path / "t"
    commit(table, app="a", batch=0, end=10)
    commit(table, app="b", batch=0, end=5)
    commit(table, app="a", batch=1, end=20)
    write_deltalake(str(table), pa.table({"x": [9]}), mode="append")  # an outside writer
    found = table_snapshots(table_uri=str(table))
    assert {a: (s.batch_id, s.table_version) for a, s in found.items()} == {
        "a": (1, 2),
        "b": (0, 1),
    }
    with pytest.raises(RecoveryError, match=r"2 queries: a \(batch 1.*--app-id"):
        last_snapshot(table_uri=str(table))
    assert last_snapshot(table_uri=str(table), app_id="b").record.source_offsets == [
        {"views": {"0": 5}}
    ]
    with pytest.raises(RecoveryError, match="no snapshot of query c"):
        last_snapshot(table_uri=str(table), app_id="c")


def test_recovery_writes_a_checkpoint_resuming_after_the_snapshot(tmp_path: Path) -> None:
    table = tmp_path / "t"
    commit(table, app="a", batch=0, end=10)
    commit(table, app="a", batch=1, end=20)
    chk = tmp_path / "chk"
    recover_checkpoint(table_uri=str(table), checkpoint_location=str(chk))
    spark_view = SparkCheckpoint(location=str(chk))
    assert spark_view.query_id() == "a"
    assert spark_view.plan(1).sources == ({"views": {"0": 20}},)
    assert spark_view.committed(1) and (chk / "offsets" / "0").exists()
    assert json.loads((chk / "chkpt" / "snapshots" / "1.json").read_text())["batch_id"] == 1


def test_recovery_needs_a_table_with_snapshots(tmp_path: Path) -> None:
    with pytest.raises(RecoveryError, match="not a Delta table"):
        last_snapshot(table_uri=str(tmp_path / "missing"))
    write_deltalake(str(tmp_path / "plain"), pa.table({"x": [1]}))
    with pytest.raises(RecoveryError, match="no snapshot records"):
        last_snapshot(table_uri=str(tmp_path / "plain"))
