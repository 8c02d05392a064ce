"""Exactly-once under kill -9: the driver SIGKILLs itself at each step of the commit
protocol; a restart must leave every input event in the Delta table exactly once.

Each case runs the real job (``python -m spark_chkpt.jobs.kafka_to_delta``) as a driver
process in its own session, so the kill takes the Python driver and its JVM, as
``kill -9`` of a driver would. The broker keeps running (its storage is in memory).
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from spark_chkpt.delta.staging import STAGED_NAME
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.snapshot.store import SnapshotStore
from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, PageViews, produce_page_views
from spark_chkpt.testing.processes import kill_tree
from tests.helpers import NO_DAEMON, commit_worker, end_held, kill_jvm_alone, user_env

pytestmark = pytest.mark.fault

EVENTS = 3000
PER_BATCH = 1000  # 3 partitions, 3 batches: the fault strikes batch 1


def job_command(
    tmp_path: Path,
    bootstrap_servers: str,
    topic: str,
    *,
    orphan_retention: str | None = "0ms",
    master: str = "local[2]",
    extra: Sequence[str] = (),
) -> list[str]:
    """The job's command line; ``orphan_retention=None`` keeps the sink's default (1 hour);
    ``extra``: more of its arguments."""
    command = [
        sys.executable,
        "-m",
        "spark_chkpt.jobs.kafka_to_delta",
        "--bootstrap-servers",
        bootstrap_servers,
        "--topic",
        topic,
        "--table",
        str(tmp_path / "table"),
        "--checkpoint",
        str(tmp_path / "chk"),
        "--schema",
        PAGE_VIEW_SCHEMA_DDL,
        "--trigger",
        "availableNow",
        "--max-offsets-per-trigger",
        str(PER_BATCH),
        "--master",
        master,
        "--set",
        "sink.partitionBy=app",
        "--set",
        "job.queryName=fault_test",
    ]
    if orphan_retention is not None:
        command += ["--set", f"sink.orphanRetention={orphan_retention}"]
    return command + list(extra)


def run_job(
    tmp_path: Path,
    bootstrap_servers: str,
    topic: str,
    *,
    kill_at: str | None = None,
    fail_at: str | None = None,
    orphan_retention: str | None = "0ms",
    master: str = "local[2]",
    extra_env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
) -> subprocess.CompletedProcess:
    """Run the job once as a driver process in its own session, to its end or its kill."""
    env = user_env(**(extra_env or {}))
    if kill_at:
        env["SPARK_CHKPT_KILL_AT"] = kill_at
    if fail_at:
        env["SPARK_CHKPT_FAIL_AT"] = fail_at
    return subprocess.run(
        job_command(
            tmp_path,
            bootstrap_servers,
            topic,
            orphan_retention=orphan_retention,
            master=master,
            extra=extra,
        ),
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=420,
    )


def staged_files(table: Path) -> set[str]:
    return {
        str(p.relative_to(table)) for p in table.rglob("*.parquet") if STAGED_NAME.match(p.name)
    }


def referenced(table: Path) -> set[str]:
    target = DeltaTarget(uri=str(table))
    return target.referenced(target.open())


def txn_version(tmp_path: Path) -> int | None:
    app_id = json.loads((tmp_path / "chk" / "metadata").read_text())["id"]
    return DeltaTable(str(tmp_path / "table")).transaction_version(app_id)


def assert_exactly_once(tmp_path: Path, *, unreferenced: set[str] | None = None) -> pa.Table:
    """Every event once; every staged file on disk referenced, but ``unreferenced``
    (orphans the retention still keeps), which must be on disk and invisible."""
    table = DeltaTable(str(tmp_path / "table")).to_pyarrow_table()
    ids = sorted(table.column("event_id").to_pylist())
    missing = sorted(set(range(EVENTS)) - set(ids))
    duplicated = sorted({i for i in ids if ids.count(i) > 1}) if len(ids) != len(set(ids)) else []
    assert not missing and not duplicated, f"missing {missing[:10]}, duplicated {duplicated[:10]}"
    assert ids == list(range(EVENTS))
    positions = list(
        zip(
            table.column("kafka_partition").to_pylist(),
            table.column("kafka_offset").to_pylist(),
            strict=True,
        )
    )
    assert len(set(positions)) == EVENTS
    # Every staged file left on disk is one the table references: nothing dangling.
    left = unreferenced or set()
    assert not left & referenced(tmp_path / "table")
    assert staged_files(tmp_path / "table") == referenced(tmp_path / "table") | left
    return table


def assert_records_match_the_events(table: pa.Table) -> None:
    """Each row is its source event, field by field (not only its id)."""
    events = PageViews(seed=1)
    for row in table.to_pylist():
        expected = events.event(row["event_id"])
        when = dt.datetime.fromisoformat(str(expected.pop("ts")).replace("Z", "+00:00"))
        assert {k: row[k] for k in expected} == expected
        assert row["ts"] == when, (row["event_id"], row["ts"], when)


def snapshots(tmp_path: Path) -> list[int]:
    return SnapshotStore(checkpoint_location=str(tmp_path / "chk")).batch_ids()


def spark_committed(tmp_path: Path) -> list[int]:
    commits = tmp_path / "chk" / "commits"
    if not commits.is_dir():
        return []
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


@pytest.fixture
def topic(make_topic: Callable[..., str], bootstrap_servers: str) -> str:
    name = make_topic(partitions=3)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=name, first=0, count=EVENTS)
    return name


def _killed(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == -signal.SIGKILL, (
        f"expected SIGKILL, got {result.returncode}\n{result.stderr[-3000:]}"
    )
    # (the injection's own message dies with the JVM that relays worker stderr)


def test_batch_1_killed_in_its_abort_after_its_staging_and_after_its_snapshot(
    tmp_path: Path, bootstrap_servers: str, topic: str
) -> None:
    """One checkpoint through three kills of batch 1, each restart replaying it: inside
    Spark's abort of a failed commit (staged files not deleted yet), after staging (nothing
    visible), after the snapshot record (committed; Spark's commit log not yet). Each
    restart starts from what the kill before it left, as a user's restarts do."""
    table = tmp_path / "table"

    # 1. Batch 1's commit fails, Spark aborts it, and the driver dies inside the abort.
    _killed(
        run_job(tmp_path, bootstrap_servers, topic, fail_at="in-commit@1", kill_at="in-abort@1")
    )
    assert txn_version(tmp_path) == 0
    assert snapshots(tmp_path) == [0]
    aborted = {f for f in staged_files(table) if "part-b00001-" in f}
    assert aborted and not aborted & referenced(table)

    # 2. Restarted, killed after staging batch 1 again: prepared, not committed.
    _killed(run_job(tmp_path, bootstrap_servers, topic, kill_at="after-staging@1"))
    assert txn_version(tmp_path) == 0
    assert snapshots(tmp_path) == [0]
    assert spark_committed(tmp_path) == [0]
    staged_batch1 = {f for f in staged_files(table) if "part-b00001-" in f}
    assert staged_batch1 and not staged_batch1 & referenced(table)
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == PER_BATCH

    # 3. Restarted, killed after batch 1's snapshot record: committed, Spark's log not yet.
    _killed(run_job(tmp_path, bootstrap_servers, topic, kill_at="after-snapshot@1"))
    assert txn_version(tmp_path) == 1
    assert snapshots(tmp_path) == [0, 1]
    assert spark_committed(tmp_path) == [0]

    # 4. Restarted to the end: batch 1 is not committed twice.
    result = run_job(tmp_path, bootstrap_servers, topic)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_exactly_once(tmp_path)
    assert "was already committed" in result.stderr
    assert snapshots(tmp_path) == [0, 1, 2]
    assert not (aborted | staged_batch1) & staged_files(table)  # the killed attempts' files


# The kill after batch 1's Delta commit runs on object storage: test_s3_exactly_once.py.


def test_the_first_batch_killed_after_staging_then_after_its_delta_commit(
    tmp_path: Path, bootstrap_servers: str, topic: str
) -> None:
    """Batch 0, the one that creates the table: killed after staging (the table not even
    created), restarted and killed after its Delta commit (the table created, no snapshot
    record, no Spark commit yet), restarted to the end."""
    table = tmp_path / "table"
    _killed(run_job(tmp_path, bootstrap_servers, topic, kill_at="after-staging@0"))
    assert snapshots(tmp_path) == []
    assert spark_committed(tmp_path) == []
    assert {f for f in staged_files(table) if "part-b00000-" in f}
    assert not DeltaTable.is_deltatable(str(table))

    _killed(run_job(tmp_path, bootstrap_servers, topic, kill_at="after-delta-commit@0"))
    assert snapshots(tmp_path) == []
    assert spark_committed(tmp_path) == []
    assert txn_version(tmp_path) == 0
    staged_batch0 = {f for f in staged_files(table) if "part-b00000-" in f}
    assert staged_batch0 == referenced(table)  # the first attempt's files cleaned
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == PER_BATCH

    result = run_job(tmp_path, bootstrap_servers, topic)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_exactly_once(tmp_path)
    assert snapshots(tmp_path) == [0, 1, 2]
    first = SnapshotStore(checkpoint_location=str(tmp_path / "chk")).get(0)
    assert first is not None and first.rows == PER_BATCH and first.table_version == 0


def test_kill_after_staging_with_the_default_orphan_retention(
    tmp_path: Path, bootstrap_servers: str, topic: str
) -> None:
    # The default orphanRetention (1 hour): the killed attempt's files are too young to
    # be removed at the restart. They must stay invisible, and every record exact.
    killed = run_job(
        tmp_path, bootstrap_servers, topic, kill_at="after-staging@1", orphan_retention=None
    )
    _killed(killed)
    staged_batch1 = {f for f in staged_files(tmp_path / "table") if "part-b00001-" in f}
    assert staged_batch1 and not staged_batch1 & referenced(tmp_path / "table")

    result = run_job(tmp_path, bootstrap_servers, topic, orphan_retention=None)
    assert result.returncode == 0, result.stderr[-3000:]
    table = assert_exactly_once(tmp_path, unreferenced=staged_batch1)
    assert_records_match_the_events(table)
    assert txn_version(tmp_path) == 2
    assert snapshots(tmp_path) == [0, 1, 2]


def test_failed_batch_is_aborted_and_retried_on_restart(
    tmp_path: Path, bootstrap_servers: str, topic: str
) -> None:
    failed = run_job(tmp_path, bootstrap_servers, topic, fail_at="in-write@1")
    assert failed.returncode == 1
    assert "fault injection: failing in-write of batch 1" in failed.stderr
    assert "aborted: removed" in failed.stderr
    # A task still running when the job failed may finish after the abort: its files are
    # on disk but never visible, and the next start-up removes them.
    left = {f for f in staged_files(tmp_path / "table") if "part-b00001-" in f}
    assert not left & referenced(tmp_path / "table")
    assert DeltaTable(str(tmp_path / "table")).to_pyarrow_table().num_rows == PER_BATCH

    result = run_job(tmp_path, bootstrap_servers, topic)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_exactly_once(tmp_path)


def test_the_jvm_killed_alone_while_its_commit_worker_is_in_the_commit(
    tmp_path: Path, bootstrap_servers: str, topic: str
) -> None:
    """The OOM killer's case (issue 51): only the driver's JVM dies, while the Python
    worker running the sink's driver-side commit of batch 1 is inside it, past its
    checks (batch 1 not in the table yet; its dead letters committed) and before its
    Delta commit, held there by a stall; without PySpark's daemon (``NO_DAEMON``), which
    would hang it up within milliseconds, it outlives the JVM. The job is restarted and
    runs to the end (its start deletes the old worker's staged files); then the old
    worker is let go, on the table as it read it before. Every event once, batch 1
    committed once, and nothing committed after the new driver's commits."""
    stalled, release = tmp_path / "stalled", tmp_path / "release"
    dead = [
        "--set",
        "job.badRecords=deadLetter",
        "--set",
        f"sink.deadLetterPath={tmp_path / 'dead'}",
    ]
    env = user_env(
        **NO_DAEMON,
        SPARK_CHKPT_STALL_AT="after-dead-letters@1",
        SPARK_CHKPT_STALL_SIGNAL=str(stalled),
        SPARK_CHKPT_STALL_RELEASE=str(release),
        SPARK_CHKPT_STALL_SECONDS="600",
    )
    with open(tmp_path / "run1.log", "w") as out:
        job = subprocess.Popen(
            job_command(tmp_path, bootstrap_servers, topic, extra=dead),
            cwd=tmp_path,
            env=env,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    left: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not stalled.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stalled.exists(), (tmp_path / "run1.log").read_text()[-3000:]
        left = kill_jvm_alone(job)
        assert commit_worker(left) is not None, "the commit worker did not outlive the JVM"

        result = run_job(tmp_path, bootstrap_servers, topic, extra=dead, extra_env=NO_DAEMON)
        assert result.returncode == 0, result.stderr[-3000:]
        version_after_restart = DeltaTable(str(tmp_path / "table")).version()
    finally:
        release.write_text("go\n")  # the old worker, if it lives, goes on with its commit
        end_held(left)
        if job.poll() is None:
            kill_tree(job.pid)
    table = DeltaTable(str(tmp_path / "table"))
    assert table.version() == version_after_restart, "a stale commit landed after the restart"
    assert_exactly_once(tmp_path)
    app_id = json.loads((tmp_path / "chk" / "metadata").read_text())["id"]
    target = DeltaTarget(uri=str(tmp_path / "table"))
    batch_1 = [
        v
        for v in range(table.version() + 1)
        if (c := target.commit_at(v)) is not None and c.txns.get(app_id) == 1
    ]
    assert len(batch_1) == 1, batch_1
