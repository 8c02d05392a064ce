"""A savepoint rewind rolls the dead-letter table back too (issue 24, rewind-dead-letters):
after a rewind to N the dead-letter table holds the dead letters of batches 0..N, and
the re-run batches N + 1, ... commit theirs once each. Real delta-rs tables and
checkpoint folders, no Spark.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_chkpt.delta import rewind as rewind_module
from spark_chkpt.errors import SavepointError
from spark_chkpt.savepoint.manifest import MANIFEST, load_savepoint
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.snapshot.store import SnapshotStore
from tests.delta.sink.test_coordinator import APP_ID, SCHEMA
from tests.savepoint.test_fencing import DEAD_SCHEMA, Run, ids_of


def letters_of(batch_id: int) -> list[int]:
    return [10_000 + 100 * batch_id + i for i in range(2)]


def step(run: Run, batch_id: int, letters: list[int], *, offset: int = 0) -> None:
    """Batch ``batch_id`` end to end with its dead letters ``letters``."""
    run.plan(batch_id, {"events": {"0": 10 * (batch_id + 1) + offset}})
    output = run.stage(batch_id, ids_of(batch_id))
    output.dead_letter_files = (  # type: ignore[attr-defined]
        run.stage_dead(batch_id, letters).files if letters else []
    )
    run.coordinator(dead_letters=True).commit(
        messages=[output], batch_id=batch_id, schema=SCHEMA, dead_letter_schema=DEAD_SCHEMA
    )
    (run.checkpoint / "commits").mkdir(exist_ok=True)
    (run.checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def dead_ids(run: Run) -> list[int]:
    if not DeltaTable.is_deltatable(str(run.dead)):
        return []
    return sorted(DeltaTable(str(run.dead)).to_pyarrow_table(columns=["id"])["id"].to_pylist())


def dead_txn(run: Run) -> int | None:
    return DeltaTable(str(run.dead)).transaction_version(APP_ID)


def rewind(run: Run, savepoint: str, folder: str, **kwargs: Any) -> Any:
    return restore_savepoint(
        savepoint=savepoint,
        checkpoint_location=str(run.table.parent / folder),
        mode="rewind",
        **kwargs,
    )


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


def test_rewind_rolls_the_dead_letter_table_back_and_the_rerun_commits_once(run: Run) -> None:
    for b in range(4):
        step(run, b, letters_of(b))
    point = run.savepoint(1)
    result = rewind(run, point, "x")
    assert dead_ids(run) == letters_of(0) + letters_of(1)
    assert dead_txn(run) == 1
    assert (
        result.rewound.dead_letter_table is not None
        and result.rewound.dead_letters_restore_version is not None
    )
    moved = run.on(result.checkpoint_location)
    for b in (2, 3):  # the re-run batches, with other boundaries
        step(moved, b, [20_000 + b], offset=3)
    assert dead_ids(run) == sorted(letters_of(0) + letters_of(1) + [20_002, 20_003])
    assert run.ids() == sorted(ids_of(0) + ids_of(1) + ids_of(2) + ids_of(3))


def test_the_savepoint_names_the_dead_letter_table(run: Run) -> None:
    for b in range(2):
        step(run, b, letters_of(b))
    manifest = load_savepoint(location=run.savepoint(1)).manifest
    assert manifest.sink is not None
    assert manifest.sink.dead_letters is not None
    assert manifest.sink.dead_letters.rstrip("/").endswith("dead")
    assert manifest.sink.dead_letter_version == DeltaTable(str(run.dead)).version()


def test_rewind_to_before_the_first_dead_letter_empties_the_table(run: Run) -> None:
    step(run, 0, [])  # no dead letter yet: no dead-letter table
    for b in (1, 2):
        step(run, b, letters_of(b))
    point = run.savepoint(0)
    result = rewind(run, point, "x")
    assert dead_ids(run) == []
    assert dead_txn(run) == 0
    step(run.on(result.checkpoint_location), 1, [30_001], offset=1)
    assert dead_ids(run) == [30_001]


def test_emptying_a_dead_letter_table_delta_rs_refuses_is_the_own_replacement(
    run: Run,
) -> None:
    """A dead-letter table with row tracking and in-commit timestamps (delta-spark's
    upgrade commit, by a writer without an app id) rewound to before its first dead
    letter: spark-chkpt's own replacement commit removes every file (delta-rs refuses to
    commit to such tables), the row-id high-water mark kept; the re-run batch appends."""
    from spark_chkpt.delta.log.commit import load_state
    from spark_chkpt.delta.rollback import NO_APP_ID
    from spark_chkpt.fs import resolve
    from tests.delta.log.test_log_commit import ON, ROW_TRACKING, _upgrade, actions

    step(run, 0, [])  # no dead letter yet: no dead-letter table
    step(run, 1, letters_of(1))
    _upgrade(run.dead, 1, hwm=9)
    step(run, 2, letters_of(2))  # the own append commit, row ids 10, 11
    result = rewind(run, run.savepoint(0), "x", discard_other_writers=[NO_APP_ID])
    assert dead_ids(run) == [] and dead_txn(run) == 0
    log = run.dead / "_delta_log"
    last = int(DeltaTable(str(run.dead)).version())
    found = actions((log / f"{last:020d}.json").read_text())
    info = found[0]["commitInfo"]
    assert info["operationParameters"]["mode"] == "Overwrite" and "inCommitTimestamp" in info
    assert len([a for a in found if "remove" in a]) == 2 and not [a for a in found if "add" in a]
    where = resolve(str(run.dead))
    state = load_state(where, version=last, features=ROW_TRACKING, configuration=ON)
    assert state.high_water_mark() == 11
    step(run.on(result.checkpoint_location), 1, [30_001], offset=1)
    assert dead_ids(run) == [30_001]


def test_an_own_commit_dead_letter_table_on_a_store_without_put_if_absent_is_refused_first(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the own commit cannot be made (a store without a create-if-absent: the
    dead-letter table taken as one), the rewind is refused before anything changes, with
    one error naming the dead-letter table and its feature."""
    from spark_chkpt.delta.log import commit as log_commit
    from spark_chkpt.delta.rollback import NO_APP_ID
    from spark_chkpt.errors import TableFeatureError
    from tests.delta.log.test_log_commit import _upgrade

    step(run, 0, [])
    step(run, 1, letters_of(1))
    _upgrade(run.dead, 1, hwm=9)
    step(run, 2, letters_of(2))
    point = run.savepoint(0)
    dead, versions = str(run.dead), (DeltaTable(str(run.table)).version(), dead_txn(run))
    real = log_commit.put_if_absent_store
    monkeypatch.setattr(
        log_commit,
        "put_if_absent_store",
        lambda uri: "gs://" if uri.rstrip("/").endswith("/dead") else real(uri),
    )
    with pytest.raises(TableFeatureError) as caught:
        rewind(run, point, "x", discard_other_writers=[NO_APP_ID])
    text = str(caught.value)
    assert text.startswith("savepoint rewind: Delta table ") and dead in text, text
    assert "requires table feature 'clustering'" in text, text
    assert "gs://" in text and "Nothing was changed." in text
    assert (DeltaTable(str(run.table)).version(), dead_txn(run)) == versions
    assert not (run.table.parent / "x").exists()


