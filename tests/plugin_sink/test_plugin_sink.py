"""The third sink, a user's plugin (``chkpt_jsonl``, this folder), through the project's
chains: the two-phase commit under kill -9 at each of its steps, then a savepoint
rewound and forked by the ``spark-chkpt`` command, all found through the entry point
group ``spark_chkpt.sinks`` (nothing of the plugin is imported by the engine).

Each run is the job of ``job.py`` as a driver process in its own session, with the
plugin on ``PYTHONPATH`` as an installed distribution puts it (``installed.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_chkpt.failpoints import FaultPoint
from spark_chkpt.snapshot.store import SnapshotStore
from tests.helpers import chkpt_cli, ok, produce, user_env
from tests.plugin_sink.installed import PLUGIN, env_with, install

pytestmark = pytest.mark.fault

EVENTS = 300
PER_BATCH = 100  # 3 partitions: 3 batches


@pytest.fixture
def site(tmp_path: Path) -> list[str]:
    return install(tmp_path / "site")


@pytest.fixture
def events(make_topic: Callable[..., str], producer: object) -> str:
    topic = make_topic(partitions=3)
    produce(producer, topic, [str(i).encode() for i in range(EVENTS)], partitions=3)
    return topic


def run_job(
    site: list[str], servers: str, topic: str, *, path: Path, checkpoint: Path, kill_at: str = ""
) -> subprocess.CompletedProcess[str]:
    env = env_with(site, user_env(**({"SPARK_CHKPT_KILL_AT": kill_at} if kill_at else {})))
    command = [sys.executable, str(PLUGIN / "job.py"), "--bootstrap-servers", servers]
    command += ["--topic", topic, "--path", str(path), "--checkpoint", str(checkpoint)]
    return subprocess.run(
        [*command, "--max-offsets-per-trigger", str(PER_BATCH)],
        cwd=path.parent,
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=420,
    )


def folder_ids(path: Path) -> list[int]:
    from chkpt_jsonl.folder import JsonLinesFolder

    return sorted(int(row["id"]) for row in JsonLinesFolder(str(path)).rows())


def folder_batches(path: Path) -> list[int]:
    from chkpt_jsonl.folder import JsonLinesFolder

    return JsonLinesFolder(str(path)).batches()


def refuse_migrate(checkpoint: Path, path: Path) -> None:
    """``migrate`` asks the checkpoint's sink kind, which does not support it; ``recover``,
    ``diff`` and ``lineage`` of the folder ask the kinds which one writes it."""
    from spark_chkpt.diff.tables import diff_tables
    from spark_chkpt.errors import UnsupportedSinkError
    from spark_chkpt.lineage import trace
    from spark_chkpt.migrate.options import MigrateOptions
    from spark_chkpt.migrate.plan import plan_migration
    from spark_chkpt.recovery.rebuild import recover_checkpoint
    from spark_chkpt.sinks import registry

    options = MigrateOptions.from_values(
        checkpoint=str(checkpoint), to="spark", table=str(path), watch_s=0
    )
    with pytest.raises(UnsupportedSinkError, match="sink kind 'chkpt-jsonl' does not support"):
        plan_migration(options=options)
    registry._plugins_loaded = False  # the entry point is on the path only now
    try:
        with pytest.raises(UnsupportedSinkError, match="'chkpt-jsonl' does not support recover"):
            recover_checkpoint(table_uri=str(path), checkpoint_location=f"{checkpoint}-new")
        with pytest.raises(UnsupportedSinkError, match="'chkpt-jsonl' does not support diff"):
            diff_tables(table_a=str(path), table_b=str(path))
        with pytest.raises(UnsupportedSinkError, match="'chkpt-jsonl' does not support lineage"):
            trace(table=str(path), version=1)
    finally:
        registry._KINDS.pop("chkpt-jsonl", None)
        registry._plugins_loaded = False


@pytest.fixture(autouse=True)
def _plugin_importable(site: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for entry in site:
        monkeypatch.syspath_prepend(entry)


def test_every_id_once_through_a_kill_at_each_step(
    site: list[str], bootstrap_servers: str, events: str, tmp_path: Path
) -> None:
    """One checkpoint, killed at batch 1 after its staging, then (its replay) after its
    commit to the folder, then at batch 2 after its snapshot record; the last run
    finishes: every id once, each batch's files once."""
    path, checkpoint = tmp_path / "out", tmp_path / "chk"
    for point, batch, visible in (
        (FaultPoint.AFTER_STAGING, 1, [0]),  # staged, not committed: nothing of batch 1
        (FaultPoint.AFTER_DELTA_COMMIT, 1, [0, 1]),  # committed; the store not yet
        (FaultPoint.AFTER_SNAPSHOT, 2, [0, 1, 2]),  # recorded; Spark's log not yet
    ):
        killed = run_job(
            site,
            bootstrap_servers,
            events,
            path=path,
            checkpoint=checkpoint,
            kill_at=f"{point.value}@{batch}",
        )
        assert killed.returncode < 0, (point, killed.stderr[-3000:])
        assert f"SIGKILL at {point.value} of batch {batch}" in killed.stderr
        assert folder_batches(path) == visible, point
        ids = folder_ids(path)
        assert len(ids) == len(set(ids)) == len(visible) * PER_BATCH, (point, ids)
    done = run_job(site, bootstrap_servers, events, path=path, checkpoint=checkpoint)
    assert done.returncode == 0, done.stderr[-3000:]
    assert folder_ids(path) == list(range(EVENTS))
    assert folder_batches(path) == [0, 1, 2]
    records = [SnapshotStore(checkpoint_location=str(checkpoint)).get(b) for b in range(3)]
    assert [r.sink if r else None for r in records] == ["chkpt-jsonl"] * 3
    assert all(r is not None and r.source_offsets for r in records)  # with source offsets
    assert all(r is not None and "files" in r.sink_state for r in records)  # its own part


