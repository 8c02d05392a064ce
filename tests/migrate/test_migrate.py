"""``spark-chkpt migrate``'s plan and refusals on checkpoints written here file by file,
as Spark 4.2 writes them (``metadata``, ``offsets/N``: version, batch metadata, one
Kafka offset line per source; ``commits/N``), next to a real Delta table whose commits
carry ``txn(<query id>, N)`` as delta-spark's streaming sink writes it. The chain on
the real broker, Spark and delta-spark is ``tests/migrate/test_migrate_spark.py``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from spark_chkpt.cli import main
from spark_chkpt.errors import MigrationError
from spark_chkpt.migrate.apply import apply_migration
from spark_chkpt.migrate.options import MigrateOptions
from spark_chkpt.migrate.plan import plan_migration
from spark_chkpt.snapshot.epoch import read_epoch
from spark_chkpt.snapshot.store import SnapshotStore

QUERY = "5f1c2a4e-0000-4000-8000-000000000001"


def offsets_line(end: int) -> dict[str, Any]:
    return {"events": {"0": end, "1": end}}


def checkpoint(
    tmp_path: Path,
    *,
    planned: int,
    committed: int | None,
    txn: int | None,
    source: Any = None,
) -> tuple[Path, Path]:
    """A checkpoint that planned batches 0..planned and committed 0..committed, and a
    table whose last commit set ``txn(QUERY, txn)``."""
    chk, table = tmp_path / "chk", tmp_path / "table"
    (chk / "offsets").mkdir(parents=True)
    (chk / "commits").mkdir()
    (chk / "metadata").write_text(json.dumps({"id": QUERY}))
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}
    for n in range(planned + 1):
        line = source if source is not None else offsets_line(10 * (n + 1))
        (chk / "offsets" / str(n)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(line)}")
    for n in range((committed if committed is not None else -1) + 1):
        (chk / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    for n in range((txn if txn is not None else -1) + 1):
        write_deltalake(
            str(table),
            pa.table({"id": [str(n)]}),
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(QUERY, n)]),
        )
    if txn is None:
        write_deltalake(str(table), pa.table({"id": ["other"]}), mode="append")
    return chk, table


def plan(chk: Path, table: Path, to: str = "chkpt", **kw: Any) -> Any:
    options = MigrateOptions.from_values(
        checkpoint=str(chk), to=to, table=str(table), watch_s=kw.pop("watch_s", 0), **kw
    )
    return plan_migration(options=options)


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_stopped_query_moves_to_chkpt_with_its_record_and_generation(tmp_path: Path) -> None:
    chk, table = checkpoint(tmp_path, planned=3, committed=3, txn=3)
    found = plan(chk, table)
    assert (found.settled, found.resume_at, found.app_id) == ("committed", 4, QUERY)
    written = apply_migration(found)
    record = SnapshotStore(checkpoint_location=str(chk)).get(3)
    assert record is not None and record.source_offsets == [offsets_line(40)]
    assert record.table_version == 3 and record.app_id == QUERY
    assert read_epoch(checkpoint_location=str(chk)).generation == 1
    assert DeltaTable(str(table)).transaction_version(f"{QUERY}#generation") == 1
    assert len(written) == 3 and not (chk / "commits" / "4").exists()


def test_a_batch_the_table_holds_is_written_to_the_commit_log(tmp_path: Path) -> None:
    chk, table = checkpoint(tmp_path, planned=3, committed=2, txn=3)
    found = plan(chk, table, to="spark")
    assert (found.settled, found.resume_at) == ("done-in-table", 4)
    apply_migration(found)
    assert (chk / "commits" / "3").read_text() == (chk / "commits" / "2").read_text()
    # --to spark fences a chkpt-delta writer still started on this checkpoint
    assert DeltaTable(str(table)).transaction_version(f"{QUERY}#generation") == 1
    assert read_epoch(checkpoint_location=str(chk)).generation == 0


def test_a_batch_the_table_lacks_is_replayed_from_its_plan(tmp_path: Path) -> None:
    chk, table = checkpoint(tmp_path, planned=3, committed=2, txn=2)
    found = plan(chk, table)
    assert (found.settled, found.resume_at, found.sources) == ("replay", 3, (offsets_line(30),))
    apply_migration(found)
    assert not (chk / "commits" / "3").exists()
    assert SnapshotStore(checkpoint_location=str(chk)).latest().batch_id == 2  # type: ignore[union-attr]


def test_dry_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chk, table = checkpoint(tmp_path, planned=3, committed=2, txn=3)
    before_chk, before_table = files(chk), files(table)
    code = main(
        ["migrate", str(chk), "--to", "chkpt", "--table", str(table), "--watch", "0", "--dry-run"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "batch 3: planned, not in Spark's commit log, but in the table" in out
    assert "dry run, nothing written; would write:" in out and "commits/3" in out
    assert files(chk) == before_chk and files(table) == before_table


def refused(chk: Path, table: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> str:
    before_chk, before_table = files(chk), files(table)
    code = main(["migrate", str(chk), "--table", str(table), "--watch", "0", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert files(chk) == before_chk and files(table) == before_table
    return err


def test_refused_last_batch_not_committed_in_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chk, table = checkpoint(tmp_path, planned=3, committed=3, txn=2)
    err = refused(chk, table, "--to", "chkpt", capsys=capsys)
    assert f"batch 3 is committed in Spark's log but the table {table} has txn({QUERY}) = 2" in err
    assert "nothing was written" in err


def test_refused_a_gap_between_the_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chk, table = checkpoint(tmp_path, planned=5, committed=2, txn=2)
    err = refused(chk, table, "--to", "chkpt", capsys=capsys)
    assert "batch 5 is planned (offsets/5) but the commit log ends at commits/2" in err
    assert "batches 3..4" in err


def test_refused_a_table_neither_done_nor_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chk, table = checkpoint(tmp_path, planned=3, committed=2, txn=None)
    err = refused(chk, table, "--to", "spark", capsys=capsys)
    assert f"txn({QUERY}) = none, neither 3 (done) nor 2 (to replay)" in err


def test_refused_a_source_that_is_not_kafka(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chk, table = checkpoint(tmp_path, planned=1, committed=1, txn=1, source={"logOffset": 1})
    err = refused(chk, table, "--to", "chkpt", capsys=capsys)
    assert "offsets/1: source 0 is not a Kafka source" in err and "logOffset" in err


def test_refused_a_topic_read_at_barriers_for_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aligned = {**offsets_line(10), "__chkpt__": {"mode": "aligned"}}
    chk, table = checkpoint(tmp_path, planned=1, committed=1, txn=1, source=aligned)
    err = refused(chk, table, "--to", "spark", capsys=capsys)
    assert "source 0 reads at barriers (alignment aligned" in err


@pytest.mark.parametrize(
    ("to", "option", "why"),
    [
        ("chkpt", "maxRecordsPerPartition=1000", "chkpt-kafka splits a batch by minPartitions"),
        ("spark", "alignment=aligned", "reads barrier records as data"),
        ("spark", "deadLetterPath=/dl", "no dead-letter table"),
    ],
)
def test_refused_an_option_the_other_side_cannot_honour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], to: str, option: str, why: str
) -> None:
    chk, table = checkpoint(tmp_path, planned=1, committed=1, txn=1)
    err = refused(chk, table, "--to", to, "--option", option, capsys=capsys)
    assert f"option {option.split('=')[0]}=" in err and why in err


def test_refused_a_running_query(tmp_path: Path) -> None:
    chk, table = checkpoint(tmp_path, planned=3, committed=3, txn=3)

    def next_batch() -> None:  # what a running query does: plan the next batch
        time.sleep(0.2)
        (chk / "offsets" / "4").write_text((chk / "offsets" / "3").read_text())

    writer = threading.Thread(target=next_batch)
    writer.start()
    with pytest.raises(MigrationError, match=r"the query is running: offsets/4 changed"):
        plan(chk, table, watch_s=1.0)
    writer.join()


def test_refused_keyed_state_without_the_job(tmp_path: Path) -> None:
    chk, table = checkpoint(tmp_path, planned=1, committed=1, txn=1)
    (chk / "state" / "0" / "0").mkdir(parents=True)
    with pytest.raises(MigrationError, match=r"keyed state \(operators 0\): give the job"):
        plan(chk, table)


def test_a_kafka_sink_moves_to_spark_at_least_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chk, _ = checkpoint(tmp_path, planned=2, committed=1, txn=None)
    code = main(["migrate", str(chk), "--to", "spark", "--sink", "kafka", "--watch", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Spark's kafka sink is at-least-once" in out and "runs batch 2 first" in out


def test_refused_a_table_ahead_of_the_checkpoint(tmp_path: Path) -> None:
    chk, table = checkpoint(tmp_path, planned=2, committed=2, txn=4)
    with pytest.raises(MigrationError, match=r"txn\(.*\) = 4, ahead of the checkpoint's last"):
        plan(chk, table)


def test_refused_to_write_a_commit_only_spark_can_write(tmp_path: Path) -> None:
    chk, table = checkpoint(tmp_path, planned=3, committed=2, txn=3)
    (chk / "commits" / "2").write_text(
        'v1\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["a","b"]]}}'
    )
    with pytest.raises(MigrationError, match=r"commits/2 holds more than a watermark"):
        plan(chk, table)


def test_a_foreach_batch_writer_is_found_by_its_txn_app_id(tmp_path: Path) -> None:
    chk, table = checkpoint(tmp_path, planned=1, committed=1, txn=None)
    for n in (0, 1):  # delta-spark's foreachBatch writer: txnAppId=loader, txnVersion=batchId
        write_deltalake(
            str(table),
            pa.table({"id": [str(n)]}),
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction("loader", n)]),
        )
    found = plan(chk, table, options=["txnAppId=loader"])
    assert (found.app_id, found.settled, found.table_version) == ("loader", "committed", 2)
    with pytest.raises(MigrationError, match=r"txn\(5f1c.*\) = none"):
        plan(chk, table)  # without it, the query id has no txn in the table