def test_rewind_with_nothing_after_the_snapshot_leaves_the_dead_letters(run: Run) -> None:
    for b in range(2):
        step(run, b, letters_of(b))
    before = DeltaTable(str(run.dead)).version()
    result = rewind(run, run.savepoint(1), "x")
    assert DeltaTable(str(run.dead)).version() == before
    assert result.rewound.dead_letters_restore_version is None
    assert dead_ids(run) == letters_of(0) + letters_of(1)


def test_rewind_refuses_before_anything_changes_when_the_dead_letters_are_vacuumed(
    run: Run,
) -> None:
    for b in range(4):
        step(run, b, letters_of(b))
    point = run.savepoint(1)
    dead = DeltaTable(str(run.dead))
    dead.optimize.compact()
    DeltaTable(str(run.dead)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )
    table_before = run.delta().version()
    dead_before = DeltaTable(str(run.dead)).version()
    with pytest.raises(SavepointError) as caught:
        rewind(run, point, "x", discard_other_writers=["no-app-id"])
    message = str(caught.value)
    assert "dead" in message and "Nothing was changed" in message, message
    assert f"version {load_savepoint(location=point).manifest.sink.dead_letter_version}" in message  # type: ignore[union-attr]
    assert run.delta().version() == table_before
    assert DeltaTable(str(run.dead)).version() == dead_before
    assert not (run.table.parent / "x" / "metadata").exists()


