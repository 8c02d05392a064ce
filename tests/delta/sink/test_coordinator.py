"""The Delta coordinator's decisions (phase 2 of the commit) on a real Delta table in
``tmp_path``: first commit, replays, partial commits, abort, schema checks, orphan
cleanup, other writers, retained snapshots and empty batches.

Component tests without Spark: the output is staged by calling :class:`ParquetStager`
directly, and Spark's checkpoint folder (``metadata``, ``offsets/<N>``) is written here.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.delta.sink.committer import DeltaCoordinator
from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.delta.staging import STAGED_NAME, ParquetStager, StagedOutput
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import QueryIdentityError, SchemaMismatchError
from spark_chkpt.fs import resolve
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings
from spark_chkpt.snapshot.store import SnapshotStore

APP_ID = "3f9d0c1e-query-id"
OTHER_APP = "77aa01b2-other-query-id"
SPARK_TS = pa.timestamp("us", tz="Etc/UTC")  # what Spark's Arrow batches carry
SCHEMA = pa.schema([("id", pa.int64()), ("app", pa.string()), ("ts", SPARK_TS)])
T0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
OLD = 3 * 3600  # seconds an "old" staged file is backdated by


class Query:
    """One streaming query's table and checkpoint folder under ``tmp_path``."""

    def __init__(self, root: Path) -> None:
        self.table = root / "table"
        self.checkpoint = root / "checkpoint"
        (self.checkpoint / "offsets").mkdir(parents=True)
        (self.checkpoint / "metadata").write_text(json.dumps({"id": APP_ID}))

    # -- Spark's checkpoint ------------------------------------------------------------

    def plan(self, batch_id: int, *sources: Any) -> list[Any]:
        """Write ``offsets/<batch_id>`` as Spark does; returns the source offsets."""
        if not sources:
            sources = ({"events": {"0": 10 * (batch_id + 1), "1": 5 * batch_id}},)
        meta = {
            "batchWatermarkMs": 0,
            "batchTimestampMs": 1714564800000 + batch_id,
            "conf": {"spark.sql.shuffle.partitions": "2"},
        }
        lines = ["v1", json.dumps(meta)]
        lines += ["-" if s is None else json.dumps(s) for s in sources]
        (self.checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines) + "\n")
        return list(sources)

    # -- phase 1 -------------------------------------------------------------------------

    def stage(
        self,
        batch_id: int,
        ids: list[int],
        *,
        apps: list[str | None] | None = None,
        schema: pa.Schema = SCHEMA,
        task: int = 0,
        app_id: str = APP_ID,
    ) -> StagedOutput:
        """Stage rows ``ids`` (app ``"a"`` unless given) as one task attempt of the
        writer ``app_id``."""
        stager = ParquetStager(
            table=resolve(str(self.table)),
            schema=schema,
            partition_by=["app"],
            app_id=app_id,
            batch_id=batch_id,
            task=task,
            max_records_per_file=1000,
            target_file_bytes=1 << 26,
        )
        stager.add(make_batch(schema, ids, apps or ["a"] * len(ids)))
        return stager.finish()

    # -- phase 2 -------------------------------------------------------------------------

    def coordinator(
        self,
        *,
        merge_schema: bool = False,
        retained: int = 10,
        orphan_retention_s: float = 3600.0,
        app_id: str = APP_ID,
        refuse_other_writers: bool = False,
    ) -> DeltaCoordinator:
        return DeltaCoordinator(
            config=sink_config(
                table=str(self.table),
                checkpoint=str(self.checkpoint),
                merge_schema=merge_schema,
                orphan_retention_ms=int(orphan_retention_s * 1000),
                other_writers="refuse" if refuse_other_writers else "allow",
            ),
            snapshot=SnapshotSettings(
                checkpoint_location=str(self.checkpoint),
                app_id=app_id,
                query_name="events_to_delta",
                retained_snapshots=retained,
            ),
        )

    def commit(
        self,
        batch_id: int,
        *messages: StagedOutput | None,
        schema: pa.Schema = SCHEMA,
        **settings: Any,
    ) -> SnapshotRecord:
        self.plan(batch_id)
        return self.coordinator(**settings).commit(
            messages=list(messages), batch_id=batch_id, schema=schema
        )

    # -- what is there now ---------------------------------------------------------------

    def delta(self) -> DeltaTable:
        return DeltaTable(str(self.table))

    def rows(self, *columns: str) -> list[tuple[Any, ...]]:
        cols = columns or ("id", "app")
        data = self.delta().to_pyarrow_table().select(list(cols)).to_pylist()
        return sorted((tuple(r[c] for c in cols) for r in data), key=repr)

    def store(self, retained: int = 10) -> SnapshotStore:
        return SnapshotStore(checkpoint_location=str(self.checkpoint), retained=retained)

    def exists(self, output: StagedOutput) -> list[bool]:
        return [(self.table / f.path).is_file() for f in output.files]

    def staged_on_disk(self) -> set[str]:
        return {
            p.relative_to(self.table).as_posix()
            for p in self.table.rglob("*")
            if STAGED_NAME.match(p.name)
        }

    def backdate(self, *outputs: StagedOutput, seconds: float = OLD) -> None:
        when = time.time() - seconds
        for output in outputs:
            for f in output.files:
                os.utime(self.table / f.path, (when, when))


