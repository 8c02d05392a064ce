"""The scaling and per-batch benchmarks' pure parts: the keys source that fills the state
yields every key once and then updates only keys it has, and the tables add up."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import batch_anatomy, scaling, state_scaling
from bench.state_scaling import KeysStreamReader


def test_the_keys_source_loads_every_key_once_then_updates_existing_keys() -> None:
    reader = KeysStreamReader(keys=2_500, load_per_batch=1_000, per_batch=100, tail=3, tasks=4)
    start = reader.initialOffset()
    batches: list[list[int]] = []
    while True:
        end = reader.latestOffset(start, None)
        if end == start:
            break
        users: list[int] = []
        for part in reader.partitions(start, end):
            for batch in reader.read(part):
                assert batch.schema.names == ["app", "user"]
                users += batch.column("user").to_pylist()
        batches.append(users)
        start = end
    # 3 load batches (1,000, 1,000, 500), then 3 tail batches of 100.
    assert [len(b) for b in batches] == [1_000, 1_000, 500, 100, 100, 100]
    loaded = [u for b in batches[:3] for u in b]
    assert sorted(loaded) == list(range(2_500))
    assert all(set(b) <= set(range(2_500)) for b in batches[3:])
    assert batches[3] == list(range(100))


def test_rows_carry_the_app_of_the_row_number() -> None:
    (batch,) = list(state_scaling.rows(38, 42, keys=40))
    assert batch.to_pydict() == {
        "app": ["app-18", "app-19", "app-0", "app-1"],
        "user": [38, 39, 0, 1],
    }


@pytest.mark.parametrize(
    ("start", "end", "tasks", "expected"),
    [(0, 10, 4, [(0, 2), (2, 5), (5, 7), (7, 10)]), (5, 7, 4, [(5, 6), (6, 7)]), (3, 3, 4, [])],
)
def test_split_covers_the_range_in_at_most_tasks_pieces(
    start: int, end: int, tasks: int, expected: list[tuple[int, int]]
) -> None:
    assert state_scaling.split(start, end, tasks) == expected


def _progress(batch: int, rows: int, trigger: int, commit: int, total: int) -> dict:
    return {
        "batchId": batch,
        "numInputRows": rows,
        "durationMs": {
            "triggerExecution": trigger,
            "addBatch": trigger - 20,
            "walCommit": 10,
            "commitOffsets": 10,
        },
        "stateOperators": [
            {"commitTimeMs": commit, "numRowsTotal": total, "memoryUsedBytes": 3 * 2**20}
        ],
    }


def test_tail_figures_leave_out_the_load_batches_and_empty_ones() -> None:
    progress = [
        _progress(0, 1_000_000, 90_000, 40_000, 1_000_000),
        _progress(1, 1_000, 300, 50, 1_000_000),
        _progress(2, 1_000, 500, 70, 1_000_000),
        _progress(3, 1_000, 400, 60, 1_000_000),
        _progress(4, 0, 5, 0, 1_000_000),
    ]
    figures = state_scaling.tail_figures(progress, load_batches=1)
    assert figures["tail_batches"] == 3
    assert figures["triggerExecution"] == 400
    assert figures["addBatch"] == 380
    assert figures["state_commit_ms"] == 60
    assert figures["state_rows"] == 1_000_000
    assert figures["state_memory_mb"] == 3.0


def test_copied_kinds_count_files_and_bytes_by_kind(tmp_path: Path) -> None:
    (tmp_path / "state" / "0" / "1").mkdir(parents=True)
    (tmp_path / "state" / "0" / "1" / "3.changelog").write_bytes(b"x" * 10)
    (tmp_path / "state" / "0" / "1" / "2.zip").write_bytes(b"x" * 5)
    (tmp_path / "state" / "0" / "1" / "a.sst").write_bytes(b"x" * 7)
    (tmp_path / "manifest.json").write_text("{}")
    assert state_scaling.copied_kinds(tmp_path) == {
        "changelog": {"files": 1, "bytes": 10},
        "zip": {"files": 1, "bytes": 5},
        "sst": {"files": 1, "bytes": 7},
        "other": {"files": 1, "bytes": 2},
    }


def test_the_state_table_shows_each_size_and_what_its_savepoint_copied() -> None:
    size = {
        "keys": 1_000_000,
        "state_rows": 1_000_000,
        "triggerExecution": 812.0,
        "addBatch": 700.0,
        "state_commit_ms": 120.0,
        "walCommit": 30.0,
        "commitOffsets": 25.0,
        "savepoint_s": 3.456,
        "savepoint_copied": {
            "zip": {"files": 4, "bytes": 2**20},
            "sst": {"files": 8, "bytes": 2**24},
        },
        "checkpoint_state": {"changelog": {"files": 40, "bytes": 2**25}},
    }
    lines = state_scaling.table_lines({"cli_floor_s": 0.4, "sizes": [size], "skipped": [10**7]})
    assert (
        "| 1,000,000 | 1,000,000 | 812 | 700 | 120 | 30 | 25 | 3.46 | 1.0 / 16.0 / 0.0 | 32.0 |"
        in lines
    )
    assert lines[-1] == "not measured (time budget): 10,000,000"


def test_scaling_rows_give_records_per_second_and_commit_percentiles() -> None:
    first = scaling.row(label="4 partitions", records=200_000, seconds=8.0, commits=[10, 30, 20])
    second = scaling.row(label="64 partitions", records=200_000, seconds=10.0, commits=[40.0])
    assert first["records_per_s"] == 25_000
    assert (first["commit_p50_ms"], first["commit_p99_ms"]) == (20, 30)
    lines = scaling.table_lines([first, second], title="Partitions")
    assert lines[0] == "**Partitions**"
    assert lines[-2] == "| 4 partitions | 200,000 | 8.00 | 25,000 | 1.00 | 3 | 20 | 30 |"
    assert lines[-1] == "| 64 partitions | 200,000 | 10.00 | 20,000 | 0.80 | 1 | 40 | 40 |"


def test_medians_take_the_batches_that_read_data() -> None:
    per_batch = [
        {"triggerExecution": 100, "latestOffset": 10, "addBatch": 60},
        {"triggerExecution": 300, "latestOffset": 30, "addBatch": 80, "getBatch": 4},
        {"triggerExecution": 200, "latestOffset": 20, "addBatch": 70, "getBatch": 2},
        {"triggerExecution": 9, "latestOffset": 9},  # the last, empty trigger
    ]
    assert batch_anatomy.medians(per_batch) == {
        "addBatch": 70.0,
        "getBatch": 2.0,
        "latestOffset": 20.0,
        "triggerExecution": 200.0,
    }


def test_the_anatomy_names_every_millisecond_of_the_batch_once() -> None:
    spark_ms = {
        "triggerExecution": 500.0,
        "latestOffset": 40.0,
        "getBatch": 3.0,
        "queryPlanning": 12.0,
        "addBatch": 380.0,
        "walCommit": 25.0,
        "commitOffsets": 30.0,
    }
    ours = {
        "plan": 15.0,
        "partitions": 2.0,
        "tasks": 4,
        "read_task": 20.0,
        "write_task": 30.0,
        "driver_commit": 90.0,
        "source_commit": 5.0,
    }
    rows = batch_anatomy.anatomy(spark_ms=spark_ms, ours=ours, cores=2)
    assert sum(ms for ms, _, _ in rows) == pytest.approx(500.0)
    ours_ms = [ms for ms, _, whose in rows if whose == "ours"]
    assert sum(ours_ms) == 15 + 2 + 2 * 20 + 2 * 30 + 90 + 5  # two waves of four tasks
    spark_rest = {what.split(":")[0]: ms for ms, what, w in rows if w == "Spark"}
    assert spark_rest["latestOffset"] == 25.0
    assert spark_rest["addBatch"] == 380 - 2 - 40 - 60 - 90
    assert spark_rest["commitOffsets"] == 25.0
    assert spark_rest["triggerExecution outside the phases"] == 10.0
    table = batch_anatomy.table_lines(rows, total=500.0)
    assert table[0] == "| ms | what | whose |"
    assert "| **212** | **ours, in all (42%)** | |" in table
    assert "| **288** | **Spark, in all (58%)** | |" in table


def test_a_replay_longer_than_sparks_phase_never_makes_a_negative_row() -> None:
    """The idle run of 2026-11-25 replayed the planning at 89 ms where Spark timed the
    whole latestOffset phase at 4 ms, and the table showed Spark's share as -85 ms."""
    spark_ms = {"triggerExecution": 100.0, "latestOffset": 4.0, "addBatch": 90.0}
    ours = {
        "plan": 89.0,
        "partitions": 0.0,
        "tasks": 1,
        "read_task": 5.0,
        "write_task": 3.0,
        "driver_commit": 30.0,
        "source_commit": 0.0,
    }
    rows = batch_anatomy.anatomy(spark_ms=spark_ms, ours=ours, cores=2)
    assert all(ms >= 0 for ms, _, _ in rows), rows
    assert sum(ms for ms, _, _ in rows) == pytest.approx(100.0)
    (plan,) = [(ms, what) for ms, what, _ in rows if what.startswith("latestOffset: the source")]
    assert plan[0] == 4.0 and "replay 89 ms > Spark's 4 ms phase" in plan[1]


def test_planning_rows_give_the_first_batch_apart_and_the_median_of_the_others() -> None:
    from bench import planning

    def batch(latest: float, tasks: float, commit: float) -> dict[str, float]:
        total = latest + tasks + commit
        return {"latest_ms": latest, "tasks_ms": tasks, "commit_ms": commit, "batch_ms": total}

    timed = [
        batch(900.0, 50.0, 50.0),
        batch(40.0, 5.0, 5.0),
        batch(60.0, 5.0, 5.0),
        batch(50.0, 10.0, 10.0),
    ]
    got = planning.row(label="1000 partitions, plain", timed=timed)
    assert got == {
        "label": "1000 partitions, plain",
        "batches": 4,
        "first_ms": 1000.0,
        "latest_ms_p50": 50.0,
        "tasks_ms_p50": 5.0,
        "commit_ms_p50": 5.0,
        "batch_ms_p50": 70.0,
        "batch_ms_max": 70.0,
    }
    (line,) = [x for x in planning.table_lines([got]) if x.startswith("| 1000")]
    assert line == "| 1000 partitions, plain | 4 | 1000.0 | 50.0 | 5.0 | 5.0 | 70.0 | 70.0 |"
