"""The project's own append commit (issue 47): the actions it builds (pure), a lost race
read by version, put-if-absent on local files, and the ``chkpt-delta`` coordinator
appending to a table whose protocol delta-rs refuses (rowTracking, domainMetadata,
inCommitTimestamp), read back by delta-rs. The tables are real Delta tables (delta-rs)
in ``tmp_path``; the other writer's commits are written into the log as delta-spark
writes them. delta-spark's own reading of such commits: tests/delta/test_delta_features.py.
"""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.delta.features.protocol import TableProtocol, check_table
from spark_chkpt.delta.log.commit import (
    LogState,
    NewFiles,
    OwnCommit,
    advance,
    build_append,
    commit_append,
    load_state,
)
from spark_chkpt.delta.log.commit_safety import put_if_absent
from spark_chkpt.delta.staging import StagedFile
from spark_chkpt.errors import CommitConflictError, TableFeatureError
from spark_chkpt.fs import resolve
from tests.delta.sink.test_coordinator import APP_ID, SCHEMA, Query, make_batch

ROW_TRACKING = frozenset({"domainMetadata", "rowTracking", "inCommitTimestamp"})
ON = {"delta.enableInCommitTimestamps": "true", "delta.enableRowTracking": "true"}


def staged(path: str, rows: int) -> StagedFile:
    return StagedFile(
        path=path,
        size=100,
        partition_values={},
        modification_time=1,
        rows=rows,
        stats=json.dumps({"numRecords": rows}),
    )


