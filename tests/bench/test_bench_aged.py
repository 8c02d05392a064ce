"""The aged table row's own parts: every run of one ``measure`` call has a checkpoint
and a table of its own, and the aged tables it builds are tables delta-rs and the
sink's own log reader read as any other."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from bench import aged_table


def test_each_run_of_a_multi_size_measure_starts_from_a_checkpoint_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Spark does: a query on a checkpoint that already read the topic to its end runs
    no batch. Sizes 1,000 and 10,000 and the rewritten 10,000 in one call once reused the
    fresh run's name (and so its checkpoint) of the plain 10,000 row."""
    import bench.batch_cost
    import bench.query

    names: list[str] = []

    def run_query(*, spark: Any, settings: dict[str, str], workdir: Path, name: str) -> Any:
        names.append(name)
        checkpoint = workdir / f"chk-{name}"
        if checkpoint.exists():  # the topic already read: no batch with data
            return 0.1, {}, [{"triggerExecution": 3, "latestOffset": 1}]
        checkpoint.mkdir()
        (workdir / name).mkdir(exist_ok=True)
        return 1.0, {}, [{"triggerExecution": 200 + i, "addBatch": 150} for i in range(20)]

    def age(*, template: Path, table: Path, versions: int) -> float:
        table.mkdir()
        (table / "versions").write_text(str(versions))
        return 0.0

    class Table:
        def __init__(self, path: str) -> None:
            self.path = Path(path)

        def version(self) -> int:
            return int((self.path / "versions").read_text())

    monkeypatch.setattr(bench.query, "run_query", run_query)
    monkeypatch.setattr(bench.batch_cost, "fill", lambda **_: None)
    monkeypatch.setattr(aged_table, "age", age)
    monkeypatch.setattr(aged_table, "rewriting", _no_rewrites)
    monkeypatch.setattr("deltalake.DeltaTable", Table)
    rows = aged_table.measure(
        spark=None,
        servers="unused:9092",
        workdir=tmp_path,
        partitions=4,
        client="kafka-python",
        versions=[1_000, 10_000],
        rewritten=10_000,
    )
    assert len(names) == len(set(names)) == 1 + 3 * 2 * 2
    assert [k for k in rows if isinstance(rows[k], dict)] == ["1000", "10000", "10000-rewritten"]
    assert rows["10000-rewritten"]["versions"] == 10_000
    assert rows["10000-rewritten"]["ratio"] == 1.0


class _no_rewrites:
    def __init__(self, table: Path) -> None:
        self.table = table

    def __enter__(self) -> list[int]:
        return [0]

    def __exit__(self, *_: object) -> None:
        return None


def test_the_aged_table_is_a_table_of_n_versions_and_files_checkpointed_every_100(
    tmp_path: Path,
) -> None:
    """Its log read by delta-rs at its newest version and at a version between two
    checkpoints; by the sink's own log reader; and a commit on it by another writer."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from spark_chkpt.delta.log.commit import checkpoint_files, load_state
    from spark_chkpt.fs import resolve

    template, table = tmp_path / "template", tmp_path / "aged"
    write_deltalake(str(template), pa.table({"id": list(range(50)), "app": ["a"] * 50}))
    aged_table.age(template=template, table=table, versions=350)

    found = DeltaTable(str(table))
    assert found.version() == 350
    assert len(found.file_uris()) == 350
    assert found.to_pyarrow_table().num_rows == 350 * 50
    assert len(DeltaTable(str(table), version=250).file_uris()) == 250
    log = table / "_delta_log"
    assert sorted(p.name[:20] for p in log.glob("*.checkpoint.parquet")) == [
        f"{v:020d}" for v in (100, 200, 300)
    ]
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 300
    assert checkpoint_files(resolve(str(table)).child("_delta_log"), 299) == (
        200,
        [f"{200:020d}.checkpoint.parquet"],
    )
    state = load_state(resolve(str(table)), version=350, features=frozenset(), configuration={})
    assert state.version == 350

    write_deltalake(str(table), pa.table({"id": [1], "app": ["b"]}), mode="append")
    assert DeltaTable(str(table)).version() == 351
    found = DeltaTable(str(table))
    found.create_checkpoint()
    assert len(DeltaTable(str(table)).file_uris()) == 351


def test_the_other_jobs_vacuum_deletes_what_its_optimize_removed_and_no_staged_file(
    tmp_path: Path,
) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    template, table = tmp_path / "template", tmp_path / "aged"
    write_deltalake(str(template), pa.table({"id": list(range(50)), "app": ["a"] * 50}))
    aged_table.age(template=template, table=table, versions=120)
    staged = table / "part-staged-by-a-batch-in-flight.parquet"
    staged.write_bytes((template / next(template.glob("*.parquet")).name).read_bytes())

    with aged_table.rewriting(table, every_s=0.05) as done:
        deadline = time.monotonic() + 60
        while not done[0] and time.monotonic() < deadline:
            time.sleep(0.05)
    assert done[0] >= 1
    after = DeltaTable(str(table))
    assert len(after.file_uris()) == 1
    assert after.to_pyarrow_table().num_rows == 120 * 50
    assert staged.exists()
    assert len(list(table.glob("part-aged-*.parquet"))) == 0