def sink_config(
    *,
    table: str,
    checkpoint: str,
    merge_schema: bool = False,
    orphan_retention_ms: int = 3_600_000,
    other_writers: str = "refuse",
    dead_letter_path: str | None = None,
) -> DeltaSinkConfig:
    """The options of the ``chkpt-delta`` sink the coordinator reads (the protocol's own
    come from its SnapshotSettings)."""
    return DeltaSinkConfig(
        path=table,
        checkpoint_location=checkpoint,
        query_name="events_to_delta",
        partition_by=("app",),
        merge_schema=merge_schema,
        txn_app_id=None,
        retained_snapshots=10,
        max_records_per_file=1_000_000,
        target_file_bytes=128 * 1024**2,
        orphan_retention_ms=orphan_retention_ms,
        storage_options={},
        other_writers=other_writers,
        dead_letter_path=dead_letter_path,
    )


def make_batch(schema: pa.Schema, ids: list[int], apps: list[str | None]) -> pa.RecordBatch:
    """Rows for ``schema``: ``id`` from ``ids``, ``app`` from ``apps``, ``ts`` from the id,
    any other column derived from the id (``n<id>`` for strings)."""
    columns = []
    for f in schema:
        if f.name == "app":
            values: list[Any] = apps
        elif pa.types.is_timestamp(f.type):
            values = [T0 + dt.timedelta(seconds=i) for i in ids]
        elif pa.types.is_string(f.type):
            values = [str(i) if f.name == "id" else f"n{i}" for i in ids]
        else:
            values = ids
        columns.append(pa.array(values, f.type))
    return pa.record_batch(columns, schema=schema)


def history_records(table: DeltaTable) -> dict[int, tuple[int, SnapshotRecord]]:
    """batch id -> (Delta version, snapshot record) from the commitInfo of each commit."""
    found = {}
    for entry in table.history():
        if SNAPSHOT_KEY in entry:
            record = SnapshotRecord.from_json(entry[SNAPSHOT_KEY])
            found[record.batch_id] = (entry["version"], record)
    return found


@pytest.fixture
def q(tmp_path: Path) -> Query:
    return Query(tmp_path)


# -- 1. first commit -------------------------------------------------------------------