def actions(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def state(**changes: Any) -> LogState:
    base: dict[str, Any] = {
        "version": 4,
        "ict": 5_000,
        "domains": {
            "delta.rowTracking": '{"rowIdHighWaterMark":99}',
            "delta.clustering": '{"clusteringColumns":[["id"]]}',
        },
        "features": ROW_TRACKING,
        "configuration": ON,
    }
    return LogState(**(base | changes))


def test_an_append_gets_row_ids_above_the_high_water_mark_and_its_commit_version() -> None:
    text = build_append(
        state(),
        new=NewFiles(
            files=[staged("a b.parquet", 3), staged("c.parquet", 2)],
            txns={"app": 7},
            metadata={"chkpt.batchId": 7, "chkpt.snapshot": "{}"},
            partition_by=[],
        ),
        now_ms=10_000,
    )
    found = actions(text)
    assert list(found[0]) == ["commitInfo"]  # first: in-commit timestamps are on
    info = found[0]["commitInfo"]
    assert info["inCommitTimestamp"] == info["timestamp"] == 10_000
    assert info["chkpt.batchId"] == 7 and info["chkpt.snapshot"] == "{}"
    assert info["tags"] == {"delta.rowTracking.preserved": "true"}
    adds = [a["add"] for a in found if "add" in a]
    assert [a["baseRowId"] for a in adds] == [100, 103]
    assert [a["defaultRowCommitVersion"] for a in adds] == [5, 5]
    assert adds[0]["path"] == "a%20b.parquet"  # a URI, as delta-rs writes it
    domains = [a["domainMetadata"] for a in found if "domainMetadata" in a]
    assert domains == [
        {
            "domain": "delta.rowTracking",
            "configuration": '{"rowIdHighWaterMark":104}',
            "removed": False,
        }
    ]  # the clustering domain is not touched
    assert [a["txn"] for a in found if "txn" in a] == [
        {"appId": "app", "version": 7, "lastUpdated": 10_000}
    ]


def test_the_in_commit_timestamp_grows_past_a_clock_behind_the_last_commit() -> None:
    text = build_append(
        state(ict=20_000),
        new=NewFiles(files=[], txns={}, metadata={}, partition_by=[]),
        now_ms=10_000,
    )
    assert actions(text)[0]["commitInfo"]["inCommitTimestamp"] == 20_001


def test_no_row_ids_when_suspended_and_commit_versions_alone_for_type_widening() -> None:
    suspended = state(configuration={"delta.rowTrackingSuspended": "true"})
    new = NewFiles(files=[staged("a.parquet", 3)], txns={}, metadata={}, partition_by=[])
    text = build_append(suspended, new=new, now_ms=1)
    add = actions(text)[1]["add"]
    assert "baseRowId" not in add and "defaultRowCommitVersion" not in add
    assert "inCommitTimestamp" not in actions(text)[0]["commitInfo"]
    assert not any("domainMetadata" in a for a in actions(text))
    widened = state(features=frozenset({"typeWidening"}), configuration={})
    new = NewFiles(files=[staged("a.parquet", 3)], txns={}, metadata={}, partition_by=[])
    text = build_append(widened, new=new, now_ms=1)
    add = actions(text)[1]["add"]
    assert add["defaultRowCommitVersion"] == 5 and "baseRowId" not in add


def _theirs(*found: dict[str, Any]) -> str:
    return "".join(json.dumps(a) + "\n" for a in found)


def _advance(text: str, check: Any = None) -> LogState | None:
    return advance(
        state(),
        version=5,
        text=text,
        app_id="app",
        txn_version=7,
        check=check or (lambda p: None),
        uri="/t",
    )


def test_a_won_commit_moves_the_row_ids_and_timestamp_on_or_ends_the_attempt() -> None:
    moved = _advance(
        _theirs(
            {"commitInfo": {"inCommitTimestamp": 9_000}},
            {
                "domainMetadata": {
                    "domain": "delta.rowTracking",
                    "configuration": '{"rowIdHighWaterMark":150}',
                    "removed": False,
                }
            },
            {"txn": {"appId": "app", "version": 6}},  # an older batch of the app
            {"add": {"path": "x.parquet"}},
        )
    )
    assert moved is not None
    assert (moved.version, moved.ict, moved.high_water_mark()) == (5, 9_000, 150)
    assert "delta.clustering" in moved.domains
    assert _advance(_theirs({"txn": {"appId": "app", "version": 7}})) is None
    with pytest.raises(CommitConflictError, match="changed the table's metadata"):
        _advance(_theirs({"metaData": {"id": "x"}}))

    def check(found: TableProtocol) -> None:
        check_table(found, writer="chkpt-delta", operation="append")

    protocol = {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["allowColumnDefaults"],
    }
    with pytest.raises(TableFeatureError, match="'allowColumnDefaults'"):
        _advance(_theirs({"protocol": protocol}), check)


def test_put_if_absent_on_local_files_lets_one_of_eight_writers_win(tmp_path: Path) -> None:
    target = resolve(str(tmp_path / "_delta_log" / f"{1:020d}.json"))
    (tmp_path / "_delta_log").mkdir()

    def put(n: int) -> bool:
        return put_if_absent(target, f"writer {n}\n", uri=str(tmp_path), storage_options={})

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        won = list(pool.map(put, range(8)))
    assert won.count(True) == 1
    assert target.read_text() == f"writer {won.index(True)}\n"
    assert sorted(p.name for p in (tmp_path / "_delta_log").iterdir()) == [f"{1:020d}.json"]


def _upgrade(table: Path, version: int, *, hwm: int | None = None) -> None:
    """Write :func:`upgrade_text` as the table's commit ``version``."""
    text = upgrade_text(DeltaTable(str(table)), hwm=hwm)
    (table / "_delta_log" / f"{version:020d}.json").write_text(text)


def upgrade_text(delta: DeltaTable, *, hwm: int | None = None) -> str:
    """delta-spark's commit that turns row tracking and in-commit timestamps on (and
    a clustering domain), as ``ALTER TABLE ... SET TBLPROPERTIES`` would."""
    meta = delta.metadata()
    found: list[dict[str, Any]] = [
        {"commitInfo": {"timestamp": 1, "inCommitTimestamp": 4_000_000_000_000}},
        {
            "protocol": {
                "minReaderVersion": 1,
                "minWriterVersion": 7,
                "writerFeatures": ["appendOnly", "invariants", *sorted(ROW_TRACKING), "clustering"],
            }
        },
        {
            "metaData": {
                "id": meta.id,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": delta.schema().to_json(),
                "partitionColumns": list(meta.partition_columns),
                "configuration": ON,
                "createdTime": meta.created_time,
            }
        },
        {
            "domainMetadata": {
                "domain": "delta.clustering",
                "configuration": '{"clusteringColumns":[["id"]]}',
                "removed": False,
            }
        },
    ]
    if hwm is not None:
        found.append(
            {
                "domainMetadata": {
                    "domain": "delta.rowTracking",
                    "configuration": json.dumps({"rowIdHighWaterMark": hwm}),
                    "removed": False,
                }
            }
        )
    return _theirs(*found)


def test_the_coordinator_appends_to_a_row_tracked_table_and_a_replay_commits_nothing(
    tmp_path: Path,
) -> None:
    q = Query(tmp_path)
    write_deltalake(str(q.table), pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]))
    _upgrade(q.table, 1, hwm=9)
    first = q.stage(0, [1, 2, 3])
    q.commit(0, first)
    text = (q.table / "_delta_log" / f"{2:020d}.json").read_text()
    found = actions(text)
    assert found[0]["commitInfo"]["inCommitTimestamp"] == 4_000_000_000_001
    assert [a["add"]["baseRowId"] for a in found if "add" in a] == [10]
    txn = next(a["txn"] for a in found if "txn" in a)
    assert (txn["appId"], txn["version"]) == (APP_ID, 0)
    table = DeltaTable(str(q.table))
    assert table.version() == 2 and table.transaction_version(APP_ID) == 0
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3]
    logged = load_state(resolve(str(q.table)), version=2, features=ROW_TRACKING, configuration=ON)
    assert logged.high_water_mark() == 12 and "delta.clustering" in logged.domains
    # the next batch continues the row ids; a replay of it commits nothing
    q.commit(1, q.stage(1, [4, 5]))
    q.commit(1, q.stage(1, [4, 5]))
    assert DeltaTable(str(q.table)).version() == 3
    adds = [a["add"] for a in actions((q.table / "_delta_log" / f"{3:020d}.json").read_text())
            if "add" in a]  # fmt: skip
    assert [a["baseRowId"] for a in adds] == [13]


