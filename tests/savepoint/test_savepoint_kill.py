"""Savepoints of the real jobs (issue 12): each job runs as its own driver process, the
``spark-chkpt savepoint`` commands run as a user's shell would run them, from a folder
outside the repository, and the tables are read back with ``deltalake``.

* the append job: savepoint at snapshot N while the job runs (held in its commit of
  N + 1), a kill -9 of the first savepoint command midway, the job unaffected to the
  end; rewind: the table equals its version of snapshot N, then every event once;
* the stateful page-view counts: savepoint at N while running; the keyed state shown
  is the counts below N's offsets; a damaged copy is refused naming the file; fork into
  a new table and rewind of the original both end with exact counts;
* stop with savepoint on a running query: the savepoint is its last committed batch,
  and nothing is lost across the stop and the restore.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_chkpt.savepoint.manifest import list_savepoints
from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, produce_page_views
from spark_chkpt.testing.processes import kill_tree
from tests.helpers import user_env
from tests.state.test_stateful_kill import counts_below, table_counts

pytestmark = pytest.mark.fault

CLI = str(Path(sys.executable).with_name("spark-chkpt"))
_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_job_left_running() -> Iterator[None]:
    """A failed test must not leave its background job (and its JVM) running."""
    yield
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            kill_tree(process.pid)
            process.wait()


def job(
    module: str,
    tmp_path: Path,
    servers: str,
    topic: str,
    *,
    checkpoint: str = "chk",
    table: str = "table",
    per_batch: int,
    trigger: str = "availableNow",
    extra: tuple[str, ...] = (),
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        f"spark_chkpt.jobs.{module}",
        "--bootstrap-servers",
        servers,
        "--topic",
        topic,
        "--table",
        str(tmp_path / table),
        "--checkpoint",
        str(tmp_path / checkpoint),
        "--trigger",
        trigger,
        "--max-offsets-per-trigger",
        str(per_batch),
        "--master",
        "local[2]",
        "--set",
        "sink.orphanRetention=0ms",
        *extra,
    ]
    if module == "kafka_to_delta":
        command += ["--schema", PAGE_VIEW_SCHEMA_DDL]
    return command


def start(command: list[str], cwd: Path, **env: str) -> subprocess.Popen[str]:
    _STARTED.append(
        process := subprocess.Popen(
            command,
            cwd=cwd,
            env=user_env(**env),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    return process


def finish(process: subprocess.Popen[str], timeout: float = 420) -> None:
    _, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]


def run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=cwd,
        env=user_env(**env),
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=420,
    )


def cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run([CLI, *args], cwd, **env)


def held_at(tmp_path: Path, point: str) -> dict[str, str]:
    """Env that holds the job for 15 s at ``point`` and says so in a file."""
    return {
        "SPARK_CHKPT_STALL_AT": point,
        "SPARK_CHKPT_STALL_SIGNAL": str(tmp_path / "held"),
        "SPARK_CHKPT_STALL_SECONDS": "15",
    }


def wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def event_ids(table: Path, version: int | None = None) -> list[int]:
    return sorted(
        DeltaTable(str(table), version=version).to_pyarrow_table().column("event_id").to_pylist()
    )


def ends(checkpoint: Path, batch: int, topic: str) -> dict[str, int]:
    plan = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return {p: int(o) for p, o in json.loads(plan[2])[topic].items()}


def test_append_job_savepoint_while_running_then_rewind(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    events, per_batch = 3000, 1000
    topic = make_topic(partitions=3)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=events)
    work = tmp_path / "shell"  # the commands run from here, outside the repository
    work.mkdir()
    command = job("kafka_to_delta", tmp_path, bootstrap_servers, topic, per_batch=per_batch)
    running = start(command, tmp_path, **held_at(tmp_path, "after-snapshot@1"))
    wait_for(tmp_path / "held", running)  # batch 1 is in the table, not yet in commits/
    create = ("savepoint", "create", str(tmp_path / "chk"), "--dir", str(tmp_path / "sp"))
    killed = cli(work, *create, SPARK_CHKPT_KILL_AT="in-savepoint")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert list_savepoints(savepoint_dir=str(tmp_path / "sp")) == []
    made = cli(work, *create)
    assert made.returncode == 0, made.stderr[-2000:]
    finish(running)  # the savepoint commands left the running job alone
    assert event_ids(tmp_path / "table") == list(range(events))
    (point,) = list_savepoints(savepoint_dir=str(tmp_path / "sp"))
    manifest = point.manifest
    assert point.location == made.stdout.strip() and manifest.batch_id == 0
    assert manifest.sink is not None and manifest.sink.target == str(tmp_path / "table")
    version = manifest.sink.table_version

    restored = cli(
        work, "savepoint", "restore", point.location, "--checkpoint", str(tmp_path / "chk2"),
        "--mode", "rewind",
    )  # fmt: skip
    assert restored.returncode == 0, restored.stderr[-2000:]
    assert "resumes at batch 1" in restored.stdout
    as_of_snapshot = event_ids(tmp_path / "table", version)
    assert event_ids(tmp_path / "table") == as_of_snapshot and len(as_of_snapshot) == per_batch
    finish(start(job("kafka_to_delta", tmp_path, bootstrap_servers, topic, checkpoint="chk2",
                     per_batch=per_batch), tmp_path))  # fmt: skip
    assert event_ids(tmp_path / "table") == list(range(events))
    txn = DeltaTable(str(tmp_path / "table")).transaction_version(manifest.query_id)
    assert txn == 2


def test_page_view_counts_fork_and_rewind_from_a_savepoint(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    events, per_batch, partitions = 4000, 1000, 2
    topic = make_topic(partitions=partitions)
    produce_page_views(
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        first=0,
        count=events,
        spread_over=partitions,
    )
    work = tmp_path / "shell"
    work.mkdir()
    everything = {str(p): events // partitions for p in range(partitions)}

    def page_views(**kw: str) -> list[str]:
        return job("page_views", tmp_path, bootstrap_servers, topic, per_batch=per_batch, **kw)

    running = start(
        page_views(extra=("--mode", "complete")), tmp_path, **held_at(tmp_path, "after-snapshot@2")
    )
    wait_for(tmp_path / "held", running)
    made = cli(work, "savepoint", "create", str(tmp_path / "chk"), "--dir", str(tmp_path / "sp"))
    assert made.returncode == 0, made.stderr[-2000:]
    finish(running)
    assert table_counts(tmp_path / "table") == counts_below(everything)
    savepoint = made.stdout.strip()
    (point,) = list_savepoints(savepoint_dir=str(tmp_path / "sp"))
    manifest = point.manifest
    assert manifest.batch_id == 1 and manifest.state_version == 2
    assert manifest.provider == "rocksdb" and [o.name for o in manifest.operators] == [
        "stateStoreSave"
    ]
    below = counts_below(ends(tmp_path / "chk", 1, topic))

    # The keyed state the savepoint holds: the counts below snapshot 1's offsets.
    shown = cli(work, "savepoint", "show", savepoint, "--state", "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    (state,) = json.loads(shown.stdout)["state"]
    assert {r["app"]: r["count"] for r in state["rows"]} == below

    # A damaged copy: restore names the missing file and writes nothing.
    damaged = tmp_path / "damaged"
    shutil.copytree(savepoint, damaged)
    lost = next(
        p
        for p in sorted((damaged / "checkpoint" / "state").rglob("*"))
        if p.suffix in (".changelog", ".zip")
    )
    lost.unlink()
    refused = cli(
        work,
        "savepoint",
        "restore",
        str(damaged),
        "--checkpoint",
        str(tmp_path / "x"),
        "--mode",
        "fork",
    )
    assert refused.returncode == 2
    assert str(lost.relative_to(damaged)) in refused.stderr and "missing" in refused.stderr
    assert not (tmp_path / "x").exists()

    # Fork: a new query id and a new table; the state carries the counts of snapshot 1.
    forked = cli(work, "savepoint", "restore", savepoint, "--checkpoint", str(tmp_path / "fork"),
                 "--mode", "fork", "--table", str(tmp_path / "fork_table"))  # fmt: skip
    assert forked.returncode == 0, forked.stderr[-2000:]
    finish(
        start(
            page_views(checkpoint="fork", table="fork_table", extra=("--mode", "complete")),
            tmp_path,
        )
    )
    assert table_counts(tmp_path / "fork_table") == counts_below(everything)
    fork_id = json.loads((tmp_path / "fork" / "metadata").read_text())["id"]
    assert fork_id != manifest.query_id
    assert (
        DeltaTable(str(tmp_path / "fork_table")).transaction_version(fork_id)
        == events // per_batch - 1
    )

    # Rewind: the table is its version of snapshot 1, then the counts are exact again.
    rewound = cli(work, "savepoint", "restore", savepoint, "--checkpoint", str(tmp_path / "chk2"),
                  "--mode", "rewind")  # fmt: skip
    assert rewound.returncode == 0, rewound.stderr[-2000:]
    assert manifest.sink is not None
    assert (
        table_counts(tmp_path / "table")
        == table_counts(tmp_path / "table", manifest.sink.table_version)
        == below
    )
    finish(start(page_views(checkpoint="chk2", extra=("--mode", "complete")), tmp_path))
    assert table_counts(tmp_path / "table") == counts_below(everything)
    assert table_counts(tmp_path / "fork_table") == counts_below(everything)  # untouched


def test_stop_with_savepoint_loses_nothing(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    events, per_batch = 3000, 300  # 10 batches, one each 3 s: the stop comes midway
    topic = make_topic(partitions=3)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=events)
    work = tmp_path / "shell"
    work.mkdir()
    running = start(
        job("kafka_to_delta", tmp_path, bootstrap_servers, topic, per_batch=per_batch,
            trigger="processingTime=3 seconds"),
        tmp_path,
    )  # fmt: skip
    wait_for(tmp_path / "chk" / "commits" / "1", running)
    stopped = cli(
        work,
        "savepoint",
        "stop",
        str(tmp_path / "chk"),
        "--dir",
        str(tmp_path / "sp"),
        "--timeout",
        "300",
    )
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    finish(running, timeout=120)  # the job ended cleanly, after its savepoint
    (point,) = list_savepoints(savepoint_dir=str(tmp_path / "sp"))
    assert point.location == stopped.stdout.strip() and point.manifest.reason == "stop"
    committed = max(
        int(p.name) for p in (tmp_path / "chk" / "commits").iterdir() if p.name.isdigit()
    )
    assert point.manifest.batch_id == committed < events // per_batch - 1
    table = DeltaTable(str(tmp_path / "table"))
    assert table.transaction_version(point.manifest.query_id) == committed
    assert len(event_ids(tmp_path / "table")) == (committed + 1) * per_batch

    restored = cli(
        work,
        "savepoint",
        "restore",
        point.location,
        "--checkpoint",
        str(tmp_path / "chk2"),
        "--mode",
        "rewind",
    )
    assert restored.returncode == 0, restored.stderr[-2000:]
    assert "left as it is" in restored.stdout  # nothing after the savepoint to roll back
    finish(
        start(
            job(
                "kafka_to_delta",
                tmp_path,
                bootstrap_servers,
                topic,
                checkpoint="chk2",
                per_batch=per_batch,
            ),
            tmp_path,
        )
    )
    assert event_ids(tmp_path / "table") == list(range(events))


def test_restore_run_twice_and_the_old_checkpoint_lose_nothing(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """Issue 24, hole 1 and fencing, as a user runs them: rewind to snapshot 1, run the
    query on the new folder to its end, run the same restore command again (refused:
    the query moved on), then start the old checkpoint by mistake (fenced). Every event
    ends in the table once."""
    events, per_batch = 4000, 1000
    topic = make_topic(partitions=2)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=events)
    work = tmp_path / "shell"
    work.mkdir()
    finish(start(job("kafka_to_delta", tmp_path, bootstrap_servers, topic, per_batch=per_batch),
                 tmp_path))  # fmt: skip
    made = cli(work, "savepoint", "create", str(tmp_path / "chk"), "--dir", str(tmp_path / "sp"),
               "--batch", "1")  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    restore = ("savepoint", "restore", made.stdout.strip(), "--checkpoint",
               str(tmp_path / "chk2"), "--mode", "rewind")  # fmt: skip
    first = cli(work, *restore)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "resumes at batch 2, generation 1" in first.stdout
    assert len(event_ids(tmp_path / "table")) == 2 * per_batch
    finish(start(job("kafka_to_delta", tmp_path, bootstrap_servers, topic, checkpoint="chk2",
                     per_batch=per_batch), tmp_path))  # fmt: skip
    assert event_ids(tmp_path / "table") == list(range(events))

    again = cli(work, *restore)
    assert again.returncode != 0 and "ran on it to batch 3" in again.stderr, again.stderr[-2000:]
    assert event_ids(tmp_path / "table") == list(range(events))

    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=events, count=500)
    stale = run(job("kafka_to_delta", tmp_path, bootstrap_servers, topic, per_batch=per_batch),
                tmp_path)  # fmt: skip
    assert stale.returncode != 0 and "FencedError" in stale.stderr, stale.stderr[-3000:]
    assert "generation 0" in stale.stderr and "generation 1" in stale.stderr
    assert event_ids(tmp_path / "table") == list(range(events))
    finish(start(job("kafka_to_delta", tmp_path, bootstrap_servers, topic, checkpoint="chk2",
                     per_batch=per_batch), tmp_path))  # fmt: skip
    assert event_ids(tmp_path / "table") == list(range(events + 500))