def test_first_commit_creates_partitioned_table_and_records_snapshot(q: Query) -> None:
    offsets = q.plan(0, {"events": {"0": 3, "1": 1}}, None)
    a = q.stage(0, [1, 2, 3], apps=["a", "b", "a"], task=0)
    b = q.stage(0, [4], apps=["a"], task=1)

    record = q.coordinator().commit(messages=[a, None, b], batch_id=0, schema=SCHEMA)

    assert record.outcome == CommitOutcome.COMMITTED.value == "committed"
    assert (record.batch_id, record.app_id, record.sink) == (0, APP_ID, "chkpt-delta")
    assert record.source_offsets == offsets == [{"events": {"0": 3, "1": 1}}, None]
    assert (record.rows, record.files) == (4, len(a.files) + len(b.files)) == (4, 3)
    assert record.bytes == a.bytes + b.bytes
    assert record.table_version == 0
    assert record.attempts == sorted([a.attempt, b.attempt])

    table = q.delta()
    assert table.version() == 0
    assert table.metadata().partition_columns == ["app"]
    assert table.transaction_version(APP_ID) == 0
    assert q.rows() == [(1, "a"), (2, "b"), (3, "a"), (4, "a")]
    got = table.to_pyarrow_table()
    assert got.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert sorted(got.column("ts").to_pylist()) == [
        T0 + dt.timedelta(seconds=i) for i in (1, 2, 3, 4)
    ]

    assert q.store().batch_ids() == [0]
    assert q.store().get(0) == record
    version, in_log = history_records(table)[0]
    assert version == 0
    assert in_log.source_offsets == offsets
    assert (in_log.rows, in_log.files, in_log.attempts) == (4, 3, record.attempts)
    assert [e.get("chkpt.batchId") for e in table.history() if SNAPSHOT_KEY in e] == [0]
    assert all(q.exists(a)) and all(q.exists(b))


def test_next_batch_appends_with_its_own_txn_version(q: Query) -> None:
    first = q.commit(0, q.stage(0, [1]))
    second = q.commit(1, q.stage(1, [2], apps=["b"]))

    assert (first.table_version, second.table_version) == (0, 1)
    assert second.source_offsets == [{"events": {"0": 20, "1": 5}}]
    assert q.delta().transaction_version(APP_ID) == 1
    assert q.rows() == [(1, "a"), (2, "b")]
    assert q.store().batch_ids() == [0, 1]
    assert sorted(history_records(q.delta())) == [0, 1]


def test_partition_values_needing_quoting_round_trip(q: Query) -> None:
    staged = q.stage(0, [1, 2, 3], apps=["a b/c", None, "ü%"])
    q.commit(0, staged)

    assert q.rows() == [(1, "a b/c"), (2, None), (3, "ü%")]
    assert q.staged_on_disk() == {f.path for f in staged.files}


# -- 2. replay of a committed batch ----------------------------------------------------


def test_replay_with_new_attempt_returns_stored_record_and_discards_attempt(q: Query) -> None:
    original = q.stage(0, [1, 2], apps=["a", "b"])
    first = q.commit(0, original)

    retry = q.stage(0, [1, 2], apps=["a", "b"])  # Spark re-ran the batch: same rows
    assert retry.attempt != original.attempt and all(q.exists(retry))
    again = q.commit(0, retry)

    assert again == first == q.store().get(0)
    assert q.delta().version() == 0
    assert q.delta().transaction_version(APP_ID) == 0
    assert q.rows() == [(1, "a"), (2, "b")]
    assert not any(q.exists(retry))
    assert all(q.exists(original))
    assert q.store().batch_ids() == [0]


def test_replay_of_an_older_batch_is_discarded_too(q: Query) -> None:
    q.commit(0, q.stage(0, [1]))
    q.commit(1, q.stage(1, [2]))

    late = q.stage(0, [1])
    record = q.commit(0, late)

    assert record.batch_id == 0 and record == q.store().get(0)
    assert q.delta().version() == 1
    assert q.rows() == [(1, "a"), (2, "a")]
    assert not any(q.exists(late))


# -- 3. partial: Delta commit done, snapshot record lost -------------------------------


def test_replay_repairs_lost_snapshot_record_from_commit_info(q: Query) -> None:
    original = q.stage(0, [1, 2, 3])
    first = q.commit(0, original)
    (q.checkpoint / "chkpt" / "snapshots" / "0.json").unlink()
    assert q.store().batch_ids() == []

    retry = q.stage(0, [1, 2, 3])
    repaired = q.commit(0, retry)

    assert repaired.table_version == 0
    assert repaired.outcome == "committed"
    assert (repaired.rows, repaired.files, repaired.bytes) == (3, 1, first.bytes)
    assert repaired.source_offsets == first.source_offsets
    assert repaired.attempts == [original.attempt]
    assert q.store().batch_ids() == [0]
    assert q.store().get(0) == repaired
    assert q.delta().version() == 0
    assert q.rows() == [(1, "a"), (2, "a"), (3, "a")]
    assert not any(q.exists(retry)) and all(q.exists(original))