def test_a_savepoint_rewound_and_forked(
    site: list[str], bootstrap_servers: str, events: str, producer: object, tmp_path: Path
) -> None:
    path, checkpoint = tmp_path / "out", tmp_path / "chk"
    first = run_job(site, bootstrap_servers, events, path=path, checkpoint=checkpoint)
    assert first.returncode == 0, first.stderr[-3000:]
    assert folder_batches(path) == [0, 1, 2]
    refuse_migrate(checkpoint, path)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return chkpt_cli(tmp_path, *args, PYTHONPATH=env_with(site, user_env())["PYTHONPATH"])

    ok(cli("savepoint", "create", str(checkpoint), "--dir", str(tmp_path / "sp"), "--batch", "1"))
    [savepoint] = [p for p in (tmp_path / "sp").iterdir() if p.is_dir()]
    shown = ok(cli("savepoint", "show", str(savepoint)))
    assert "chkpt-jsonl" in shown and "commit 1 of " in shown
    status = json.loads(ok(cli("status", str(checkpoint), "--json")))
    assert status["last_snapshot"]["sink"] == "chkpt-jsonl", status

    # A fork into the savepoint's own folder is refused before anything is written.
    refused = cli(
        "savepoint", "restore", str(savepoint), "--checkpoint", str(tmp_path / "bad"),
        "--mode", "fork", "--sink-option", f"path={path}",
    )  # fmt: skip
    assert refused.returncode != 0 and "a fork writes a new table" in refused.stderr
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())

    # The fork: a new query from snapshot 1 into a new folder; the original left alone.
    ok(cli("savepoint", "restore", str(savepoint), "--checkpoint", str(tmp_path / "fork"),
           "--mode", "fork"))  # fmt: skip
    fork = run_job(
        site, bootstrap_servers, events, path=tmp_path / "forked", checkpoint=tmp_path / "fork"
    )
    assert fork.returncode == 0, fork.stderr[-3000:]
    assert folder_batches(tmp_path / "forked") == [2]
    upto_1 = [i for i in folder_ids(path) if i not in folder_ids(tmp_path / "forked")]
    assert sorted(upto_1 + folder_ids(tmp_path / "forked")) == list(range(EVENTS))
    assert folder_batches(path) == [0, 1, 2]

    # The rewind: the same query back at snapshot 1, batch 2 dropped and written again.
    rewound = ok(cli("savepoint", "restore", str(savepoint), "--checkpoint",
                     str(tmp_path / "rewound"), "--mode", "rewind"))  # fmt: skip
    assert folder_batches(path) == [0, 1]
    app_id = json.loads((checkpoint / "metadata").read_text())["id"]
    generation = json.loads((path / "_generations" / f"{app_id}.json").read_text())
    assert generation == {"generation": 1}, rewound
    again = run_job(site, bootstrap_servers, events, path=path, checkpoint=tmp_path / "rewound")
    assert again.returncode == 0, again.stderr[-3000:]
    assert folder_batches(path) == [0, 1, 2]
    assert folder_ids(path) == list(range(EVENTS))

    # The old checkpoint's writer is fenced: its generation 0 < the folder's 1.
    produce(producer, events, [str(EVENTS + i).encode() for i in range(30)], partitions=3)
    fenced = run_job(site, bootstrap_servers, events, path=path, checkpoint=checkpoint)
    assert fenced.returncode != 0 and "generation" in fenced.stderr, fenced.stderr[-3000:]
    assert folder_ids(path) == list(range(EVENTS))


def test_the_commands_it_does_not_support_say_so(site: list[str], tmp_path: Path) -> None:
    from spark_chkpt.errors import UnsupportedSinkError
    from spark_chkpt.sinks import registry, require_tool

    registry._plugins_loaded = False  # the entry point is on the path only now
    try:
        for tool in ("recover", "diff", "lineage", "migrate"):
            with pytest.raises(
                UnsupportedSinkError, match=f"'chkpt-jsonl' does not support {tool}"
            ):
                require_tool("chkpt-jsonl", tool=tool, command=tool)  # type: ignore[arg-type]
    finally:
        registry._KINDS.pop("chkpt-jsonl", None)
        registry._plugins_loaded = False