def test_rewind_refuses_other_writers_of_the_dead_letter_table(run: Run) -> None:
    from deltalake import write_deltalake

    for b in range(3):
        step(run, b, letters_of(b))
    point = run.savepoint(1)
    write_deltalake(
        str(run.dead),
        DeltaTable(str(run.dead)).to_pyarrow_table().slice(0, 1),
        mode="append",
    )
    with pytest.raises(SavepointError) as caught:
        rewind(run, point, "x")
    assert "--discard-other-writers" in str(caught.value), caught.value
    assert dead_txn(run) == 2


def test_restore_run_again_finishes_the_dead_letter_table(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restore dies after the table's rollback, before the dead letters': the
    same command again finishes it."""
    for b in range(3):
        step(run, b, letters_of(b))
    point = run.savepoint(1)
    real = rewind_module.rewind_dead_letters

    def dies(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(rewind_module, "rewind_dead_letters", dies)
    with pytest.raises(KeyboardInterrupt):
        rewind(run, point, "x")
    assert run.ids() == ids_of(0) + ids_of(1)
    monkeypatch.setattr(rewind_module, "rewind_dead_letters", real)
    result = rewind(run, point, "x")
    assert dead_ids(run) == letters_of(0) + letters_of(1)
    step(run.on(result.checkpoint_location), 2, [40_002], offset=2)
    assert dead_ids(run) == sorted(letters_of(0) + letters_of(1) + [40_002])


def test_a_savepoint_of_an_earlier_release_still_loads_and_rewinds(run: Run) -> None:
    """Manifests without the dead-letter fields load; the table's commit of N names the
    dead-letter table (or ``dead_letter_table`` does)."""
    for b in range(3):
        step(run, b, letters_of(b))
    point = run.savepoint(1)
    path = Path(point.removeprefix("file://")) / MANIFEST
    doc = json.loads(path.read_text())
    doc["sink"] = {
        k: v for k, v in doc["sink"].items() if k not in ("dead_letters", "dead_letter_version")
    }
    doc["record"] = {k: v for k, v in doc["record"].items() if not k.startswith("dead_letter_")}
    path.write_text(json.dumps(doc))
    assert load_savepoint(location=point).manifest.sink.dead_letters is None  # type: ignore[union-attr]
    rewind(run, point, "x", dead_letter_table=str(run.dead))
    assert dead_ids(run) == letters_of(0) + letters_of(1)
    assert dead_txn(run) == 1


def test_a_fork_names_no_dead_letter_table_of_the_original(run: Run) -> None:
    for b in range(2):
        step(run, b, letters_of(b))
    point = run.savepoint(1)
    result = restore_savepoint(
        savepoint=point, checkpoint_location=str(run.table.parent / "f"), mode="fork"
    )
    record = SnapshotStore(checkpoint_location=result.checkpoint_location).get(1)
    assert record is not None and record.dead_letter_target is None
    assert dead_ids(run) == letters_of(0) + letters_of(1)
    with pytest.raises(SavepointError):
        restore_savepoint(
            savepoint=point,
            checkpoint_location=str(run.table.parent / "g"),
            mode="fork",
            dead_letter_table=str(run.dead),
        )
