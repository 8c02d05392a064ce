"""A savepoint rewind of a query that writes Kafka, on the real broker with the real
two-stage job (jobs/two_stage.py) and the CLI run from a folder outside the repo.

Stage A (raw → mid, chkpt-kafka) and stage B (mid → Delta, one A snapshot per batch)
run to snapshot 3; both are savepointed at snapshot 1 (B's batch 1 ends at A's barrier
1: the matching cut) and rewound. A's rewind revokes its snapshots 2 and 3 in
``__chkpt.<mid>``; A then writes 2, 3, ... again, and B, restored at the matching cut,
reads every event once and nothing of the revoked timeline. B's old checkpoint, which
had read past barrier 1 into the revoked snapshots, fails naming the revocation."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.kafka.sink.control_topic import ControlTopic
from spark_chkpt.savepoint.manifest import create_savepoint
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("spark-chkpt"))
PER_BATCH = 250
FIRST = 1000  # events before the rewind: A's snapshots 0..3
MORE = 500  # events after it


def job(
    spark: Any, stage: str, servers: str, topics: tuple[str, str], chk: Path, table: Path
) -> Any:
    """Run stage ``stage`` of jobs/two_stage.py to the end of its input (availableNow) on
    the session's Spark (one JVM for every run keeps the test short)."""
    from spark_chkpt.jobs import two_stage

    args = argparse.Namespace(
        bootstrap_servers=servers,
        input=topics[0],
        middle=topics[1],
        table=str(table),
        checkpoint=str(chk),
        trigger="availableNow",
        max_offsets_per_trigger=PER_BATCH if stage == "a" else None,
        alignment="aligned",
        alignment_timeout=None,
        # B: one A snapshot (250 records and 3 barriers) per batch.
        source_option=[f"maxOffsetsPerTrigger={PER_BATCH}"] if stage == "b" else [],
        sink_option=[],
    )
    query = (two_stage.stage_a if stage == "a" else two_stage.stage_b)(spark, args)
    query.awaitTermination()
    return query


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=300
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    """The command's output, once it exited 0."""
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


def report(chk: Path, batch: int, topic: str) -> dict[str, object]:
    """The alignment report B's source wrote with batch ``batch``'s end offsets."""
    lines = (chk / "offsets" / str(batch)).read_text().splitlines()
    doc = json.loads(lines[2])
    return dict(doc["__chkpt__"]["topics"][topic])


def test_rewind_of_a_kafka_sink_revokes_and_downstream_reads_each_event_once(
    tmp_path: Path, spark: Any, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    raw = make_topic(partitions=3, suffix="raw")
    mid = make_topic(partitions=3, suffix="mid")
    topics = (raw, mid)
    table = tmp_path / "table"
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=raw, first=0, count=FIRST)
    job(spark, "a", bootstrap_servers, topics, tmp_path / "chk-a", table)
    job(spark, "b", bootstrap_servers, topics, tmp_path / "chk-b", table)
    assert [report(tmp_path / "chk-b", n, mid)["snapshots"] for n in range(4)] == [
        [0],
        [1],
        [2],
        [3],
    ]

    # Savepoints of both at snapshot 1: A's snapshot 1, B's batch that ends at barrier 1.
    sp_a, sp_b = (
        create_savepoint(
            checkpoint_location=str(tmp_path / f"chk-{s}"),
            savepoint_dir=str(tmp_path / f"sp-{s}"),
            batch_id=1,
        ).location
        for s in "ab"
    )
    # Without the brokers a Kafka rewind is refused before anything is written.
    rewind_a = ["savepoint", "restore", sp_a, "--checkpoint", str(tmp_path / "a2")]
    refused = cli(tmp_path, *rewind_a, "--mode", "rewind")
    assert refused.returncode != 0 and "--bootstrap-servers" in refused.stderr
    assert not (tmp_path / "a2").exists()

    out = ok(cli(tmp_path, *rewind_a, "--mode", "rewind", "--bootstrap-servers", bootstrap_servers))
    assert f"topic {mid}: snapshots 2, 3 after 1 revoked at generation 1" in out, out
    restore_savepoint(savepoint=sp_b, checkpoint_location=str(tmp_path / "b2"), mode="rewind")
    # Run again (an interrupted restore finished): no second revocation.
    again = restore_savepoint(
        savepoint=sp_a,
        checkpoint_location=str(tmp_path / "a2"),
        mode="rewind",
        kafka_bootstrap_servers=bootstrap_servers,
    )
    assert again.generation == 1 and again.revoked == {mid: (2, 3)}
    index = ControlTopic(
        bootstrap_servers=bootstrap_servers, control_topic=control_topic_for(mid), data_topic=mid
    )
    index.refresh()
    (revocation,) = index.revocations()
    assert (revocation.snapshot_id, revocation.revoked, revocation.generation) == (1, (2, 3), 1)
    index.close()

    # A writes snapshots 2, 3, ... again under generation 1; B reads on from its cut.
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=raw, first=FIRST, count=MORE)
    job(spark, "a", bootstrap_servers, topics, tmp_path / "a2", table)
    job(spark, "b", bootstrap_servers, topics, tmp_path / "b2", table)
    ids = DeltaTable(str(table)).to_pyarrow_table(columns=["event_id"]).column("event_id")
    counts = Counter(ids.to_pylist())
    assert sorted(counts) == list(range(FIRST + MORE)), "events missing"
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]
    # B's first batch after the cut skipped the revoked snapshots' records and barriers,
    # and says so in its report.
    first = report(tmp_path / "b2", 2, mid)
    assert first["snapshots"] == [2] and first["revoked"] == 2 * (PER_BATCH + 3), first

    # B's old checkpoint read snapshots 2 and 3 of the revoked timeline: it must fail,
    # naming the revocation, not read on.
    with pytest.raises(Exception, match="RevokedSnapshotError") as failed:
        job(spark, "b", bootstrap_servers, topics, tmp_path / "chk-b", tmp_path / "t-old")
    for part in (f"topic {mid}", revocation.app_id, "revoked snapshots 2, 3", "generation 1"):
        assert part in str(failed.value), part