def test_replay_without_any_record_writes_a_duplicate_record(q: Query) -> None:
    # txn(app, 0) in the table but no snapshot in commitInfo or in the store.
    original = q.stage(0, [1])
    DeltaTarget(uri=str(q.table)).commit(
        table=None,
        schema=SCHEMA,
        partition_by=["app"],
        files=original.files,
        app_id=APP_ID,
        version=0,
        metadata={},
    )
    retry = q.stage(0, [1])
    record = q.commit(0, retry)

    assert record.outcome == CommitOutcome.DUPLICATE.value
    assert (record.batch_id, record.table_version, record.rows) == (0, None, 0)
    assert record.source_offsets == q.plan(0)
    assert q.store().get(0) == record
    assert q.rows() == [(1, "a")]
    assert not any(q.exists(retry)) and all(q.exists(original))


# -- 3b. query identity: the table's batch N came from other offsets ----------------------


def test_replay_with_other_source_offsets_fails_naming_both(q: Query) -> None:
    # A fresh checkpoint reusing the app id (txnAppId) planned batch 0 differently.
    q.plan(0, {"events": {"0": 3, "1": 1}})
    first = q.coordinator().commit(messages=[q.stage(0, [1, 2, 3, 4])], batch_id=0, schema=SCHEMA)
    q.plan(0, {"events": {"0": 7, "1": 2}})
    retry = q.stage(0, [1, 2, 3, 4, 5, 6, 7, 8, 9])

    with pytest.raises(QueryIdentityError) as raised:
        q.coordinator().commit(messages=[retry], batch_id=0, schema=SCHEMA)

    text = str(raised.value)
    assert str(q.table) in text and APP_ID in text and "batch 0" in text
    assert "events-0: 3" in text and "events-0: 7" in text  # both offset sets
    assert "txnAppId" in text and "copies" in text  # the fix
    assert q.delta().version() == 0 and q.delta().transaction_version(APP_ID) == 0
    assert q.rows() == [(1, "a"), (2, "a"), (3, "a"), (4, "a")]  # nothing lost or added
    assert q.store().get(0) == first


def test_replay_of_an_older_batch_with_other_offsets_fails(q: Query) -> None:
    # A copy of the checkpoint: the original committed 0 and 1, the copy plans 1 anew.
    q.commit(0, q.stage(0, [1]))
    q.commit(1, q.stage(1, [2]))
    q.plan(0, {"events": {"0": 99, "1": 0}})

    with pytest.raises(QueryIdentityError, match=r"batch 0 .*events-0: 99"):
        q.coordinator().commit(messages=[q.stage(0, [1])], batch_id=0, schema=SCHEMA)
    assert q.rows() == [(1, "a"), (2, "a")]


def test_replay_compares_positions_not_the_alignment_report(q: Query) -> None:
    offsets = {"events": {"0": 3}}
    q.plan(0, {**offsets, "__chkpt__": {"topics": {"events": {"mode": "aligned"}}}})
    first = q.coordinator().commit(messages=[q.stage(0, [1])], batch_id=0, schema=SCHEMA)
    q.plan(0, {**offsets, "__chkpt__": {"topics": {"events": {"mode": "unaligned"}}}})

    again = q.coordinator().commit(messages=[q.stage(0, [1])], batch_id=0, schema=SCHEMA)

    assert again == first and q.rows() == [(1, "a")]


def test_batch_behind_the_table_whose_commit_is_gone_fails(q: Query) -> None:
    # txn(app) = 2 > 0 but the log no longer has batch 0's commit (a checkpoint was
    # written and the older JSON commits cleaned up): it cannot be verified.
    for batch_id in range(3):
        q.commit(batch_id, q.stage(batch_id, [batch_id]))
    q.delta().create_checkpoint()
    for version in (0, 1):
        (q.table / "_delta_log" / f"{version:020d}.json").unlink()
    (q.checkpoint / "chkpt" / "snapshots" / "0.json").unlink()

    with pytest.raises(QueryIdentityError, match=r"no longer holds .*batch 0"):
        q.commit(0, q.stage(0, [0]))
    assert q.rows() == [(0, "a"), (1, "a"), (2, "a")]


