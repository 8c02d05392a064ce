"""The table a process keeps across batches (spark_chkpt/delta/log/state.py), on real
delta-rs tables: a batch's work does not grow with the table's history (no listing of
``_delta_log``, by delta-rs or the project, on a batch that makes no checkpoint), and
what the sink decides on the kept table stays exactly once when another writer commits,
OPTIMIZEs and VACUUMs, or replaces the table between batches."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.delta.log import state as log_state
from spark_chkpt.fs import Location
from tests.delta.log.test_log_commit import _upgrade
from tests.delta.sink.test_coordinator import APP_ID, SCHEMA, Query, make_batch

# delta-rs calls that list _delta_log (delta-rs 1.x: each load, advance or commit)
LISTING = (
    "__init__",
    "update_incremental",
    "load_as_version",
    "create_write_transaction",
    "cleanup_metadata",
    "history",
)


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Calls that list ``_delta_log``: delta-rs's (:data:`LISTING`) and the project's own
    (``Location.list`` of a ``_delta_log``)."""
    seen: Counter[str] = Counter()

    def counting(name: str, original: Any) -> Any:
        def counted(self: object, *a: object, **k: object) -> object:
            seen[name] += 1
            return original(self, *a, **k)

        return counted

    for name in LISTING:
        monkeypatch.setattr(DeltaTable, name, counting(name, getattr(DeltaTable, name)))
    listing = Location.list

    def counted_list(self: Location, *a: object, **k: object) -> object:
        if "_delta_log" in self.path:
            seen["Location.list"] += 1
        return listing(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(Location, "list", counted_list)
    yield seen


def _age(table: Path, *, first: int, versions: int) -> None:
    """``versions`` commits of another writer after ``first - 1`` (a txn each), written
    as JSON commits (an aged log without waiting for delta-rs)."""
    for v in range(first, first + versions):
        actions = [
            {"commitInfo": {"timestamp": 1_700_000_000_000 + v, "operation": "WRITE"}},
            {"txn": {"appId": "other-job", "version": v, "lastUpdated": 1}},
        ]
        path = table / "_delta_log" / f"{v:020d}.json"
        path.write_text("".join(json.dumps(a) + "\n" for a in actions))


def _ids(q: Query) -> list[int]:
    return sorted(DeltaTable(str(q.table)).to_pyarrow_table().column("id").to_pylist())


@pytest.mark.parametrize("row_tracking", [False, True], ids=["plain", "row-tracked"])
def test_a_batch_lists_no_log_whatever_the_tables_age(
    tmp_path: Path, listings: Counter[str], row_tracking: bool
) -> None:
    """Before: every batch listed the log three times through delta-rs (advance, and
    twice in its commit) and, on a row-tracked table, once more for the own commit's
    domains; each listing reads every name in ``_delta_log``."""
    q = Query(tmp_path)
    write_deltalake(
        str(q.table),
        pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]),
        configuration={"delta.checkpointInterval": "1000"},  # no checkpoint in this test
    )
    first = 1
    if row_tracking:
        _upgrade(q.table, 1, hwm=0)
        first = 2
    _age(q.table, first=first, versions=150)
    q.commit(0, q.stage(0, [1]))  # the process loads the table once
    listings.clear()
    reads = log_state.LOADS["read"]
    for b in range(1, 6):
        q.commit(b, q.stage(b, [b + 1]))
    assert dict(listings) == {}
    # each batch reads its own new commit (and nothing of the history)
    assert log_state.LOADS["read"] - reads == 5
    assert _ids(q) == [0, 1, 2, 3, 4, 5, 6]
    table = DeltaTable(str(q.table))
    assert table.transaction_version(APP_ID) == 5
    assert table.transaction_version("other-job") == first + 149


def test_a_checkpoint_batch_lists_the_log_once_more(tmp_path: Path, listings: Counter[str]) -> None:
    """The batch whose version is due a checkpoint brings delta-rs up to date to write it
    (one listing) and cleans expired log files (one more): twice per interval."""
    q = Query(tmp_path)
    write_deltalake(
        str(q.table),
        pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]),
        configuration={"delta.checkpointInterval": "5"},
    )
    q.commit(0, q.stage(0, [1]))
    listings.clear()
    for b in range(1, 11):
        q.commit(b, q.stage(b, [b + 1]))
    assert listings["update_incremental"] == 2 and listings["create_write_transaction"] == 0
    assert (q.table / "_delta_log" / f"{10:020d}.checkpoint.parquet").exists()
    assert _ids(q) == list(range(12))


