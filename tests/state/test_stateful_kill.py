"""Stateful exactly-once under kill -9: the seeds' per-app page-view counts.

The real job (``python -m spark_chkpt.jobs.page_views``) runs as a driver process in its
own session, once per mode (complete, upsert, windowed), through a chain of kills; in
complete mode one per step of the snapshot protocol (upsert and windowed: steps 1 and 3,
where their state handling differs):

1. ``in-write@1``: while batch 1's tasks run (the state store's version 2 half written;
   windowed: the same chain from batch 2, the first with rows to write);
2. ``after-staging@1``: batch 1's output staged, nothing committed;
3. ``after-delta-commit@2``: batch 2 in Delta, not in the snapshot store nor the commit
   log (the restart replays it: discarded, its state version committed again);
4. ``after-commit-log@3``: ``commits/3`` written (the progress event of batch 3);
5. a last run to the end.

(``after-snapshot`` sits between 3 and 4 in the same code path; the chkpt-delta suite,
tests/chains/test_exactly_once.py, kills there.) In complete mode the test then reads the
keyed state of snapshot 2 with ``spark-chkpt state`` and compares it with the counts of
``offsets/2``: the state after kills and replays is the seeds' ``(app, count)`` at
barrier 2.

After each kill every Delta version a snapshot record names must hold exactly the counts
of the input below that snapshot's source offsets, and at the end the table must equal
the counts computed from the input with plain Python, key by key.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_chkpt.snapshot.store import SnapshotStore
from spark_chkpt.testing.generator import PageViews, produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.fault

EVENTS = 6000
PARTITIONS = 2
PER_BATCH = 1000  # 6 batches
WATERMARK_MS = 10_000
KILLS = (
    "in-write@1",
    "after-staging@1",
    "after-delta-commit@2",
    "after-commit-log@3",
)
# Upsert and windowed run the two kills where their state differs from complete mode's:
# a state version half written (in-write) and a batch in Delta whose state version the
# restart commits again (after-delta-commit). The two other steps run the same code in
# every mode and are killed in complete mode here and in tests/chains/test_exactly_once.py
# (cutting them saves four job runs, about four minutes of CI).
UPSERT_KILLS = ("in-write@1", "after-delta-commit@2")
# Windowed: batches 0 and 1 emit nothing (no window closed yet: the watermark a batch
# uses is the one the batch before it reached), so a write task first has rows in batch 2.
WINDOWED_KILLS = ("in-write@2", "after-delta-commit@3")
KILLS_OF = {"complete": KILLS, "upsert": UPSERT_KILLS, "windowed": WINDOWED_KILLS}


def run_job(
    tmp_path: Path, servers: str, topic: str, mode: str, *, kill_at: str | None
) -> subprocess.CompletedProcess:
    env = user_env()
    if kill_at:
        env["SPARK_CHKPT_KILL_AT"] = kill_at
    command = [
        sys.executable,
        "-m",
        "spark_chkpt.jobs.page_views",
        "--mode",
        mode,
        "--bootstrap-servers",
        servers,
        "--topic",
        topic,
        "--table",
        str(tmp_path / "table"),
        "--checkpoint",
        str(tmp_path / "chk"),
        "--trigger",
        "availableNow",
        "--max-offsets-per-trigger",
        str(PER_BATCH),
        "--master",
        "local[2]",
        "--set",
        f"job.watermark={WATERMARK_MS // 1000} seconds",
        "--set",
        "sink.orphanRetention=0ms",
    ]
    return subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=420,
    )


def events_of(partition: int) -> list[int]:
    """Event ids on ``partition`` in offset order (``spread_over``: event i on i % P)."""
    return list(range(partition, EVENTS, PARTITIONS))


def counts_below(ends: dict[str, int]) -> dict[str, int]:
    """Per-app counts of the events below each partition's end offset, in plain Python."""
    views = PageViews()
    counts: Counter[str] = Counter()
    for partition, end in ends.items():
        for event_id in events_of(int(partition))[:end]:
            counts[str(views.event(event_id)["app"])] += 1
    return dict(counts)


