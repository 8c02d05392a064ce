"""Savepoints without Spark: a checkpoint written file by file and a real Delta table
committed with ``txn(appId, N)`` and snapshot records, as the sink commits them. The
rewind (table back to snapshot N, txn back to N, the replay check and recovery after
it), the checks at restore (damaged, incomplete, Kafka sink, other writers, fork into
the same table) and the atomic create (kill -9 midway)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from spark_chkpt.delta.replay import check_replay
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import QueryIdentityError
from spark_chkpt.recovery.rebuild import last_snapshot
from spark_chkpt.savepoint.manifest import (
    SavepointError,
    create_savepoint,
    list_savepoints,
    load_savepoint,
)
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.snapshot.checkpoint import offset_log_entry
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord
from spark_chkpt.snapshot.store import SnapshotStore
from tests.helpers import user_env

pytestmark = pytest.mark.integration

APP = "3f0e8a52-0000-4000-8000-000000000001"
TOPIC = "views"


def record(
    batch: int, *, table: Path, version: int | None, sink: str = "chkpt-delta"
) -> SnapshotRecord:
    return SnapshotRecord(
        batch_id=batch,
        app_id=APP,
        query_name="q",
        sink=sink,
        source_offsets=[{TOPIC: {"0": 10 * (batch + 1)}}],
        table_version=version,
        rows=10,
        files=1,
        bytes=1,
        commit_ms=1.0,
        target=str(table) if sink != "chkpt-kafka" else TOPIC,
    )


def commit_batch(table: Path, batch: int, *, app: str = APP) -> None:
    """What chkpt-delta commits for ``batch``: its rows, txn and record."""
    version = DeltaTable(str(table)).version() + 1 if (table / "_delta_log").exists() else 0
    write_deltalake(
        str(table),
        pa.table({"id": list(range(10 * batch, 10 * batch + 10))}),
        mode="append",
        commit_properties=CommitProperties(
            custom_metadata={SNAPSHOT_KEY: record(batch, table=table, version=version).to_json()},
            app_transactions=[Transaction(app_id=app, version=batch)],
        ),
    )


def checkpoint_through(chk: Path, last: int, *, table: Path, sink: str = "chkpt-delta") -> None:
    """Spark's files and the store for batches 0..last, as a query leaves them."""
    (chk / "offsets").mkdir(parents=True)
    (chk / "commits").mkdir()
    (chk / "metadata").write_text(json.dumps({"id": APP}))
    store = SnapshotStore(checkpoint_location=str(chk))
    for batch in range(last + 1):
        rec = record(batch, table=table, version=batch, sink=sink)
        (chk / "offsets" / str(batch)).write_text(offset_log_entry(sources=rec.source_offsets))
        (chk / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        store.put(rec)


@pytest.fixture
def ran(tmp_path: Path) -> tuple[Path, Path]:
    """A query that committed batches 0..3 to its table; the checkpoint and the table."""
    table, chk = tmp_path / "table", tmp_path / "chk"
    for batch in range(4):
        commit_batch(table, batch)
    checkpoint_through(chk, 3, table=table)
    return chk, table


def ids(table: Path, version: int | None = None) -> list[int]:
    return sorted(
        DeltaTable(str(table), version=version).to_pyarrow_table().column("id").to_pylist()
    )


def test_rewind_rolls_the_table_back_and_batches_after_commit_again(
    tmp_path: Path, ran: tuple[Path, Path]
) -> None:
    chk, table = ran
    point = create_savepoint(
        checkpoint_location=str(chk), savepoint_dir=str(tmp_path / "sp"), batch_id=1
    )
    manifest = point.manifest
    assert (manifest.batch_id, manifest.query_id, manifest.sink.table_version) == (1, APP, 1)  # type: ignore[union-attr]
    assert manifest.sink.target == str(table)  # type: ignore[union-attr]
    assert {f.path for f in manifest.files} == {
        "metadata",
        "offsets/0",
        "offsets/1",
        "commits/1",
        "chkpt/snapshots/1.json",
    }
    result = restore_savepoint(
        savepoint=point.location, checkpoint_location=str(tmp_path / "new"), mode="rewind"
    )
    assert (result.query_id, result.resumes_at, result.rewound.rolled_back_from) == (APP, 2, 3)
    # The table equals the table as of snapshot 1; the app is back at batch 1.
    restored = DeltaTable(str(table))
    assert ids(table) == ids(table, version=1) == list(range(20))
    assert restored.transaction_version(APP) == 1
    assert restored.version() == result.rewound.restore_version == 4
    # The new checkpoint resumes at batch 2 with the savepoint's plan.
    new = tmp_path / "new"
    assert json.loads((new / "metadata").read_text())["id"] == APP
    assert (new / "offsets" / "1").read_text() == (chk / "offsets" / "1").read_text()
    assert sorted(p.name for p in (new / "commits").iterdir()) == ["1"]
    # Recovery reads the rewind: the app's newest snapshot is 1, at the restore commit.
    newest = last_snapshot(table_uri=str(table))
    assert (newest.batch_id, newest.table_version) == (1, 4)
    # Batch 2 commits again (other offsets this time), once; a replay of it is checked
    # against the new commit, not the one the rewind undid.
    write_deltalake(
        str(table),
        pa.table({"id": list(range(20, 25))}),
        mode="append",
        commit_properties=CommitProperties(
            custom_metadata={
                SNAPSHOT_KEY: replace(
                    record(2, table=table, version=5), source_offsets=[{TOPIC: {"0": 25}}]
                ).to_json()
            },
            app_transactions=[Transaction(app_id=APP, version=2)],
        ),
    )
    target = DeltaTarget(uri=str(table))
    now = target.open()
    commit, rec = check_replay(
        target=target,
        table=now,
        app_id=APP,
        checkpoint_location=str(new),
        batch_id=2,
        done=2,
        sources=[{TOPIC: {"0": 25}}],
    )
    assert commit is not None and commit.version == 5 and rec is not None
    with pytest.raises(QueryIdentityError):  # the undone commit's offsets no longer count
        check_replay(
            target=target,
            table=now,
            app_id=APP,
            checkpoint_location=str(new),
            batch_id=2,
            done=2,
            sources=[{TOPIC: {"0": 30}}],
        )
    assert ids(table) == list(range(25))
    assert load_savepoint(location=point.location).manifest == manifest


def test_rewind_checks(tmp_path: Path, ran: tuple[Path, Path]) -> None:
    chk, table = ran
    point = create_savepoint(
        checkpoint_location=str(chk), savepoint_dir=str(tmp_path / "sp"), batch_id=1
    )
    with pytest.raises(SavepointError, match="not the table the savepoint's query wrote"):
        restore_savepoint(
            savepoint=point.location,
            checkpoint_location=str(tmp_path / "a"),
            mode="rewind",
            table=str(tmp_path / "other"),
        )
    with pytest.raises(SavepointError, match="a fork writes a new table"):
        restore_savepoint(
            savepoint=point.location,
            checkpoint_location=str(tmp_path / "b"),
            mode="fork",
            table=str(table),
        )
    commit_batch(table, 0, app="another-query")  # another query writes the table
    with pytest.raises(
        SavepointError, match=r"other writers committed.*another-query.*discard-other-writers"
    ):
        restore_savepoint(
            savepoint=point.location, checkpoint_location=str(tmp_path / "c"), mode="rewind"
        )
    assert DeltaTable(str(table)).transaction_version(APP) == 3  # untouched
    # The checkpoint of a refused rewind is written only after the checks passed.
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


def test_a_kafka_sink_rewinds_only_with_its_brokers_and_forks(tmp_path: Path) -> None:
    """A Kafka sink's rewind writes a revocation
    (tests/savepoint/pipeline/test_pipeline_savepoint.py): without the brokers it is refused
    before anything is written; a fork needs none."""
    chk = tmp_path / "chk"
    checkpoint_through(chk, 2, table=tmp_path / "unused", sink="chkpt-kafka")
    point = create_savepoint(checkpoint_location=str(chk), savepoint_dir=str(tmp_path / "sp"))
    assert point.manifest.sink is not None and point.manifest.sink.target == TOPIC
    with pytest.raises(SavepointError, match=r"writes a revocation.*--bootstrap-servers"):
        restore_savepoint(
            savepoint=point.location, checkpoint_location=str(tmp_path / "r"), mode="rewind"
        )
    assert not (tmp_path / "r").exists()
    forked = restore_savepoint(
        savepoint=point.location, checkpoint_location=str(tmp_path / "f"), mode="fork"
    )
    assert forked.query_id != APP and forked.resumes_at == 3
    assert json.loads((tmp_path / "f" / "metadata").read_text())["id"] == forked.query_id
    stored = SnapshotStore(checkpoint_location=str(tmp_path / "f")).get(2)
    assert stored is not None and stored.app_id == forked.query_id


def test_a_damaged_savepoint_is_refused_naming_the_file(
    tmp_path: Path, ran: tuple[Path, Path]
) -> None:
    chk, _ = ran
    point = create_savepoint(checkpoint_location=str(chk), savepoint_dir=str(tmp_path / "sp"))
    (Path(point.location) / "checkpoint" / "offsets" / "3").unlink()
    with pytest.raises(SavepointError, match=r"checkpoint/offsets/3 is missing"):
        restore_savepoint(
            savepoint=point.location, checkpoint_location=str(tmp_path / "new"), mode="fork"
        )
    assert not (tmp_path / "new").exists()
    (Path(point.location) / "manifest.json").unlink()  # now an incomplete one
    assert list_savepoints(savepoint_dir=str(tmp_path / "sp")) == []
    with pytest.raises(
        SavepointError, match=r"not a complete savepoint: manifest\.json is missing"
    ):
        restore_savepoint(
            savepoint=point.location, checkpoint_location=str(tmp_path / "new"), mode="fork"
        )


def test_kill_midway_leaves_no_savepoint_and_a_second_attempt_succeeds(
    tmp_path: Path, ran: tuple[Path, Path]
) -> None:
    chk, _ = ran
    cli = Path(sys.executable).with_name("spark-chkpt")
    command = [str(cli), "savepoint", "create", str(chk), "--dir", str(tmp_path / "sp")]
    killed = subprocess.run(
        command,
        env=user_env(SPARK_CHKPT_KILL_AT="in-savepoint"),
        cwd=tmp_path,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = os.listdir(tmp_path / "sp")
    assert len(left) == 1 and left[0].startswith(".") and left[0].endswith(".inprogress")
    assert list_savepoints(savepoint_dir=str(tmp_path / "sp")) == []
    listing = subprocess.run(
        [str(cli), "savepoint", "list", str(tmp_path / "sp")],
        env=user_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listing.returncode == 1 and "no complete savepoint" in listing.stdout
    done = subprocess.run(
        command, env=user_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    (point,) = list_savepoints(savepoint_dir=str(tmp_path / "sp"))
    assert point.location == done.stdout.strip() and point.manifest.batch_id == 3
