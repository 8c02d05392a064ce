"""Dead letters and auto compaction under kill -9: the driver dies after the batch's dead
letters are committed but before its table commit, then after both and after the auto
compaction that follows them (before Spark's commit log); the restart must leave every
good event in the table once (read by delta-rs and by delta-spark) and every malformed
record in the dead-letter table once."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from spark_chkpt.delta.sink.compaction import COMPACTION_KEY
from spark_chkpt.testing.generator import produce_page_views
from tests.chains.test_exactly_once import EVENTS, _killed, job_command
from tests.helpers import produce, user_env

pytestmark = pytest.mark.fault

BAD = 30


def run(
    tmp_path: Path, servers: str, topic: str, *, kill_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = [
        *job_command(tmp_path, servers, topic),
        *("--set", "job.badRecords=deadLetter"),
        *("--set", f"sink.deadLetterPath={tmp_path / 'dead'}"),
        # every partition compacted once it holds two small files: each batch crosses
        *("--set", "sink.autoCompact=true"),
        *("--set", "sink.autoCompactMinNumFiles=2"),
    ]
    env = user_env(**({"SPARK_CHKPT_KILL_AT": kill_at} if kill_at else {}))
    return subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=420,
    )


def test_dead_letters_and_compaction_exactly_once_across_kills(
    tmp_path: Path,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: object,
    spark: SparkSession,
) -> None:
    """Batch 1 killed twice, one point a run: after its dead letters are committed, then
    (its replay) after its table commit, its record and the auto compaction that
    follows them (one chain: the kills used to run a chain each, a job run more)."""
    topic = make_topic(partitions=3)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=EVENTS // 2)
    produce(producer, topic, [b"{bad %d" % i for i in range(BAD)], partitions=3)
    produce_page_views(
        bootstrap_servers=bootstrap_servers, topic=topic, first=EVENTS // 2, count=EVENTS // 2
    )
    for kill_at in ("after-dead-letters@1", "after-compaction@1"):
        _killed(run(tmp_path, bootstrap_servers, topic, kill_at=kill_at))
        dead_before = DeltaTable(str(tmp_path / "dead")).to_pyarrow_table().num_rows
        assert dead_before > 0  # batch 1's letters were committed before the kill
    killed_at = DeltaTable(str(tmp_path / "table")).history(1)[0]
    assert killed_at["operation"] == "OPTIMIZE" and COMPACTION_KEY in killed_at
    result = run(tmp_path, bootstrap_servers, topic)
    assert result.returncode == 0, result.stderr[-3000:]

    table = DeltaTable(str(tmp_path / "table"))
    ids = table.to_pyarrow_table(columns=["event_id"])
    assert sorted(ids.column("event_id").to_pylist()) == list(range(EVENTS))
    spark_ids = spark.read.format("delta").load(str(tmp_path / "table")).select("event_id")
    assert sorted(r.event_id for r in spark_ids.collect()) == list(range(EVENTS))
    app_id = json.loads((tmp_path / "chk" / "metadata").read_text())["id"]
    last = max(int(p.name) for p in (tmp_path / "chk" / "commits").iterdir() if p.name.isdigit())
    assert table.transaction_version(app_id) == last
    dead = DeltaTable(str(tmp_path / "dead")).to_pyarrow_table().to_pylist()
    positions = Counter((r["partition"], r["offset"]) for r in dead)
    assert len(positions) == BAD and max(positions.values()) == 1
    assert sorted(r["value"] for r in dead) == sorted(b"{bad %d" % i for i in range(BAD))