def test_a_lost_race_is_read_by_version_and_retried_above_the_winner(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]))
    _upgrade(table, 1, hwm=9)
    location = resolve(str(table))
    base = load_state(location, version=1, features=ROW_TRACKING, configuration=ON)
    rival = _theirs(
        {"commitInfo": {"inCommitTimestamp": 5_000_000_000_000}},
        {
            "domainMetadata": {
                "domain": "delta.rowTracking",
                "configuration": '{"rowIdHighWaterMark":19}',
                "removed": False,
            }
        },
    )
    tries: list[str] = []

    def put(at: Any, text: str) -> bool:
        if not tries:  # another writer takes version 2 first
            (table / "_delta_log" / f"{2:020d}.json").write_text(rival)
        tries.append(at.path)
        return put_if_absent(at, text, uri=str(table), storage_options={})

    def commit(state: Any, files: list[Any]) -> int | None:
        return commit_append(
            to=OwnCommit(location=location, uri=str(table), put=put, check=lambda p: None),
            state=state,
            app_id="app",
            new=NewFiles(files=files, txns={"app": 3}, metadata={}, partition_by=[]),
        )

    assert commit(base, [staged("f.parquet", 4)]) == 3
    assert [Path(p).name for p in tries] == [f"{2:020d}.json", f"{3:020d}.json"]
    mine = actions((table / "_delta_log" / f"{3:020d}.json").read_text())
    assert mine[0]["commitInfo"]["inCommitTimestamp"] == 5_000_000_000_001
    assert next(a["add"]["baseRowId"] for a in mine if "add" in a) == 20
    # a winner that holds the app's txn: nothing written
    (table / "_delta_log" / f"{4:020d}.json").write_text(
        _theirs({"txn": {"appId": "app", "version": 3}})
    )
    tries.clear()
    tries.append("taken")
    again = load_state(location, version=3, features=ROW_TRACKING, configuration=ON)
    assert commit(again, [staged("g.parquet", 1)]) is None
    assert not (table / "_delta_log" / f"{5:020d}.json").exists()


def test_the_domains_are_read_from_a_checkpoint(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]))
    _upgrade(table, 1, hwm=41)
    DeltaTable(str(table)).create_checkpoint()
    (table / "_delta_log" / f"{1:020d}.json").unlink()  # only the checkpoint has them
    (table / "_delta_log" / f"{2:020d}.json").write_text(
        _theirs({"commitInfo": {"inCommitTimestamp": 7}})
    )
    found = load_state(resolve(str(table)), version=2, features=ROW_TRACKING, configuration=ON)
    assert found.high_water_mark() == 41 and "delta.clustering" in found.domains
    assert found.ict == 7


