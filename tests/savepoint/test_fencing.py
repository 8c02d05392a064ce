"""Fencing and the identity rules under the operations a user runs (issue 24): a
rewind, a fork, a restore run twice, a ``recover``; each against a writer of an older
generation, on real delta-rs tables and real checkpoint folders, without Spark.

Each test here failed on the code before fencing (the note of issue 24 gives how).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_chkpt.delta.sink.committer import DeltaCoordinator
from spark_chkpt.delta.staging import ParquetStager, StagedOutput
from spark_chkpt.errors import FencedError, QueryIdentityError, SavepointError
from spark_chkpt.fs import resolve
from spark_chkpt.recovery.rebuild import recover_checkpoint
from spark_chkpt.savepoint.manifest import create_savepoint
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.snapshot.settings import SnapshotSettings
from tests.delta.sink.test_coordinator import (
    APP_ID,
    OTHER_APP,
    SCHEMA,
    Query,
    make_batch,
    sink_config,
)

DEAD_SCHEMA = pa.schema([("id", pa.int64()), ("app", pa.string()), ("ts", SCHEMA.field("ts").type)])


class Run(Query):
    """A query that also writes Spark's ``commits/N`` after each commit (a savepoint
    needs them) and can move to another checkpoint folder (a restore's)."""

    def __init__(self, root: Path, *, checkpoint: Path | None = None) -> None:
        super().__init__(root)
        if checkpoint is not None:
            self.checkpoint = checkpoint
        self.dead = root / "dead"

    def on(self, checkpoint: str | Path) -> Run:
        other = Run.__new__(Run)
        other.__dict__.update(self.__dict__)
        other.checkpoint = Path(str(checkpoint).removeprefix("file://"))
        return other

    def step(self, batch_id: int, ids: list[int], *, offset: int = 0, **settings: Any) -> None:
        """Batch ``batch_id`` end to end: plan (offsets ``offset`` + the batch's), stage,
        commit, Spark's ``commits/N``."""
        self.plan(batch_id, {"events": {"0": 10 * (batch_id + 1) + offset}})
        self.coordinator(**settings).commit(
            messages=[self.stage(batch_id, ids)], batch_id=batch_id, schema=SCHEMA
        )
        (self.checkpoint / "commits").mkdir(exist_ok=True)
        (self.checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')

    def coordinator(  # type: ignore[override]
        self, *, app_id: str = APP_ID, complete: bool = False, dead_letters: bool = False
    ) -> DeltaCoordinator:
        return DeltaCoordinator(
            config=sink_config(
                table=str(self.table),
                checkpoint=str(self.checkpoint),
                dead_letter_path=str(self.dead) if dead_letters else None,
            ),
            snapshot=SnapshotSettings(
                checkpoint_location=str(self.checkpoint),
                app_id=app_id,
                query_name="events_to_delta",
            ),
            complete=complete,
        )

    def coordinator_with_dead_letters(self) -> DeltaCoordinator:
        return self.coordinator(dead_letters=True)

    def stage_dead(self, batch_id: int, ids: list[int]) -> StagedOutput:
        stager = ParquetStager(
            table=resolve(str(self.dead)),
            schema=DEAD_SCHEMA,
            partition_by=[],
            app_id=APP_ID,
            batch_id=batch_id,
            task=0,
            max_records_per_file=1000,
            target_file_bytes=1 << 26,
        )
        stager.add(make_batch(DEAD_SCHEMA, ids, ["bad"] * len(ids)))
        return stager.finish()

    def ids(self) -> list[int]:
        return sorted(r[0] for r in self.rows("id"))

    def savepoint(self, batch_id: int) -> str:
        point = create_savepoint(
            checkpoint_location=str(self.checkpoint),
            savepoint_dir=str(self.table.parent / "savepoints"),
            batch_id=batch_id,
        )
        return point.location


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


def ids_of(batch_id: int) -> list[int]:
    return [100 * batch_id + i for i in range(3)]


def rewind(run: Run, savepoint: str, folder: str, **kwargs: Any) -> Any:
    return restore_savepoint(
        savepoint=savepoint,
        checkpoint_location=str(run.table.parent / folder),
        mode="rewind",
        **kwargs,
    )


# -- fencing ---------------------------------------------------------------------------------


def test_restart_on_the_old_checkpoint_after_a_rewind_is_fenced(run: Run) -> None:
    for b in range(4):
        run.step(b, ids_of(b))
    point = run.savepoint(1)
    restored = rewind(run, point, "x")
    assert run.ids() == ids_of(0) + ids_of(1)
    with pytest.raises(FencedError) as caught:
        run.step(4, ids_of(4))  # the old checkpoint, restarted: batch 4
    message = str(caught.value)
    assert "generation 0" in message and "generation 1" in message, message
    assert run.ids() == ids_of(0) + ids_of(1)  # nothing of batch 4 became visible
    # The restored query goes on.
    moved = run.on(restored.checkpoint_location)
    moved.step(2, ids_of(2), offset=1)
    assert run.ids() == ids_of(0) + ids_of(1) + ids_of(2)


def test_old_query_running_through_a_rewind_commits_no_dead_letters(run: Run) -> None:
    for b in range(3):
        run.step(b, ids_of(b))
    old = run.coordinator_with_dead_letters()
    point = run.savepoint(1)
    rewind(run, point, "x")
    run.plan(3, {"events": {"0": 40}})
    output = run.stage(3, ids_of(3))
    output.dead_letter_files = run.stage_dead(3, [7, 8]).files  # type: ignore[attr-defined]
    with pytest.raises(FencedError):
        old.commit(messages=[output], batch_id=3, schema=SCHEMA, dead_letter_schema=DEAD_SCHEMA)
    assert run.ids() == ids_of(0) + ids_of(1)
    assert not (run.dead / "_delta_log").exists(), "dead letters were committed"


def test_a_fresh_writer_after_recover_fences_the_lost_checkpoint(run: Run) -> None:
    for b in range(3):
        run.step(b, ids_of(b))
    recover_checkpoint(table_uri=str(run.table), checkpoint_location=str(run.table.parent / "r"))
    # The "lost" checkpoint was not lost after all and its query goes on.
    with pytest.raises(FencedError):
        run.step(3, ids_of(3))
    run.on(run.table.parent / "r").step(3, ids_of(3))
    assert run.ids() == ids_of(0) + ids_of(1) + ids_of(2) + ids_of(3)


# -- hole 1: a restore run twice ------------------------------------------------------------


def test_restore_run_twice_after_the_query_moved_on_loses_nothing(run: Run) -> None:
    for b in range(2):
        run.step(b, ids_of(b))
    point = run.savepoint(1)
    run.step(2, ids_of(2))
    first = rewind(run, point, "x")
    x = run.on(first.checkpoint_location)
    for b in (2, 3):
        x.step(b, ids_of(b), offset=1)
    with pytest.raises(SavepointError) as caught:
        rewind(run, point, "x")  # the same command again
    assert "batch 3" in str(caught.value), caught.value
    x.step(4, ids_of(4), offset=1)
    assert run.ids() == sorted(ids_of(0) + ids_of(1) + ids_of(2) + ids_of(3) + ids_of(4))


def test_restore_run_twice_before_the_query_ran_finishes_it(run: Run) -> None:
    for b in range(3):
        run.step(b, ids_of(b))
    point = run.savepoint(1)
    first = rewind(run, point, "x")
    again = rewind(run, point, "x")
    assert again.resumes_at == first.resumes_at == 2
    run.on(first.checkpoint_location).step(2, ids_of(2), offset=1)
    assert run.ids() == ids_of(0) + ids_of(1) + ids_of(2)


# -- hole 2: the savepoint's timeline ----------------------------------------------------------


def test_rewind_goes_to_the_savepoints_own_commit_not_a_later_timelines(run: Run) -> None:
    for b in range(4):
        run.step(b, ids_of(b))
    a = run.savepoint(3)
    b_point = run.savepoint(1)
    x = run.on(rewind(run, b_point, "x").checkpoint_location)
    for b in (2, 3, 4):
        x.step(b, [1000 + 10 * b + i for i in range(2)], offset=5)  # other boundaries
    rewind(run, a, "y")
    assert run.ids() == sorted(ids_of(0) + ids_of(1) + ids_of(2) + ids_of(3))


# -- hole 4: dead letters after the identity refusal -----------------------------------------


def test_refused_fresh_checkpoint_commits_no_dead_letters(run: Run, tmp_path: Path) -> None:
    for b in range(2):
        run.step(b, ids_of(b))
    fresh = run.on(tmp_path / "fresh")
    (fresh.checkpoint / "offsets").mkdir(parents=True)
    (fresh.checkpoint / "metadata").write_text(json.dumps({"id": APP_ID}))
    fresh.plan(0, {"events": {"0": 99}})
    output = fresh.stage(0, [5])
    output.dead_letter_files = fresh.stage_dead(0, [100]).files  # type: ignore[attr-defined]
    with pytest.raises(QueryIdentityError):
        fresh.coordinator_with_dead_letters().commit(
            messages=[output], batch_id=0, schema=SCHEMA, dead_letter_schema=DEAD_SCHEMA
        )
    assert not (run.dead / "_delta_log").exists(), "dead letters were committed"


# -- rewinds over other writers, complete mode over other writers ------------------------------


def test_rewind_over_other_writers_needs_the_flag_naming_them(run: Run) -> None:
    for b in range(3):
        run.step(b, ids_of(b))
    point = run.savepoint(1)
    from deltalake import write_deltalake

    write_deltalake(
        str(run.table), pa.Table.from_batches([make_batch(SCHEMA, [9000], ["a"])]), mode="append"
    )
    with pytest.raises(SavepointError) as caught:
        rewind(run, point, "x")
    assert "--discard-other-writers" in str(caught.value), caught.value
    assert 9000 in run.ids()
    shutil.rmtree(run.table.parent / "x", ignore_errors=True)
    rewind(run, point, "x", discard_other_writers=["no-app-id"])
    assert run.ids() == ids_of(0) + ids_of(1)


def test_complete_mode_on_a_table_another_query_writes_is_refused(run: Run) -> None:
    run.step(0, ids_of(0))
    other = run.on(run.table.parent / "other")
    (other.checkpoint / "offsets").mkdir(parents=True)
    other.plan(0, {"other": {"0": 3}})
    with pytest.raises(QueryIdentityError) as caught:
        other.coordinator(app_id=OTHER_APP, complete=True).commit(
            messages=[other.stage(0, [77], app_id=OTHER_APP)], batch_id=0, schema=SCHEMA
        )
    assert APP_ID in str(caught.value)
    assert run.ids() == ids_of(0)


# -- hole 6: DeltaUpsert's identity rules ----------------------------------------------------


class Frame:
    """What the upsert's checks read of a batch DataFrame before anything is staged (its
    schema); staging (``mapInArrow``) needs Spark and is never reached when refused."""

    def __init__(self) -> None:
        from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

        self.schema = StructType(
            [
                StructField("id", LongType()),
                StructField("app", StringType()),
                StructField("ts", TimestampType()),
            ]
        )
        self.sparkSession = None  # no session: DeltaUpsert's MERGE would be delta-rs's


def test_upsert_from_a_new_query_id_on_a_table_of_the_same_partitions_is_refused(
    run: Run, tmp_path: Path
) -> None:
    from spark_chkpt.delta.upsert.committer import UpsertCommitter
    from spark_chkpt.delta.upsert.front import DeltaUpsert

    for b in range(2):
        run.step(b, ids_of(b))
    fresh = tmp_path / "lost-and-new"
    (fresh / "offsets").mkdir(parents=True)
    (fresh / "metadata").write_text(json.dumps({"id": OTHER_APP}))
    run.on(fresh).plan(0, {"events": {"0": 10}})
    upsert = DeltaUpsert(path=str(run.table), keys=["app"], checkpoint_location=str(fresh))
    before = run.delta().version()
    with pytest.raises(QueryIdentityError) as caught:
        UpsertCommitter(upsert=upsert, app_id=OTHER_APP).commit(batch_id=0, batch_df=Frame())
    assert APP_ID in str(caught.value) and "events-0" in str(caught.value)
    assert run.delta().version() == before


def test_a_rewind_between_the_old_writers_checks_and_its_commit_fences_it_on_retry(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old query still running through a rewind, at the worst moment: its commit
    passed the fence and read the table, then the rewind committed. Its commit
    conflicts (same app id's txn), and the retry is fenced."""
    for b in range(3):
        run.step(b, ids_of(b))
    point = run.savepoint(1)
    old = run.coordinator()
    run.plan(3, {"events": {"0": 40}})
    output = run.stage(3, ids_of(3))
    checked = old.already_committed
    raced: list[Any] = []

    def rewound_meanwhile(batch: Any, plan: Any) -> Any:
        found = checked(batch, plan)
        if not raced:
            raced.append(rewind(run, point, "x"))
        return found

    monkeypatch.setattr(old, "already_committed", rewound_meanwhile)
    with pytest.raises(FencedError):
        old.commit(messages=[output], batch_id=3, schema=SCHEMA)
    assert raced and run.ids() == ids_of(0) + ids_of(1)