# -- 3c. our commit far back in a busy table's history -----------------------------------


def test_replay_finds_its_commit_behind_many_commits_of_other_writers(q: Query) -> None:
    q.commit(0, q.stage(0, [1]))
    committed = q.commit(1, q.stage(1, [2]))
    for i in range(60):
        write_deltalake(
            str(q.table),
            pa.table(
                {
                    "id": pa.array([1000 + i], pa.int64()),
                    "app": ["other"],
                    "ts": pa.array([T0], pa.timestamp("us", tz="UTC")),
                }
            ),
            mode="append",
            partition_by=["app"],
        )
    assert q.delta().version() == 61
    (q.checkpoint / "chkpt" / "snapshots" / "1.json").unlink()  # lost in a crash

    repaired = q.commit(1, q.stage(1, [2]))

    assert repaired.outcome == "committed"
    assert repaired.table_version == committed.table_version == 1
    assert (repaired.rows, repaired.attempts) == (1, committed.attempts)
    assert q.store().get(1) == repaired
    assert q.delta().version() == 61


# -- 4. abort ----------------------------------------------------------------------------


def test_abort_deletes_the_attempts_files_only(q: Query) -> None:
    committed = q.stage(0, [1])
    q.commit(0, committed)
    failed = [q.stage(1, [2, 3], apps=["a", "b"], task=0), q.stage(1, [4], task=1)]

    removed = q.coordinator().abort(messages=[failed[0], None, failed[1]], batch_id=1)

    assert removed == 3
    assert not any(q.exists(failed[0]) + q.exists(failed[1]))
    assert all(q.exists(committed))
    assert q.delta().version() == 0
    assert q.delta().transaction_version(APP_ID) == 0
    assert q.rows() == [(1, "a")]
    assert q.store().batch_ids() == [0]


def test_abort_before_the_table_exists(q: Query) -> None:
    failed = q.stage(0, [1, 2], apps=["a", "b"])
    assert q.coordinator().abort(messages=[failed], batch_id=0) == 2
    assert q.staged_on_disk() == set()
    assert not DeltaTable.is_deltatable(str(q.table))


def test_abort_never_deletes_files_the_table_references(q: Query) -> None:
    committed = q.stage(0, [1, 2, 3], apps=["a b/c", None, "x"])  # quoted paths too
    q.commit(0, committed)

    assert q.coordinator().abort(messages=[committed], batch_id=0) == 0

    assert all(q.exists(committed))
    assert q.rows() == [(1, "a b/c"), (2, None), (3, "x")]
    assert q.delta().version() == 0


# -- 5. schema ---------------------------------------------------------------------------

WITH_NOTE = SCHEMA.append(pa.field("note", pa.string()))
ID_AS_STRING = pa.schema([("id", pa.string()), ("app", pa.string()), ("ts", SPARK_TS)])


def test_new_column_fails_the_batch_naming_it(q: Query) -> None:
    q.commit(0, q.stage(0, [1]))
    staged = q.stage(1, [2], schema=WITH_NOTE)

    with pytest.raises(SchemaMismatchError, match=r"no column\(s\) note .*mergeSchema"):
        q.commit(1, staged, schema=WITH_NOTE)

    assert q.delta().version() == 0
    assert q.delta().transaction_version(APP_ID) == 0
    assert "note" not in q.delta().to_pyarrow_table().column_names
    assert q.store().batch_ids() == [0]


def test_merge_schema_adds_the_column_and_old_rows_read_null(q: Query) -> None:
    q.commit(0, q.stage(0, [1]))
    record = q.commit(1, q.stage(1, [2, 3], schema=WITH_NOTE), schema=WITH_NOTE, merge_schema=True)

    assert record.outcome == "committed"
    table = q.delta()
    assert table.transaction_version(APP_ID) == 1
    assert record.table_version == table.version()
    assert [f.name for f in table.schema().fields] == ["id", "app", "ts", "note"]
    assert q.rows("id", "note") == [(1, None), (2, "n2"), (3, "n3")]
    # The next batch with the evolved schema fits without mergeSchema.
    q.commit(2, q.stage(2, [4], schema=WITH_NOTE), schema=WITH_NOTE)
    assert q.rows("id", "note")[-1] == (4, "n4")