def test_the_dead_letter_table_takes_its_letters_through_the_own_commit_once(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from spark_chkpt.delta.sink.dead_letters import DeadLetters
    from spark_chkpt.delta.table.target import DeltaTarget

    q = Query(tmp_path)
    first = pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])])
    write_deltalake(str(q.table), first, partition_by=["app"])
    _upgrade(q.table, 1, hwm=4)
    letters = DeadLetters(target=DeltaTarget(uri=str(q.table)), app_id=APP_ID)
    output = SimpleNamespace(dead_letter_files=q.stage(0, [1, 2]).files)
    done = letters.commit([output], batch_id=0, schema=SCHEMA)  # type: ignore[list-item]
    assert (done.rows, done.version) == (2, 2)
    found = actions((q.table / "_delta_log" / f"{2:020d}.json").read_text())
    assert [a["add"]["baseRowId"] for a in found if "add" in a] == [5]
    assert found[0]["commitInfo"]["chkpt.deadLetters"] == 2
    # the batch again (a retry after a conflict, a replay): found, nothing committed
    again = SimpleNamespace(dead_letter_files=q.stage(0, [1, 2]).files)
    assert letters.commit([again], batch_id=0, schema=SCHEMA).version == 2  # type: ignore[list-item]
    assert DeltaTable(str(q.table)).version() == 2
    assert sorted(DeltaTable(str(q.table)).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]


def test_a_generation_commit_recover_and_migrate_make_is_the_own_commit(tmp_path: Path) -> None:
    from spark_chkpt.delta.table.target import DeltaTarget
    from spark_chkpt.snapshot.epoch import generation_app_id

    table = tmp_path / "t"
    write_deltalake(str(table), pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]))
    _upgrade(table, 1, hwm=4)
    target = DeltaTarget(uri=str(table))
    target.start_generation(target.require(), app_id="app", generation=3, metadata={"k": "v"})
    found = DeltaTable(str(table))
    assert found.version() == 2
    assert found.transaction_version(generation_app_id("app")) == 3
    commit = actions((table / "_delta_log" / f"{2:020d}.json").read_text())
    assert commit[0]["commitInfo"]["inCommitTimestamp"] == 4_000_000_000_001
    assert commit[0]["commitInfo"]["k"] == "v"
    assert not any("add" in a or "domainMetadata" in a for a in commit)


def _dv(path: str) -> dict[str, Any]:
    return {"storageType": "u", "pathOrInlineDv": path, "offset": 1, "sizeInBytes": 36,
            "cardinality": 1}  # fmt: skip


def test_an_overwrite_removes_every_live_file_as_delta_spark_writes_the_remove(
    tmp_path: Path,
) -> None:
    from spark_chkpt.delta.log.overwrite import build_overwrite, live_files

    log_dir = tmp_path / "_delta_log"
    log_dir.mkdir()
    a = {"path": "a.parquet", "partitionValues": {}, "size": 10, "modificationTime": 1,
         "dataChange": True, "stats": '{"numRecords":2}', "baseRowId": 0,
         "defaultRowCommitVersion": 0}  # fmt: skip
    b = a | {"path": "b%20c.parquet", "baseRowId": 2, "stats": '{"numRecords":3}'}
    gone = a | {"path": "gone.parquet", "baseRowId": 5}
    commits = [
        [{"add": a}, {"add": b}, {"add": gone}],
        [{"remove": {"path": "gone.parquet", "dataChange": True}}],
        # delta-spark's DELETE with deletion vectors: the file again, with its DV
        [{"remove": b | {"dataChange": True}}, {"add": b | {"deletionVector": _dv("x")}}],
        [{"remove": b | {"deletionVector": _dv("x")}}, {"add": b | {"deletionVector": _dv("y")}}],
    ]
    for version, found in enumerate(commits):
        (log_dir / f"{version:020d}.json").write_text(_theirs(*found))
    live = live_files(resolve(str(tmp_path)), version=3)
    assert sorted(f["path"] for f in live) == ["a.parquet", "b%20c.parquet"]
    replacing = NewFiles(
        files=[staged("new.parquet", 4)],
        txns={"app": 3},
        metadata={"chkpt.batchId": 3},
        partition_by=[],
    )
    text = build_overwrite(state(version=3), live=live, new=replacing, now_ms=10_000)
    found = actions(text)
    info = found[0]["commitInfo"]
    assert info["operation"] == "WRITE" and info["operationParameters"]["mode"] == "Overwrite"
    assert info["isBlindAppend"] is False and info["inCommitTimestamp"] == 10_000
    removes = {r["remove"]["path"]: r["remove"] for r in found if "remove" in r}
    assert set(removes) == {"a.parquet", "b%20c.parquet"}
    rb = removes["b%20c.parquet"]
    assert rb["deletionVector"] == _dv("y") and rb["deletionTimestamp"] == 10_000
    assert rb["dataChange"] is True and rb["extendedFileMetadata"] is True
    assert (rb["size"], rb["partitionValues"], rb["baseRowId"]) == (10, {}, 2)
    assert rb["stats"] == '{"numRecords":3}' and rb["defaultRowCommitVersion"] == 0
    adds = [x["add"] for x in found if "add" in x]
    assert [x["baseRowId"] for x in adds] == [100] and adds[0]["defaultRowCommitVersion"] == 4
    txn = next(x["txn"] for x in found if "txn" in x)
    assert (txn["appId"], txn["version"]) == ("app", 3)


