"""Each format on every other Spark line, through kill -9, as a user runs it: the README's
Kafka → Kafka → Delta script (``docs/examples/kafka_to_kafka.py``: the barrier sink, an
aligned read, the Delta sink) and a ``DeltaUpsert`` job (``tests/user_scripts/upsert_job.py``),
copied into a folder outside the repo and run with the line's interpreter
(``.cache/spark-<line>/bin/python``, built by ``make spark-lines``: that pyspark, this
project editable), no ``PYSPARK_PYTHON``; each killed with SIGKILL (the whole process
tree, from inside: :mod:`spark_chkpt.failpoints`) at each sink's worst step, then run
again: every id once, the upsert's table exact. The README's Kafka → Delta script is the
same source and Delta sink; it runs on ``.venv``'s line (``tests/project/test_docs_examples.py``).

``make test``'s first pass runs these beside the rest of the suite, each test a unit of
work of its own (``tests/conftest.py``, ``SPLIT_BY_TEST``): a line costs its scripts'
JVMs, not a pytest run with its own brokers. ``.venv``'s own line (4.2) is the whole
suite's; its kill chains of the same steps are ``tests/chains/test_exactly_once.py``,
``test_two_stage.py`` and ``test_delta_matrix.py`` (docs/reference/spark-versions.md).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_chkpt.runtime.spark_version import LINES, running_line, version_tuple
from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import produce, user_env

pytestmark = pytest.mark.fault

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 3_000
KEYS = 300  # the upsert's first round: keys 0..299
OTHER_LINES = [line.line for line in LINES if line != running_line()]


@pytest.fixture(params=OTHER_LINES)
def line(request: pytest.FixtureRequest) -> str:
    """The Spark line the test runs on (``"4.0"``)."""
    return str(request.param)


@pytest.fixture
def python(line: str) -> str:
    """The interpreter of the Spark line the test runs on."""
    path = ROOT / ".cache" / f"spark-{line}" / "bin" / "python"
    if not path.exists():
        pytest.fail(f"no venv of Spark {line} at {path.parent.parent}: make spark-lines")
    return str(path)


def run_script(
    python: str,
    folder: Path,
    source: Path,
    *args: str,
    kill_at: str | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """``source`` copied into ``folder`` and run there with ``python`` as its own session
    (a fail point's kill takes the whole tree)."""
    folder.mkdir(exist_ok=True)
    shutil.copy(source, folder / source.name)
    return subprocess.run(
        [python, source.name, *args],
        cwd=folder,
        env=user_env(**env, **({"SPARK_CHKPT_KILL_AT": kill_at} if kill_at else {})),
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=420,
    )


def killed(result: subprocess.CompletedProcess[str], point: str) -> None:
    assert result.returncode == -signal.SIGKILL, (
        f"not killed at {point} (exit {result.returncode}): {result.stderr[-3000:]}"
    )
    assert f"SIGKILL at {point.split('@')[0]}" in result.stderr


def finished(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-4000:]}"
    assert "terminate called" not in result.stderr
    return result.stdout


@pytest.fixture
def page_views(bootstrap_servers: str, make_topic: Callable[..., str]) -> str:
    topic = make_topic(partitions=3)
    produce_page_views(
        bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=EVENTS, spread_over=3
    )
    return topic


def test_readme_kafka_to_kafka_through_kill_9(
    tmp_path: Path, bootstrap_servers: str, page_views: str, python: str
) -> None:
    """The README's Kafka -> Kafka -> Delta script, killed at each sink's worst step in
    turn: job A (the barrier sink) after its barriers, before the control topic's complete
    entry, so the rerun produces the batch again under a new attempt; then job B (the
    Delta sink, reading aligned) after its Delta commit, before the snapshot record and
    Spark's commit log, so the next run replays that batch. Job B's table holds each
    record once."""
    env = {"BOOTSTRAP_SERVERS": bootstrap_servers, "TOPIC": page_views, "WORK": str(tmp_path)}
    script = ROOT / "docs" / "examples" / "kafka_to_kafka.py"
    folder = tmp_path / "reader"
    for point in ("after-barriers@0", "after-delta-commit@0"):
        killed(run_script(python, folder, script, kill_at=point, **env), point)
    out = finished(run_script(python, folder, script, **env))
    assert f"rows {EVENTS} unique {EVENTS}" in out, out


def upsert_round(keys: range, version: str, deletes: range = range(0)) -> list[bytes]:
    rows: list[dict[str, Any]] = [{"id": k, "v": version, "_delete": False} for k in keys]
    rows += [{"id": k, "v": version, "_delete": True} for k in deletes]
    return [json.dumps(r).encode() for r in rows]


def test_delta_upsert_exact_through_kill_9(
    tmp_path: Path,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    python: str,
    line: str,
) -> None:
    """Round 1 (300 keys) with Trigger.AvailableNow and maxOffsetsPerTrigger 100: three
    batches where Spark has admission control, one batch of all 300 where it has not
    (Spark runs AvailableNow as one batch; the source takes everything in it). Round 2
    (updates, deletes, new keys) killed after its first MERGE commit, then run again."""
    topic = make_topic(partitions=1)
    table, chk = tmp_path / "table", tmp_path / "chk"
    script = ROOT / "tests" / "user_scripts" / "upsert_job.py"
    args = (bootstrap_servers, topic, str(table), str(chk), "id BIGINT, v STRING, _delete BOOLEAN")

    produce(producer, topic, upsert_round(range(KEYS), "a"))
    finished(run_script(python, tmp_path / "job", script, *args, "100"))
    first = DeltaTable(str(table))  # one commit per batch, the first creates the table
    admission_control = version_tuple(line) >= (4, 2)  # spark_version.has_admission_control
    assert first.version() == (2 if admission_control else 0), line
    assert first.to_pyarrow_table().num_rows == KEYS

    # round 2, each key once: 0..149 updated, 150..199 deleted, 300..399 new
    produce(producer, topic, upsert_round(range(150), "b", deletes=range(150, 200)))
    produce(producer, topic, upsert_round(range(KEYS, KEYS + 100), "b"))
    killed(
        run_script(python, tmp_path / "job", script, *args, "1000", kill_at="after-delta-commit"),
        "after-delta-commit",
    )
    finished(run_script(python, tmp_path / "job", script, *args, "1000"))
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    got = sorted((r["id"], r["v"]) for r in rows)
    expected = sorted(
        [(k, "b") for k in range(150)]
        + [(k, "a") for k in range(200, KEYS)]
        + [(k, "b") for k in range(KEYS, KEYS + 100)]
    )
    assert got == expected