@pytest.mark.parametrize("merge_schema", [False, True])
def test_changed_type_fails_the_batch_naming_the_column(q: Query, merge_schema: bool) -> None:
    q.commit(0, q.stage(0, [1]))
    staged = q.stage(1, [2], schema=ID_AS_STRING)

    with pytest.raises(SchemaMismatchError, match="id: table int64, batch string"):
        q.commit(1, staged, schema=ID_AS_STRING, merge_schema=merge_schema)

    table = q.delta()
    assert table.version() == 0
    assert table.transaction_version(APP_ID) == 0
    assert table.to_pyarrow_table().schema.field("id").type == pa.int64()
    assert q.rows() == [(1, "a")]


def test_batch_without_a_table_column_reads_null_there(q: Query) -> None:
    q.commit(0, q.stage(0, [1]))
    narrow = pa.schema([("id", pa.int64()), ("app", pa.string())])
    q.commit(1, q.stage(1, [2], schema=narrow), schema=narrow)

    assert [f.name for f in q.delta().schema().fields] == ["id", "app", "ts"]
    assert q.rows("id", "ts") == [(1, T0 + dt.timedelta(seconds=1)), (2, None)]


def test_batch_with_reordered_columns_fits(q: Query) -> None:
    q.commit(0, q.stage(0, [1]))
    reordered = pa.schema([("ts", SPARK_TS), ("app", pa.string()), ("id", pa.int64())])
    q.commit(1, q.stage(1, [2], schema=reordered), schema=reordered)

    assert q.rows("id", "app", "ts") == [
        (1, "a", T0 + dt.timedelta(seconds=1)),
        (2, "a", T0 + dt.timedelta(seconds=2)),
    ]


def test_committed_stats_let_readers_skip_files_correctly(q: Query) -> None:
    # Sub-millisecond maxima: the ms stats must round up or a reader skips the row.
    micro = dt.timedelta(microseconds=500)
    for batch_id in range(2):
        hour = T0 + dt.timedelta(hours=batch_id)
        ids = [2 * batch_id + 1, 2 * batch_id + 2]
        stager = ParquetStager(
            table=resolve(str(q.table)),
            schema=SCHEMA,
            partition_by=["app"],
            app_id=APP_ID,
            batch_id=batch_id,
            task=0,
            max_records_per_file=1000,
            target_file_bytes=1 << 26,
        )
        stager.add(
            pa.record_batch(
                [pa.array(ids), pa.array(["a", "a"]), pa.array([hour, hour + micro], SPARK_TS)],
                schema=SCHEMA,
            )
        )
        q.commit(batch_id, stager.finish())
    dataset = q.delta().to_pyarrow_dataset()
    ts = pa.timestamp("us", tz="UTC")

    def ids_where(expression: Any) -> list[int]:
        return sorted(dataset.to_table(filter=expression).column("id").to_pylist())

    assert ids_where(pc.field("ts") == pa.scalar(T0 + micro, ts)) == [2]
    assert ids_where(
        pc.field("ts") >= pa.scalar(T0 + dt.timedelta(hours=1, microseconds=1), ts)
    ) == [4]
    assert ids_where(pc.field("id") == 4) == [4]
    assert ids_where(pc.field("id") < 2) == [1]


# -- 6. orphans ----------------------------------------------------------------------------


