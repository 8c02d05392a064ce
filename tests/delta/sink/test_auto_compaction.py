"""The ``chkpt-delta`` sink's auto compaction on real Delta tables, no Spark: off by
default, on by option or by the table property ``delta.autoOptimize.autoCompact``, the
threshold of small files per partition the batch wrote, its own ``dataChange=false``
commit without txn, a failed one never failing the batch, tables whose features it
cannot keep skipped, and a rewind and the orphan clean-up across a compaction.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.delta.features.protocol import TableProtocol
from spark_chkpt.delta.sink import compaction
from spark_chkpt.delta.sink.committer import DeltaCoordinator
from spark_chkpt.delta.sink.compaction import COMPACTION_KEY, refusal
from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.delta.table.history import commits_after
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import ConfigError
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.snapshot.settings import SnapshotSettings
from tests.delta.log.test_log_commit import _upgrade
from tests.delta.sink.test_coordinator import APP_ID, SCHEMA, make_batch, sink_config
from tests.savepoint.test_fencing import Run

MIN = 4  # autoCompactMinNumFiles of these tests


class Compacting(Run):
    """A query whose sink has ``auto`` (DeltaSinkConfig fields) on top of the tests'."""

    def __init__(self, root: Path, **auto: Any) -> None:
        super().__init__(root)
        self.auto = auto

    def coordinator(  # type: ignore[override]
        self, *, app_id: str = APP_ID, complete: bool = False, dead_letters: bool = False
    ) -> DeltaCoordinator:
        config = replace(
            sink_config(table=str(self.table), checkpoint=str(self.checkpoint)), **self.auto
        )
        return DeltaCoordinator(
            config=config,
            snapshot=SnapshotSettings(
                checkpoint_location=str(self.checkpoint), app_id=app_id, query_name="q"
            ),
            complete=complete,
        )

    def on(self, checkpoint: str | Path) -> Compacting:
        other = Compacting.__new__(Compacting)
        other.__dict__.update(super().on(checkpoint).__dict__)
        return other

    def batches(self, first: int, last: int) -> None:
        """Batches ``first``..``last``, one file of 10 rows each, all in partition "a"."""
        for b in range(first, last + 1):
            self.step(b, list(range(10 * b, 10 * b + 10)))

    def log(self) -> list[dict[str, Any]]:
        """Each commit's actions, by version."""
        folder = self.table / "_delta_log"
        return [
            {"version": int(p.stem), "actions": [json.loads(x) for x in p.read_text().splitlines()]}
            for p in sorted(folder.glob("*.json"))
        ]

    def compactions(self) -> list[dict[str, Any]]:
        return [
            c
            for c in self.log()
            if any(COMPACTION_KEY in a.get("commitInfo", {}) for a in c["actions"])
        ]


@pytest.fixture(autouse=True)
def fresh_counts() -> None:
    compaction._COUNTS.clear()


def live_files(path: Path) -> int:
    return len(DeltaTable(str(path)).file_uris())


def test_off_by_default_the_table_keeps_every_file(tmp_path: Path) -> None:
    run = Compacting(tmp_path, auto_compact_min_files=MIN)
    run.batches(0, 2 * MIN)
    assert run.compactions() == []
    assert live_files(run.table) == 2 * MIN + 1


def test_on_by_option_each_crossing_compacts_in_a_commit_of_its_own(tmp_path: Path) -> None:
    run = Compacting(tmp_path, auto_compact=True, auto_compact_min_files=MIN)
    run.batches(0, 3 * MIN)
    done = run.compactions()
    assert len(done) >= 2  # each MIN small files (the compacted one among them) again
    for commit in done:
        kinds = {k for a in commit["actions"] for k in a}
        assert kinds == {"commitInfo", "add", "remove"}  # no txn, no metaData
        files = [a.get("add") or a.get("remove") for a in commit["actions"]]
        files = [f for f in files if f is not None]
        assert all(f["dataChange"] is False for f in files)
        info = next(a["commitInfo"] for a in commit["actions"] if "commitInfo" in a)
        assert json.loads(info[COMPACTION_KEY])["appId"] == APP_ID
        assert info["operation"] == "OPTIMIZE"
    assert live_files(run.table) < MIN  # bounded, however many batches
    assert run.ids() == list(range(10 * (3 * MIN + 1)))
    assert DeltaTable(str(run.table)).transaction_version(APP_ID) == 3 * MIN
    # every batch's commit came before any compaction after it: the batch's txn first
    txn_versions = {
        c["version"]: a["txn"]["version"]
        for c in run.log()
        for a in c["actions"]
        if "txn" in a and a["txn"]["appId"] == APP_ID
    }
    first = done[0]["version"]
    assert max(b for v, b in txn_versions.items() if v < first) == MIN - 1


def test_on_by_the_table_property_and_off_by_the_option(tmp_path: Path) -> None:
    run = Compacting(
        tmp_path / "on",
        auto_compact_min_files=MIN,
        table_properties={"delta.autoOptimize.autoCompact": "auto"},
    )
    run.batches(0, MIN)
    assert len(run.compactions()) == 1
    assert DeltaTable(str(run.table)).metadata().configuration == {
        "delta.autoOptimize.autoCompact": "auto"
    }
    off = Compacting(
        tmp_path / "off",
        auto_compact=False,
        auto_compact_min_files=MIN,
        table_properties={"delta.autoOptimize.autoCompact": "true"},
    )
    off.batches(0, MIN)
    assert off.compactions() == []


