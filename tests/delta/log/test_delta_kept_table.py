"""The Delta table a process keeps across batches (``DeltaTarget.latest``), on real
delta-rs tables: it reads only the new commits, yet every decision sees what a table
opened afresh would (other writers' commits, a table created again at the same path, a
protocol change), and the sink's commits across batches keep these rules."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.delta.table import reader as table_module
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import TableFeatureError
from tests.delta.features.test_table_features import _turn_on
from tests.delta.sink.test_coordinator import Query


def rows(n: int, first: int = 0) -> pa.Table:
    return pa.table({"id": list(range(first, first + n)), "s": [f"r{i}" for i in range(n)]})


def loads() -> dict[str, int]:
    return dict(table_module.LOADS)


def test_other_writers_commits_are_seen_by_applying_only_them(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_deltalake(uri, rows(2))
    target = DeltaTarget(uri=uri)
    kept = target.latest()
    assert kept is not None and kept.version() == 0
    before = loads()
    for v in range(1, 4):  # another writer's appends between "batches"
        write_deltalake(uri, rows(1, first=10 * v), mode="append")
        table = target.latest()
        assert table is kept  # the same table, advanced, not loaded again
        assert table.version() == v
        assert table.to_pyarrow_table().num_rows == 2 + v
    assert loads()["loaded"] == before["loaded"]
    assert loads()["advanced"] == before["advanced"] + 3
    # a call with nothing new returns it as it is
    assert target.latest() is kept and kept.version() == 3


def test_a_table_created_again_at_the_same_path_is_loaded_again(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_deltalake(uri, rows(2))
    write_deltalake(uri, rows(2), mode="append")
    target = DeltaTarget(uri=uri)
    old = target.latest()
    assert old is not None and old.version() == 1
    old_id = old.metadata().id
    # deleted and created again with more versions than the kept table had: applying
    # "versions 2.." onto the old table would serve the old table's files
    shutil.rmtree(uri)
    write_deltalake(uri, rows(5, first=100))
    for _ in range(3):
        write_deltalake(uri, rows(1, first=200), mode="append")
    table = target.latest()
    assert table is not None and table is not old
    assert table.version() == 3
    assert table.metadata().id != old_id
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [
        100,
        101,
        102,
        103,
        104,
        200,
        200,
        200,
    ]


def test_a_table_created_again_with_fewer_versions_is_loaded_again(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(4):
        write_deltalake(uri, rows(1, first=i), mode="append")
    target = DeltaTarget(uri=uri)
    assert target.latest().version() == 3  # type: ignore[union-attr]
    shutil.rmtree(uri)
    write_deltalake(uri, rows(3, first=50))
    table = target.latest()
    assert table is not None and table.version() == 0
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [50, 51, 52]


def test_a_deleted_table_is_none(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_deltalake(uri, rows(1))
    target = DeltaTarget(uri=uri)
    assert target.latest() is not None
    shutil.rmtree(uri)
    assert target.latest() is None


def test_a_feature_turned_on_between_batches_is_refused_at_the_next_commit(
    tmp_path: Path,
) -> None:
    q = Query(tmp_path)
    q.commit(0, q.stage(0, [1, 2]))  # creates the table; this process keeps it
    q.commit(1, q.stage(1, [3]))
    version = DeltaTable(str(q.table)).version()
    # column defaults: still refused (row tracking is committed: test_log_commit.py)
    _turn_on(q.table, version + 1, features=["allowColumnDefaults"])
    with pytest.raises(TableFeatureError) as raised:
        q.commit(2, q.stage(2, [4]))
    assert raised.value.feature == "allowColumnDefaults"
    assert DeltaTable(str(q.table)).version() == version + 1  # nothing committed


def test_batches_with_another_writer_between_them_commit_on_the_kept_table(
    tmp_path: Path,
) -> None:
    q = Query(tmp_path)
    first = q.commit(0, q.stage(0, [1, 2]))
    before = loads()
    write_deltalake(str(q.table), q_rows(), mode="append")  # another writer
    second = q.commit(1, q.stage(1, [3]))
    third = q.commit(2, q.stage(2, [4, 5]))
    assert loads()["loaded"] == before["loaded"]  # only the new commits were read
    assert (first.table_version, second.table_version, third.table_version) == (0, 2, 3)
    table = DeltaTable(str(q.table))
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3, 4, 5, 99]
    # a replay of batch 2 is found committed and discarded
    replay = q.commit(2, q.stage(2, [4, 5], task=1))
    assert replay.table_version == 3
    assert DeltaTable(str(q.table)).version() == 3


def q_rows() -> pa.Table:
    from tests.delta.sink.test_coordinator import SCHEMA, make_batch

    return pa.Table.from_batches([make_batch(SCHEMA, [99], ["a"])])


def test_the_txn_lookup_finds_a_commit_made_after_the_table_was_read(tmp_path: Path) -> None:
    q = Query(tmp_path)
    q.commit(0, q.stage(0, [1]))
    target = DeltaTarget(uri=str(q.table))
    stale = target.open()
    assert stale is not None
    q.commit(1, q.stage(1, [2]))
    found = target.find_txn_commit(stale, app_id=q.coordinator().app_id, txn_version=1)
    assert found is not None and found.version == 1


def test_upkeep_after_each_commit_advances_the_kept_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint upkeep after every commit reads the table kept across batches: it
    checkpoints at the table's interval without loading the table again (a reload per
    commit would read the log from its last checkpoint, a cost that grows with age)."""
    from spark_chkpt.delta.log.upkeep import no_hooks, upkeep

    uri = str(tmp_path / "t")
    write_deltalake(uri, rows(1), configuration={"delta.checkpointInterval": "4"})
    target = DeltaTarget(uri=uri)
    assert target.latest() is not None
    loaded = table_module.LOADS["loaded"]
    opened: list[str] = []
    fresh_open = DeltaTarget.open
    monkeypatch.setattr(
        DeltaTarget, "open", lambda self: opened.append(self.uri) or fresh_open(self)
    )
    done = []
    for i in range(1, 10):
        write_deltalake(uri, rows(1, first=i), mode="append", post_commithook_properties=no_hooks())
        done.append(upkeep(target))
    assert done == [None, None, None, 4, None, None, None, 8, None]
    assert table_module.LOADS["loaded"] == loaded  # advanced nine times, never reloaded
    assert opened == []
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 10