def test_remove_orphans_deletes_only_old_unreferenced_staged_files(q: Query) -> None:
    referenced = q.stage(0, [1, 2], apps=["a", "b c"])
    q.commit(0, referenced)
    orphan = q.stage(1, [3], apps=["a"])  # a crashed attempt of batch 1
    young = q.stage(1, [3], apps=["a"])  # a concurrent attempt, just written
    in_progress = q.stage(2, [4], apps=["d"])
    foreign = q.table / "a" / "not-ours.snappy.parquet"
    foreign.parent.mkdir()
    foreign.write_bytes(b"PAR1")
    q.backdate(referenced, orphan, in_progress)
    os.utime(foreign, (time.time() - OLD, time.time() - OLD))

    others = q.stage(1, [5], apps=["a"], app_id=OTHER_APP)  # another writer's, in flight
    legacy = q.table / "app=a" / "part-b00001-t00000-0123456789ab-000.chkpt.snappy.parquet"
    legacy.write_bytes(b"PAR1")  # staged before names carried the writer's tag
    q.backdate(others)
    os.utime(legacy, (time.time() - OLD, time.time() - OLD))

    removed = DeltaTarget(uri=str(q.table)).remove_orphans(
        app_id=APP_ID, older_than_s=3600, keep={f.path for f in in_progress.files}
    )

    assert removed == 2
    assert not any(q.exists(orphan)) and not legacy.exists()
    assert all(q.exists(young) + q.exists(referenced) + q.exists(in_progress))
    assert all(q.exists(others))
    assert foreign.is_file()
    assert q.rows() == [(1, "a"), (2, "b c")]


def test_remove_orphans_keeps_files_older_table_versions_reference(q: Query) -> None:
    first = q.stage(0, [1, 2])
    q.commit(0, first)
    q.delta().delete("id = 1")  # rewrites the file: version 0's file is now only in the log
    assert q.rows() == [(2, "a")]
    q.backdate(first)

    assert DeltaTarget(uri=str(q.table)).remove_orphans(app_id=APP_ID, older_than_s=60) == 0

    assert all(q.exists(first))
    old = DeltaTable(str(q.table), version=0).to_pyarrow_table()
    assert sorted(old.column("id").to_pylist()) == [1, 2]


def test_remove_orphans_before_the_table_exists(q: Query) -> None:
    crashed = q.stage(0, [1])
    q.backdate(crashed)
    assert DeltaTarget(uri=str(q.table)).remove_orphans(app_id=APP_ID, older_than_s=60) == 1
    assert q.staged_on_disk() == set()
    assert (
        DeltaTarget(uri=str(q.table.parent / "nothing")).remove_orphans(
            app_id=APP_ID, older_than_s=0
        )
        == 0
    )


def test_first_commit_of_a_process_cleans_orphans_but_keeps_its_own_files(q: Query) -> None:
    orphan = q.stage(0, [9])
    now = q.stage(0, [1, 2])
    q.backdate(orphan, now)  # the in-progress attempt's files are old too (a slow batch)

    record = q.commit(0, now, orphan_retention_s=60)

    assert record.outcome == "committed"
    assert not any(q.exists(orphan))
    assert all(q.exists(now))
    assert q.rows() == [(1, "a"), (2, "a")]

    # Once per process and table: a later orphan waits for the next process.
    later = q.stage(1, [3])
    q.backdate(later)
    assert q.coordinator(orphan_retention_s=60).clean_orphans_once() == 0
    assert all(q.exists(later))


def test_cleanup_spares_another_writers_in_flight_files(q: Query) -> None:
    # Writer B, another query (another app id) on the same table, is slow: its staged
    # files are older than A's orphanRetention and not committed yet.
    write_deltalake(str(q.table), OTHER, partition_by=["app"])  # B created the table
    theirs = q.stage(7, [100, 101], apps=["other", "other"], app_id=OTHER_APP)
    mine = q.stage(0, [9])  # A's crashed attempt of batch 0
    q.backdate(mine, theirs)

    record = q.commit(0, q.stage(0, [1]), orphan_retention_s=60)  # A's first commit cleans

    assert record.outcome == "committed"
    assert not any(q.exists(mine))
    assert all(q.exists(theirs))
    # B's commit lands afterwards and every add action points at a file.
    DeltaTarget(uri=str(q.table)).commit(
        table=q.delta(),
        schema=SCHEMA,
        partition_by=["app"],
        files=theirs.files,
        app_id=OTHER_APP,
        version=7,
        metadata={},
    )
    assert q.rows() == [(1, "a"), (100, "other"), (100, "other"), (101, "other"), (101, "other")]


# -- 7. another writer ---------------------------------------------------------------------


