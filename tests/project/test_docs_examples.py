"""The docs' examples (``docs/examples/``, included into the pages by
pymdownx.snippets), run the way a reader runs them: copied into a folder outside the
repo and started as their own process, with no ``PYSPARK_PYTHON`` in the environment.
Each prints what it wrote; the test compares that with what was produced."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_chkpt.testing.generator import PageViews, produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
EVENTS = 2_000  # event i is at 2026-01-01T00:00:00 + 37 ms * i: 74 s, two 1-minute windows


@pytest.fixture
def page_views(bootstrap_servers: str, make_topic: Callable[..., str]) -> str:
    topic = make_topic(partitions=2)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=EVENTS)
    return topic


def run_example(
    name: str, tmp_path: Path, *, servers: str, topic: str
) -> subprocess.CompletedProcess[str]:
    """Copy ``docs/examples/<name>`` into a folder of its own and run it there."""
    folder = tmp_path / "reader"
    folder.mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / name, folder / name)
    command = [sys.executable, name] if name.endswith(".py") else ["bash", name]
    env = user_env(BOOTSTRAP_SERVERS=servers, TOPIC=topic, WORK=str(tmp_path / "work"))
    # The shell examples call the console scripts of the environment the reader installed.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=400
    )
    assert result.returncode == 0, f"{name} exited {result.returncode}:\n{result.stderr[-4000:]}"
    assert "terminate called" not in result.stderr
    return result


def test_kafka_to_delta_example(tmp_path: Path, bootstrap_servers: str, page_views: str) -> None:
    out = run_example(
        "kafka_to_delta.py", tmp_path, servers=bootstrap_servers, topic=page_views
    ).stdout
    assert f"rows {EVENTS} unique {EVENTS}" in out
    snapshots = [line for line in out.splitlines() if line.startswith("snapshot ")]
    assert snapshots and all(line.endswith("committed") for line in snapshots), out
    assert sum(int(line.split()[2]) for line in snapshots) == EVENTS


def test_kafka_to_kafka_example(tmp_path: Path, bootstrap_servers: str, page_views: str) -> None:
    out = run_example(
        "kafka_to_kafka.py", tmp_path, servers=bootstrap_servers, topic=page_views
    ).stdout
    assert f"rows {EVENTS} unique {EVENTS}" in out


def test_stateful_example_then_its_savepoint(
    tmp_path: Path, bootstrap_servers: str, page_views: str
) -> None:
    """complete, upsert and windowed counts equal the counts of the produced events;
    then the savepoint commands of the how-to run on the complete query's checkpoint."""
    out = run_example("stateful.py", tmp_path, servers=bootstrap_servers, topic=page_views).stdout
    events = [PageViews(seed=1).event(i) for i in range(EVENTS)]
    per_app = sorted(Counter(str(e["app"]) for e in events).items())
    assert f"pv_complete {EVENTS} {per_app}" in out, out
    assert f"pv_upsert {EVENTS} {per_app}" in out, out
    # The watermark (newest event time - 10 s = 00:01:04) has closed the first minute only.
    first_minute = [e for e in events if str(e["ts"]) < "2026-01-01T00:01:00"]
    closed = sorted(Counter(str(e["app"]) for e in first_minute).items())
    assert f"pv_windowed {len(first_minute)} {closed}" in out, out
    assert "state of snapshot 0: 5 keys" in out, out

    sp = run_example("savepoint.sh", tmp_path, servers=bootstrap_servers, topic=page_views)
    assert "savepoint-0-" in sp.stdout, sp.stdout
    assert (tmp_path / "work" / "chk" / "pv_complete_fork" / "metadata").is_file(), sp.stdout