def test_the_kept_delta_rs_table_is_advanced_over_a_bounded_number_of_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delta-rs table brought up to date by ``update_incremental`` holds memory for
    every commit it was advanced over: a query's kept table, checkpointed for months,
    would grow without end. After INCREMENTAL_VERSIONS versions it is loaded afresh."""
    from deltalake import DeltaTable as RsTable

    from spark_chkpt.delta.log import state as log_state
    from spark_chkpt.delta.log.upkeep import no_hooks, upkeep

    monkeypatch.setattr(log_state, "INCREMENTAL_VERSIONS", 6)
    advanced: dict[int, int] = {}  # each delta-rs table object: versions advanced over
    incremental = RsTable.update_incremental

    def counted(self: RsTable) -> None:
        before = self.version()
        incremental(self)
        advanced[id(self)] = advanced.get(id(self), 0) + self.version() - before

    monkeypatch.setattr(RsTable, "update_incremental", counted)
    uri = str(tmp_path / "t")
    write_deltalake(uri, rows(1), configuration={"delta.checkpointInterval": "3"})
    target = DeltaTarget(uri=uri)
    assert target.latest() is not None
    kept_tables = []
    for i in range(1, 37):
        write_deltalake(uri, rows(1, first=i), mode="append", post_commithook_properties=no_hooks())
        upkeep(target)  # the kept table, brought up to date at each checkpoint
        kept_tables.append(log_state.delta_rs(target.latest()))
    assert sum(advanced.values()) > 0  # it was advanced, not loaded at each checkpoint
    assert max(advanced.values()) <= 6 + 3  # the bound, plus one checkpoint interval
    assert len({id(t) for t in kept_tables}) >= 36 // 9  # loaded afresh now and then
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 37
    assert target.latest().version() == 36