OTHER = pa.table(
    {
        "id": pa.array([100, 101], pa.int64()),
        "app": ["other", "other"],
        "ts": pa.array([T0, T0], pa.timestamp("us", tz="UTC")),
    }
)


def test_commit_after_another_writer_appended(q: Query) -> None:
    q.commit(0, q.stage(0, [1, 2]))
    stale = q.delta()  # a handle from before the other writer's commit
    write_deltalake(str(q.table), OTHER, mode="append")
    assert stale.version() == 0 and q.delta().version() == 1

    record = q.commit(1, q.stage(1, [3]))

    assert record.outcome == "committed"
    assert record.table_version == 2
    assert q.delta().transaction_version(APP_ID) == 1
    assert q.rows() == [(1, "a"), (100, "other"), (101, "other"), (2, "a"), (3, "a")]
    # A replay after both commits is still recognised.
    assert q.commit(1, q.stage(1, [3])) == record
    assert q.delta().version() == 2


def test_stale_handle_blind_append_rebases_over_another_writer(q: Query) -> None:
    q.commit(0, q.stage(0, [1]))
    stale = q.delta()
    write_deltalake(str(q.table), OTHER, mode="append")

    late = q.stage(1, [2])
    DeltaTarget(uri=str(q.table)).commit(
        table=stale,
        schema=SCHEMA,
        partition_by=["app"],
        files=late.files,
        app_id=APP_ID,
        version=1,
        metadata={},
    )

    table = q.delta()
    assert table.version() == 2
    assert table.transaction_version(APP_ID) == 1
    assert q.rows() == [(1, "a"), (100, "other"), (101, "other"), (2, "a")]


def test_stale_handle_commit_of_the_same_app_id_conflicts(q: Query) -> None:
    q.commit(0, q.stage(0, [1]))
    stale = q.delta()
    q.commit(1, q.stage(1, [2]))

    twice = q.stage(1, [2])
    with pytest.raises(Exception, match=r"(?i)concurrent") as raised:
        DeltaTarget(uri=str(q.table)).commit(
            table=stale,
            schema=SCHEMA,
            partition_by=["app"],
            files=twice.files,
            app_id=APP_ID,
            version=1,
            metadata={},
        )
    assert type(raised.value).__name__ == "CommitFailedError"
    assert q.rows() == [(1, "a"), (2, "a")]


# -- 8. retained snapshots -----------------------------------------------------------------


def test_store_keeps_the_newest_retained_snapshots(q: Query) -> None:
    for batch_id in range(4):
        q.commit(batch_id, q.stage(batch_id, [batch_id]), retained=2)

    store = q.store(retained=2)
    assert store.batch_ids() == [2, 3]
    assert store.get(0) is None
    latest = store.latest()
    assert latest is not None and (latest.batch_id, latest.table_version) == (3, 3)
    assert q.delta().transaction_version(APP_ID) == 3
    assert sorted(history_records(q.delta())) == [0, 1, 2, 3]  # the table keeps them all


# -- 9. empty batches ----------------------------------------------------------------------


def test_empty_batch_advances_the_txn_version(q: Query) -> None:
    q.commit(0, q.stage(0, [1]))
    nothing = StagedOutput(attempt="0123456789ab", batch_id=1, task=0)

    record = q.commit(1, None, nothing)

    assert record.outcome == CommitOutcome.EMPTY.value == "empty"
    assert (record.rows, record.files, record.bytes) == (0, 0, 0)
    assert record.table_version == 1
    assert record.source_offsets == q.plan(1)
    table = q.delta()
    assert (table.version(), table.transaction_version(APP_ID)) == (1, 1)
    assert q.rows() == [(1, "a")]
    assert q.store().get(1) == record
    assert history_records(table)[1][1].outcome == "empty"


def test_empty_first_batch_creates_the_table(q: Query) -> None:
    record = q.commit(0)

    assert record.outcome == "empty"
    table = q.delta()
    assert table.transaction_version(APP_ID) == 0
    assert table.metadata().partition_columns == ["app"]
    assert table.to_pyarrow_table().num_rows == 0
    assert q.commit(0) == record  # a replay of the empty batch is a duplicate
    assert q.delta().version() == 0