def test_files_at_or_over_the_max_size_are_not_counted(tmp_path: Path) -> None:
    run = Compacting(
        tmp_path, auto_compact=True, auto_compact_min_files=MIN, auto_compact_max_file_bytes=100
    )
    run.batches(0, 2 * MIN)
    assert run.compactions() == []


def test_a_failed_compaction_warns_once_and_never_fails_the_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = Compacting(tmp_path, auto_compact=True, auto_compact_min_files=MIN)
    run.batches(0, MIN - 2)
    gone = next(p for p in (run.table / "app=a").iterdir())
    gone.unlink()  # the compaction cannot read it: it fails
    with caplog.at_level(logging.WARNING, logger=compaction.__name__):
        run.batches(MIN - 1, MIN - 1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(run.table) in warnings[0] and f"Delta version {MIN - 1}" in warnings[0]
    assert run.compactions() == []
    assert DeltaTable(str(run.table)).transaction_version(APP_ID) == MIN - 1
    # not again at once: at the next crossing (another MIN small files)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=compaction.__name__):
        run.batches(MIN, 2 * MIN - 2)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_options_are_parsed_and_checked() -> None:
    base = {"path": "/tmp/t", "checkpointLocation": "/tmp/c"}
    config = DeltaSinkConfig.from_options(base)
    assert config.auto_compact is None
    assert (config.auto_compact_min_files, config.auto_compact_max_file_bytes) == (50, 128 << 20)
    config = DeltaSinkConfig.from_options(
        {
            **base,
            "autoCompact": "auto",
            "autoCompactMinNumFiles": "8",
            "autoCompactMaxFileSize": "64m",
            "delta.autoOptimize.autoCompact": "true",
        }
    )
    assert config.auto_compact is True
    assert (config.auto_compact_min_files, config.auto_compact_max_file_bytes) == (8, 64 << 20)
    assert config.table_properties == {"delta.autoOptimize.autoCompact": "true"}
    with pytest.raises(ConfigError, match="autoCompact"):
        DeltaSinkConfig.from_options({**base, "autoCompact": "sometimes"})
    with pytest.raises(ConfigError, match="autoCompactMinNumFiles"):
        DeltaSinkConfig.from_options({**base, "autoCompactMinNumFiles": "0"})


def protocol(*features: str, **configuration: str) -> TableProtocol:
    return TableProtocol(
        uri="/t",
        min_reader_version=3,
        min_writer_version=7,
        reader_features=frozenset(),
        writer_features=frozenset(features),
        configuration=configuration,
    )


@pytest.mark.parametrize(
    ("features", "configuration", "skipped"),
    [
        ((), {}, None),
        (("appendOnly", "changeDataFeed", "checkConstraints", "timestampNtz"), {}, None),
        (("columnMapping",), {}, None),  # listed, mode none: not in use
        (("columnMapping",), {"delta.columnMapping.mode": "name"}, "columnMapping"),
        (("deletionVectors",), {}, "deletionVectors"),
        (("rowTracking", "domainMetadata"), {}, "rowTracking"),
        (("identityColumns",), {}, "identityColumns"),
        (("inCommitTimestamp",), {}, "inCommitTimestamp"),
        (("someFutureFeature",), {}, "someFutureFeature"),
    ],
)
def test_tables_whose_features_a_rewrite_cannot_keep_are_skipped(
    features: tuple[str, ...], configuration: dict[str, str], skipped: str | None
) -> None:
    reason = refusal(protocol(*features, **configuration))
    assert (reason is None) if skipped is None else f"'{skipped}'" in str(reason)


def test_a_skipped_table_is_logged_once_and_left_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A table delta-spark turned row tracking on for: the sink appends to it by its own
    commits, the compaction leaves it alone (one line, not one a batch)."""
    run = Compacting(tmp_path, auto_compact=True, auto_compact_min_files=MIN)
    first = pa.Table.from_batches([make_batch(SCHEMA, [-1], ["a"])])
    write_deltalake(str(run.table), first, partition_by=["app"])
    _upgrade(run.table, 1, hwm=9)
    with caplog.at_level(logging.INFO, logger=compaction.__name__):
        run.batches(0, 3 * MIN)
    skips = [r.getMessage() for r in caplog.records if "skips" in r.getMessage()]
    assert len(skips) == 1 and "'clustering'" in skips[0], skips
    assert run.compactions() == []
    assert run.ids() == [-1, *range(10 * (3 * MIN + 1))]


def test_a_rewind_before_a_compaction_restores_the_rows_and_orphans_stay(tmp_path: Path) -> None:
    run = Compacting(tmp_path, auto_compact=True, auto_compact_min_files=MIN, orphan_retention_ms=0)
    run.batches(0, 1)
    point = run.savepoint(1)
    run.batches(2, MIN + 1)
    assert run.compactions()
    # a compaction changes no row: not another writer, nothing for a rollback to refuse
    target = DeltaTarget(uri=str(run.table))
    latest = int(DeltaTable(str(run.table)).version())
    assert commits_after(target, 0, latest, APP_ID) == (set(), 0)
    # the orphan clean-up keeps the files a compaction removed (time travel reads them)
    old = time.time() - 3600
    for f in (run.table / "app=a").iterdir():
        os.utime(f, (old, old))
    assert target.remove_orphans(app_id=APP_ID, older_than_s=0) == 0
    assert sorted(DeltaTable(str(run.table), version=1).to_pyarrow_table()["id"].to_pylist()) == (
        list(range(20))
    )

    restore_savepoint(
        savepoint=point, checkpoint_location=str(tmp_path / "restored"), mode="rewind"
    )
    assert run.ids() == list(range(20))
    again = run.on(tmp_path / "restored")
    again.batches(2, 3)
    assert again.ids() == list(range(40))