def closed_windows(ends: dict[str, int]) -> dict[tuple[str, int], int]:
    """Per app and one-minute window, the counts of windows the watermark closed after
    reading below ``ends`` (watermark = newest event time - 10 s)."""
    views = PageViews()
    read = [i for p, end in ends.items() for i in events_of(int(p))[:end]]
    watermark = views.start_ms + max(read) * 37 - WATERMARK_MS
    counts: Counter[tuple[str, int]] = Counter()
    for event_id in read:
        ts = views.start_ms + event_id * 37
        start = ts - ts % 60_000
        if start + 60_000 <= watermark:
            counts[(str(views.event(event_id)["app"]), start)] += 1
    return dict(counts)


def table_counts(path: Path, version: int | None = None) -> dict[str, int]:
    rows = DeltaTable(str(path), version=version).to_pyarrow_table().to_pylist()
    apps = [r["app"] for r in rows]
    assert len(apps) == len(set(apps)), f"an app twice at version {version}: {sorted(apps)}"
    return {r["app"]: r["count"] for r in rows}


def table_windows(path: Path) -> dict[tuple[str, int], int]:
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    got = {(r["app"], int(r["window_start"].timestamp() * 1000)): r["count"] for r in rows}
    assert len(got) == len(rows), "a window appended twice"
    return got


def check_snapshots(tmp_path: Path, topic: str, mode: str) -> int:
    """Every Delta version a snapshot record names holds exactly that snapshot's counts;
    returns how many snapshots were checked."""
    store = SnapshotStore(checkpoint_location=str(tmp_path / "chk"))
    checked = 0
    for batch_id in store.batch_ids():
        record = store.get(batch_id)
        assert record is not None and record.table_version is not None, batch_id
        (offsets,) = record.source_offsets
        ends = {p: int(o) for p, o in offsets[topic].items()}
        if mode == "windowed":
            continue  # appends: checked as a whole at the end
        assert record.mode == mode
        assert table_counts(tmp_path / "table", record.table_version) == counts_below(ends), (
            f"snapshot {batch_id} at Delta version {record.table_version}"
        )
        checked += 1
    return checked


@pytest.mark.parametrize("mode", ["complete", "upsert", "windowed"])
def test_counts_exact_through_a_kill_at_every_step(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str], mode: str
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    produce_page_views(
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        first=0,
        count=EVENTS,
        spread_over=PARTITIONS,
    )
    for kill_at in KILLS_OF[mode]:
        result = run_job(tmp_path, bootstrap_servers, topic, mode, kill_at=kill_at)
        assert result.returncode == -signal.SIGKILL, (
            f"{mode}: expected SIGKILL at {kill_at}, got {result.returncode}\n"
            f"{result.stderr[-3000:]}"
        )
        check_snapshots(tmp_path, topic, mode)
    result = run_job(tmp_path, bootstrap_servers, topic, mode, kill_at=None)
    assert result.returncode == 0, result.stderr[-3000:]
    everything = {str(p): len(events_of(p)) for p in range(PARTITIONS)}
    if mode == "windowed":
        assert table_windows(tmp_path / "table") == closed_windows(everything)
    else:
        assert table_counts(tmp_path / "table") == counts_below(everything)
        assert sum(table_counts(tmp_path / "table").values()) == EVENTS
        assert check_snapshots(tmp_path, topic, mode) >= 6
    if mode == "complete":
        assert_state_at_batch_2(tmp_path, topic)
    commits = sorted(
        int(p.name) for p in (tmp_path / "chk" / "commits").iterdir() if p.name.isdigit()
    )
    assert commits[:6] == [0, 1, 2, 3, 4, 5]


def assert_state_at_batch_2(tmp_path: Path, topic: str) -> None:
    """``spark-chkpt state --batch 2`` (a subprocess, the user's environment) equals the
    per-app counts of the input below ``offsets/2``."""
    plan = (tmp_path / "chk" / "offsets" / "2").read_text().splitlines()
    ends = {p: int(o) for p, o in json.loads(plan[2])[topic].items()}
    cli = Path(sys.executable).with_name("spark-chkpt")
    shown = subprocess.run(
        [str(cli), "state", str(tmp_path / "chk"), "--batch", "2", "--json"],
        cwd=tmp_path,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    rows = json.loads(shown.stdout)["rows"]
    state = {r["app"]: r["count"] for r in rows}
    assert state == counts_below(ends) and sum(state.values()) == 3 * PER_BATCH
