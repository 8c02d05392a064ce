"""Checkpoints and log clean-up follow the table's delta.checkpointInterval and
delta.logRetentionDuration (spark_chkpt/delta/log/upkeep.py), on real delta-rs tables."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, PostCommitHookProperties, write_deltalake

from spark_chkpt.delta.table.target import DeltaTarget

SCHEMA = pa.schema([("id", pa.int64())])
APP = "app-1"


def checkpoints(uri: Path) -> list[int]:
    return sorted(
        int(name.split(".")[0])
        for name in os.listdir(uri / "_delta_log")
        if name.endswith(".checkpoint.parquet")
    )


def commits(uri: Path) -> list[int]:
    return sorted(
        int(name.split(".")[0]) for name in os.listdir(uri / "_delta_log") if name.endswith(".json")
    )


def sink_commits(target: DeltaTarget, versions: range, config: dict[str, str] | None) -> None:
    """The sink's commits of batches ``versions`` (the first creates the table)."""
    for batch in versions:
        target.commit(
            table=target.open(),
            schema=SCHEMA,
            partition_by=[],
            files=[],
            app_id=APP,
            version=batch,
            metadata={"chkpt.batchId": batch},
            configuration=config,
        )


def test_checkpoints_at_the_tables_interval(tmp_path: Path) -> None:
    uri = tmp_path / "five"
    sink_commits(DeltaTarget(uri=str(uri)), range(23), {"delta.checkpointInterval": "5"})
    # delta-rs's own hook gave 4, 9, 14, 19 here
    assert checkpoints(uri) == [5, 10, 15, 20]
    assert DeltaTable(str(uri)).version() == 22


def test_default_interval_is_delta_sparks_ten(tmp_path: Path) -> None:
    uri = tmp_path / "plain"
    sink_commits(DeltaTarget(uri=str(uri)), range(23), None)
    # delta-rs's own default (100) gave none
    assert checkpoints(uri) == [10, 20]


def test_a_due_version_another_writer_skipped_is_checkpointed(tmp_path: Path) -> None:
    uri = tmp_path / "shared"
    target = DeltaTarget(uri=str(uri))
    sink_commits(target, range(1), {"delta.checkpointInterval": "4"})
    for i in range(6):  # another writer, no checkpoints of its own: versions 1..6
        write_deltalake(
            str(uri),
            pa.table({"id": [i]}, schema=SCHEMA),
            mode="append",
            post_commithook_properties=PostCommitHookProperties(create_checkpoint=False),
        )
    assert checkpoints(uri) == []
    sink_commits(target, range(1, 2), None)  # version 7
    assert checkpoints(uri) == [4]
    assert DeltaTable(str(uri)).to_pyarrow_table().num_rows == 6


def test_expired_commits_go_and_recovery_still_finds_its_commit(tmp_path: Path) -> None:
    uri = tmp_path / "retained"
    target = DeltaTarget(uri=str(uri))
    config = {"delta.checkpointInterval": "5", "delta.logRetentionDuration": "interval 1 days"}
    sink_commits(target, range(7), config)  # versions 0..6, checkpoint at 5
    assert checkpoints(uri) == [5]
    assert commits(uri) == list(range(7))
    old = time.time() - 2 * 86400
    # versions 0..5 and the checkpoint at 5 older than the retention, 6 on not
    for name in [f"{v:020d}.json" for v in range(6)] + [f"{5:020d}.checkpoint.parquet"]:
        os.utime(uri / "_delta_log" / name, (old, old))
    sink_commits(target, range(7, 11), None)  # versions 7..10, checkpoint at 10
    assert checkpoints(uri) == [5, 10]
    # expired and before an expired checkpoint (the table stays readable at 5): gone
    assert commits(uri) == list(range(5, 11))
    assert DeltaTable(str(uri), version=5).version() == 5
    table = DeltaTable(str(uri))
    assert table.version() == 10
    assert table.transaction_version(APP) == 10
    # the recovery path reads JSON commits back from the latest version
    found = target.find_txn_commit(table, app_id=APP, txn_version=10)
    assert found is not None and found.version == 10
    assert found.info["chkpt.batchId"] == 10
    # a batch whose commit was cleaned up: None (check_replay names it, see test_replay)
    assert target.find_txn_commit(table, app_id=APP, txn_version=2) is None


def test_expired_log_cleanup_off_keeps_every_commit(tmp_path: Path) -> None:
    uri = tmp_path / "kept"
    config = {
        "delta.checkpointInterval": "5",
        "delta.logRetentionDuration": "interval 1 days",
        "delta.enableExpiredLogCleanup": "false",
    }
    target = DeltaTarget(uri=str(uri))
    sink_commits(target, range(3), config)
    old = time.time() - 2 * 86400
    for version in range(3):
        os.utime(uri / "_delta_log" / f"{version:020d}.json", (old, old))
    sink_commits(target, range(3, 11), None)
    assert checkpoints(uri) == [5, 10]
    assert commits(uri) == list(range(11))


def test_the_upserts_merge_checkpoints_at_the_tables_interval(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from spark_chkpt.delta.upsert.merge import STAGING_DIR, KeyedMerge

    uri = tmp_path / "upserted"
    write_deltalake(
        str(uri),
        pa.table({"id": [0]}, schema=SCHEMA),
        configuration={"delta.checkpointInterval": "3"},
        post_commithook_properties=PostCommitHookProperties(create_checkpoint=False),
    )
    target = DeltaTarget(uri=str(uri))
    merger = KeyedMerge(target=target, keys=["id"], delete_column="_delete")
    (uri / STAGING_DIR).mkdir()
    for batch in range(1, 8):  # versions 1..7
        name = f"{STAGING_DIR}/batch-{batch}.parquet"
        pq.write_table(pa.table({"id": [batch]}, schema=SCHEMA), str(uri / name))
        merger.merge(
            DeltaTable(str(uri)),
            files=[name],
            schema=SCHEMA,
            app_id=APP,
            version=batch,
            metadata={},
            batch_size=1024,
        )
    assert checkpoints(uri) == [3, 6]
    assert DeltaTable(str(uri)).to_pyarrow_table().num_rows == 8
