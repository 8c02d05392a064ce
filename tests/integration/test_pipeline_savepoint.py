"""Pipeline savepoints with the real two-stage job (jobs/two_stage.py) on the real
broker: ``spark-chkpt savepoint create/list/show/restore --pipeline`` run as a user's
shell runs them (a folder outside the repo, no PYSPARK_PYTHON).

Stage A (raw → mid) runs to snapshot 5 while stage B (mid → Delta, one A snapshot per
batch) has read to A's snapshot 3 only: the pipeline savepoint takes A at 3 and B at
its batch that ends at barrier 3, the newest cut both hold. A create killed midway
leaves nothing listed; a restore that one job cannot take changes nothing and names the
job; the rewind of both (A's snapshots 4 and 5 revoked) then runs to every event once."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import user_env
from tests.integration.test_kafka_rewind import CLI, PER_BATCH, job, ok

pytestmark = pytest.mark.integration


def cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command in its own session: a fail point's kill takes its session down."""
    return subprocess.run(
        [CLI, *args],
        cwd=cwd,
        env=user_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )


def test_pipeline_savepoint_create_show_restore(
    tmp_path: Path, spark: Any, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    raw = make_topic(partitions=3, suffix="raw")
    mid = make_topic(partitions=3, suffix="mid")
    topics = (raw, mid)
    table = tmp_path / "table"
    chk_a, chk_b = tmp_path / "chk-a", tmp_path / "chk-b"
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=raw, first=0, count=1000)
    job(spark, "a", bootstrap_servers, topics, chk_a, table)  # snapshots 0..3
    job(spark, "b", bootstrap_servers, topics, chk_b, table)  # batches 0..3
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=raw, first=1000, count=500)
    job(spark, "a", bootstrap_servers, topics, chk_a, table)  # snapshots 4, 5; B not yet

    work = tmp_path / "user"
    work.mkdir()
    sp = tmp_path / "sp"
    create = ["savepoint", "create", "--pipeline", "two", "--job", str(chk_a), "--job",
              str(chk_b), "--dir", str(sp), "--bootstrap-servers", bootstrap_servers]  # fmt: skip
    # Killed midway (a job's savepoint half copied): nothing listed.
    killed = cli(work, *create, SPARK_CHKPT_KILL_AT="in-savepoint")
    assert killed.returncode == -9, killed.stderr[-3000:]
    listed = cli(work, "savepoint", "list", str(sp))
    assert listed.returncode == 1 and "no complete savepoint" in listed.stdout, listed.stdout
    assert "pipeline pipeline-" not in listed.stdout

    location = ok(cli(work, *create)).strip()
    listed = cli(work, "savepoint", "list", str(sp))
    assert listed.returncode == 0 and "stage_a at 3, stage_b at 3" in listed.stdout, listed
    shown = ok(cli(work, "savepoint", "show", "--pipeline", location))
    manifest = json.loads((Path(location.removeprefix("file://")) / "pipeline.json").read_text())
    (join,) = manifest["joins"]
    assert (join["upstream"], join["snapshot"], join["downstream"], join["downstream_batch"]) == (
        "stage_a",
        3,
        "stage_b",
        3,
    )
    offsets = ", ".join(f"{p}:{o}" for p, o in sorted(join["offsets"].items()))
    assert f"join        {mid}: stage_a snapshot 3" in shown and offsets in shown, shown
    # B's batch 3 ends exactly there.
    end = json.loads((chk_b / "offsets" / "3").read_text().splitlines()[2])[mid]
    assert end == join["offsets"]

    # A restore one job cannot take (A writes Kafka: the brokers are needed) changes
    # nothing, B's table included, and names the job.
    version = DeltaTable(str(table)).version()
    restored = tmp_path / "restored"
    restore = ["savepoint", "restore", "--pipeline", location, "--mode", "rewind",
               "--checkpoint-dir", str(restored)]  # fmt: skip
    refused = cli(work, *restore)
    assert refused.returncode != 0
    assert "job stage_a" in refused.stderr and "nothing was changed" in refused.stderr
    assert "--bootstrap-servers" in refused.stderr, refused.stderr[-3000:]
    assert not restored.exists() and DeltaTable(str(table)).version() == version

    out = ok(cli(work, *restore, "--bootstrap-servers", bootstrap_servers))
    assert f"topic {mid}: snapshots 4, 5 after 3 revoked" in out, out
    job(spark, "a", bootstrap_servers, topics, restored / "stage_a", table)
    job(spark, "b", bootstrap_servers, topics, restored / "stage_b", table)
    ids = DeltaTable(str(table)).to_pyarrow_table(columns=["event_id"]).column("event_id")
    counts = Counter(ids.to_pylist())
    assert sorted(counts) == list(range(1500)) and max(counts.values()) == 1
    assert PER_BATCH == 250
