"""The project's own RESTORE commit (issue 47): a rewind of a table delta-rs refuses to
restore (row tracking, in-commit timestamps, domain metadata): the actions it builds
(pure), a real table (delta-rs, with delta-spark's upgrade commit written into its log)
restored through :meth:`DeltaTarget.restore_to` and read back by delta-rs, from JSON
commits and from a checkpoint, and a lost race named. delta-spark reading a rewound
Databricks-default table: tests/delta/test_delta_features.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.delta.log.commit import LogState, load_state
from spark_chkpt.delta.log.restore import LogSnapshot, build_restore, commit_restore, dv_id
from spark_chkpt.delta.rollback import REWIND_KEY
from spark_chkpt.delta.table.actions import commit_properties
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import CommitConflictError
from spark_chkpt.fs import resolve
from tests.delta.log.test_log_commit import ON, ROW_TRACKING, _upgrade, actions
from tests.delta.sink.test_coordinator import APP_ID, SCHEMA, Query, make_batch

DV = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
      "sizeInBytes": 40, "cardinality": 1}  # fmt: skip


def add(path: str, base: int, **more: Any) -> dict[str, Any]:
    return {"path": path, "partitionValues": {}, "size": 10, "modificationTime": 1,
            "dataChange": False, "stats": '{"numRecords":5}', "baseRowId": base,
            "defaultRowCommitVersion": 1, **more}  # fmt: skip


def snapshot(version: int, *adds: dict[str, Any]) -> LogSnapshot:
    files = {(a["path"], dv_id(a.get("deletionVector"))): a for a in adds}
    return LogSnapshot(version=version, files=files, metadata={}, protocol={})


def state(version: int, ict: int, domains: dict[str, str]) -> LogState:
    return LogState(
        version=version, ict=ict, domains=domains, features=ROW_TRACKING, configuration=ON
    )


def test_a_restore_removes_and_adds_back_files_keeping_row_ids_and_the_high_water_mark() -> None:
    now = state(6, 9_000, {"delta.rowTracking": '{"rowIdHighWaterMark":29}',
                           "delta.clustering": '{"clusteringColumns":[["v"]]}',
                           "other.domain": "{}"})  # fmt: skip
    at = state(3, 5_000, {"delta.rowTracking": '{"rowIdHighWaterMark":9}',
                          "delta.clustering": '{"clusteringColumns":[["id"]]}'})  # fmt: skip
    text = build_restore(
        now,
        at,
        current=snapshot(6, add("a", 0), add("b", 5, deletionVector=DV), add("c", 10)),
        target=snapshot(3, add("a", 0), add("b", 5)),
        txns={"app": 1, "app#generation": 2},
        metadata={REWIND_KEY: '{"to_version":3}', "chkpt.batchId": 1},
        now_ms=1_000,  # a clock behind the last in-commit timestamp
    )
    found = actions(text)
    info = found[0]["commitInfo"]
    assert info["operation"] == "RESTORE" and info["operationParameters"]["version"] == 3
    assert info["inCommitTimestamp"] == info["timestamp"] == 9_001
    assert info[REWIND_KEY] == '{"to_version":3}' and info["readVersion"] == 6
    removes = [a["remove"] for a in found if "remove" in a]
    adds = [a["add"] for a in found if "add" in a]
    # b's deletion vector came after version 3: b is removed with it, added back without
    assert sorted((r["path"], "deletionVector" in r) for r in removes) == [
        ("b", True),
        ("c", False),
    ]
    assert all(r["dataChange"] and r["baseRowId"] is not None for r in removes)
    assert [(a["path"], a["baseRowId"], a["dataChange"]) for a in adds] == [("b", 5, True)]
    assert "deletionVector" not in adds[0] and adds[0]["defaultRowCommitVersion"] == 1
    domains = {a["domainMetadata"]["domain"]: a["domainMetadata"] for a in found
               if "domainMetadata" in a}  # fmt: skip
    assert "delta.rowTracking" not in domains  # the high-water mark is not lowered
    assert domains["delta.clustering"]["configuration"] == '{"clusteringColumns":[["id"]]}'
    assert domains["other.domain"]["removed"] is True
    assert {(t["txn"]["appId"], t["txn"]["version"]) for t in found if "txn" in t} == {
        ("app", 1),
        ("app#generation", 2),
    }


def rows_tracked_table(tmp_path: Path) -> Query:
    """A table with row tracking and in-commit timestamps (delta-spark's upgrade commit)
    holding three batches of the coordinator: versions 2, 3 and 4."""
    q = Query(tmp_path)
    write_deltalake(str(q.table), pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]))
    _upgrade(q.table, 1, hwm=9)
    for b in range(3):
        q.commit(b, q.stage(b, [10 * b + 1, 10 * b + 2]))
    return q


def restore(q: Query, version: int) -> DeltaTarget:
    target = DeltaTarget(uri=str(q.table))
    props = commit_properties(
        metadata={REWIND_KEY: json.dumps({"to_version": version})},
        app_id=APP_ID,
        version=0,
    )
    target.restore_to(target.require(), version, props=props)
    return target


def ids(table: Path, version: int | None = None) -> list[int]:
    delta = DeltaTable(str(table), version=version)
    return sorted(delta.to_pyarrow_table(columns=["id"]).column("id").to_pylist())


@pytest.mark.parametrize("checkpointed", [False, True])
def test_a_row_tracked_table_is_restored_by_the_own_commit_and_read_back_by_delta_rs(
    tmp_path: Path, checkpointed: bool
) -> None:
    q = rows_tracked_table(tmp_path)
    at_2 = ids(q.table, 2)
    if checkpointed:  # the live files of both versions come from the checkpoint of 2
        DeltaTable(str(q.table), version=2).create_checkpoint()
        for v in range(3):
            (q.table / "_delta_log" / f"{v:020d}.json").unlink()
    restore(q, 2)
    delta = DeltaTable(str(q.table))
    assert delta.version() == 5 and ids(q.table) == at_2 == [0, 1, 2]
    assert delta.transaction_version(APP_ID) == 0
    found = actions((q.table / "_delta_log" / f"{5:020d}.json").read_text())
    assert found[0]["commitInfo"]["operation"] == "RESTORE"
    assert REWIND_KEY in found[0]["commitInfo"]
    assert len([a for a in found if "remove" in a]) == 2
    assert not [a for a in found if "add" in a]  # version 2's files are all live
    location = resolve(str(q.table))
    after = load_state(location, version=5, features=ROW_TRACKING, configuration=ON)
    assert after.high_water_mark() == 15  # 10..15 assigned to batches 0..2: kept
    assert after.ict is not None and after.ict > 4_000_000_000_002
    # the re-run batch 1 gets row ids above the mark, not the ones batch 1 had
    q.commit(1, q.stage(1, [11, 12]))
    again = actions((q.table / "_delta_log" / f"{6:020d}.json").read_text())
    assert [a["add"]["baseRowId"] for a in again if "add" in a] == [16]
    assert ids(q.table) == [0, 1, 2, 11, 12]


def test_a_lost_race_is_named_and_nothing_is_restored(tmp_path: Path) -> None:
    q = rows_tracked_table(tmp_path)
    location = resolve(str(q.table))
    now, at = (load_state(location, version=v, features=ROW_TRACKING, configuration=ON)
               for v in (4, 2))  # fmt: skip
    with pytest.raises(CommitConflictError) as caught:
        commit_restore(
            location=location,
            uri=str(q.table),
            now=now,
            at=at,
            txns={APP_ID: 0},
            metadata={},
            put=lambda where, text: False,  # another writer's version 5 is there
        )
    assert "another writer committed version 5" in str(caught.value)
    assert str(q.table) in str(caught.value)
    assert ids(q.table) == [0, 1, 2, 11, 12, 21, 22]


def base_row_ids(table: Path, version: int) -> list[int]:
    found = actions((table / "_delta_log" / f"{version:020d}.json").read_text())
    return [a["add"]["baseRowId"] for a in found if "add" in a]


def test_files_added_back_from_a_checkpoint_keep_their_row_ids(tmp_path: Path) -> None:
    q = rows_tracked_table(tmp_path)
    before = base_row_ids(q.table, 3) + base_row_ids(q.table, 4)
    assert before == [12, 14]
    restore(q, 2)  # version 5: batches 1 and 2 removed
    DeltaTable(str(q.table), version=4).create_checkpoint()
    for v in range(5):
        (q.table / "_delta_log" / f"{v:020d}.json").unlink()
    restore(q, 4)  # version 6: added back, read from the checkpoint of 4
    found = actions((q.table / "_delta_log" / f"{6:020d}.json").read_text())
    adds = [a["add"] for a in found if "add" in a]
    assert sorted(a["baseRowId"] for a in adds) == before
    assert all(a["dataChange"] and a["defaultRowCommitVersion"] in (3, 4) for a in adds)
    assert ids(q.table) == [0, 1, 2, 11, 12, 21, 22]