def test_another_writers_commits_between_batches_each_batch_once(tmp_path: Path) -> None:
    q = Query(tmp_path)
    q.commit(0, q.stage(0, [1]))
    for b in range(1, 4):
        other = pa.Table.from_batches([make_batch(SCHEMA, [100 + b], ["b"])])
        write_deltalake(str(q.table), other, mode="append")
        staged = q.stage(b, [b + 1])
        q.commit(b, staged)
        q.commit(b, q.stage(b, [b + 1], task=1))  # a replay: found done, discarded
    assert _ids(q) == [1, 2, 3, 4, 101, 102, 103]
    assert DeltaTable(str(q.table)).transaction_version(APP_ID) == 3


def test_optimize_and_vacuum_by_another_job_between_batches(tmp_path: Path) -> None:
    q = Query(tmp_path)
    for b in range(3):
        q.commit(b, q.stage(b, [10 * b, 10 * b + 1]))
    loaded = log_state.LOADS["loaded"]
    other = DeltaTable(str(q.table))
    other.optimize.compact()
    other.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    q.commit(3, q.stage(3, [30]))
    q.commit(2, q.stage(2, [20, 21], task=1))  # a replay of batch 2 after the rewrite
    q.commit(4, q.stage(4, [40]))
    assert _ids(q) == [0, 1, 10, 11, 20, 21, 30, 40]
    table = DeltaTable(str(q.table))
    assert table.transaction_version(APP_ID) == 4
    assert log_state.LOADS["loaded"] == loaded  # rewrites need no reload
    ops = [h["operation"] for h in table.history()]
    assert "OPTIMIZE" in ops and "VACUUM END" in ops


@pytest.mark.parametrize("versions", [1, 6], ids=["fewer-versions", "more-versions"])
def test_a_table_replaced_under_the_query_is_loaded_again(tmp_path: Path, versions: int) -> None:
    """Deleted and created again at the same path by another job (its own rows, no txn
    of the query): the kept txn version must not make the next batch look committed,
    nor its version put the commit at a wrong version."""
    q = Query(tmp_path)
    for b in range(3):
        q.commit(b, q.stage(b, [b]))
    shutil.rmtree(q.table)
    for i in range(versions):
        other = pa.Table.from_batches([make_batch(SCHEMA, [500 + i], ["b"])])
        write_deltalake(str(q.table), other, mode="append")
    q.commit(3, q.stage(3, [3]))
    q.commit(3, q.stage(3, [3], task=1))  # a replay on the new table: once
    assert _ids(q) == sorted([3, *(500 + i for i in range(versions))])
    table = DeltaTable(str(q.table))
    assert table.version() == versions and table.transaction_version(APP_ID) == 3


def test_a_restore_by_another_job_between_batches(tmp_path: Path) -> None:
    q = Query(tmp_path)
    for b in range(3):
        q.commit(b, q.stage(b, [b]))
    DeltaTable(str(q.table)).restore(1)  # rows of batches 0 and 1; txn stays at 2
    q.commit(3, q.stage(3, [3]))
    q.commit(2, q.stage(2, [2], task=1))  # batch 2's txn is still there: discarded
    assert _ids(q) == [0, 1, 3]
    assert DeltaTable(str(q.table)).transaction_version(APP_ID) == 3


def test_the_kept_table_is_read_by_delta_rs_query_builder(tmp_path: Path) -> None:
    """The sink's readers that hand the table to delta-rs's DataFusion (its rows with
    column mapping and deletion vectors applied; DeltaUpsert's lookup of a batch's
    deletes on a change-feed table) take the kept table too: QueryBuilder reads the
    delta-rs table's private ``_table``, which the kept view does not forward."""
    import pyarrow.dataset as ds

    from spark_chkpt.delta.table.target import DeltaTarget
    from spark_chkpt.delta.upsert.merge import KeyedMerge

    table = tmp_path / "t"
    write_deltalake(
        str(table),
        pa.Table.from_batches([make_batch(SCHEMA, [1, 2], ["a", "b"])]),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    target = DeltaTarget(uri=str(table))
    kept = target.latest()
    assert isinstance(kept, log_state.KeptTable)
    assert sorted(target.rows(kept).column("id").to_pylist()) == [1, 2]
    staged = pa.table({"id": [2, 3], "flag": [True, True]})
    merger = KeyedMerge(target=target, keys=["id"], delete_column="flag")
    absent = merger.absent_deletes(kept, staged=ds.dataset(staged), delete="flag")
    assert absent == {(3,)}