def test_complete_mode_replaces_a_row_tracked_table_through_the_own_commit(
    tmp_path: Path,
) -> None:
    """outputMode("complete") on a table delta-rs refuses: the commit removes every
    file of the version (one from a checkpoint, one from a JSON commit) and adds the
    new ones with row ids above the high-water mark and the txn."""
    import pyarrow.parquet as pq

    from spark_chkpt.delta.table.target import DeltaTarget

    table = tmp_path / "t"
    write_deltalake(str(table), pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]))
    _upgrade(table, 1, hwm=9)
    DeltaTable(str(table)).create_checkpoint()
    target = DeltaTarget(uri=str(table))

    def commit(name: str, ids: list[int], *, overwrite: bool, version: int) -> None:
        rows = pa.Table.from_batches([make_batch(SCHEMA, ids, ["b"] * len(ids))])
        pq.write_table(rows, table / name)
        file = StagedFile(
            path=name,
            size=(table / name).stat().st_size,
            partition_values={},
            modification_time=1,
            rows=len(ids),
            stats=json.dumps({"numRecords": len(ids)}),
        )
        target.commit(
            table=target.require(),
            schema=SCHEMA,
            partition_by=[],
            files=[file],
            app_id=APP_ID,
            version=version,
            metadata={"chkpt.batchId": version},
            overwrite=overwrite,
        )

    commit("one.parquet", [1], overwrite=False, version=0)  # an append: row id 10
    commit("new.parquet", [7, 8], overwrite=True, version=1)
    after = DeltaTable(str(table))
    assert after.version() == 3 and after.transaction_version(APP_ID) == 1
    assert sorted(after.to_pyarrow_table().column("id").to_pylist()) == [7, 8]
    found = actions((table / "_delta_log" / f"{3:020d}.json").read_text())
    assert len([x for x in found if "remove" in x]) == 2
    assert [x["add"]["baseRowId"] for x in found if "add" in x] == [11]


def test_the_after_own_commit_point_fires_once_the_commit_file_exists(tmp_path: Path) -> None:
    """``after-own-commit@N``: the file of batch N (its ``chkpt.batchId``) is there when
    the point fires; a commit that finds its txn already there (nothing written) and a
    commit of another batch do not fire it."""
    from spark_chkpt.failpoints import FaultPoint, enabled

    table = tmp_path / "t"
    write_deltalake(str(table), pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]))
    _upgrade(table, 1, hwm=9)
    location = resolve(str(table))
    fired: list[tuple[int, bool]] = []

    def seen(point: FaultPoint, batch_id: int) -> None:
        fired.append((batch_id, (table / "_delta_log" / f"{2:020d}.json").is_file()))

    def commit(version: int, batch: int) -> int | None:
        return commit_append(
            to=OwnCommit(
                location=location,
                uri=str(table),
                put=lambda at, text: put_if_absent(at, text, uri=str(table), storage_options={}),
                check=lambda p: None,
            ),
            state=load_state(location, version=version, features=ROW_TRACKING, configuration=ON),
            app_id="app",
            new=NewFiles(
                files=[staged(f"f{batch}.parquet", 1)],
                txns={"app": batch},
                metadata={"chkpt.batchId": batch},
                partition_by=[],
            ),
        )

    with enabled(FaultPoint.AFTER_OWN_COMMIT, seen, batch_id=7):
        assert commit(1, 7) == 2
        assert commit(1, 7) is None  # lost the race to its own commit: nothing written
        assert commit(2, 8) == 3
    assert fired == [(7, True)]
