"""A savepoint rewind of a query that writes Kafka, on the real broker with the real
two-stage job (jobs/two_stage.py) and the CLI run from a folder outside the repo.

Stage A (raw → mid, chkpt-kafka) and stage B (mid → Delta, one A snapshot per batch)
run to snapshot 3; both are savepointed at snapshot 1 (B's batch 1 ends at A's barrier
1: the matching cut) and rewound. A's rewind revokes its snapshots 2 and 3 in
``__chkpt.<mid>``; A then writes 2, 3, ... again, and B, restored at the matching cut,
reads every event once and nothing of the revoked timeline. B's old checkpoint, which
had read past barrier 1 into the revoked snapshots, fails naming the revocation."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.kafka.sink.control_topic import ControlTopic
from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("spark-chkpt"))
PER_BATCH = 250
FIRST = 1000  # events before the rewind: A's snapshots 0..3
MORE = 500  # events after it


def job(
    cwd: Path, stage: str, servers: str, topics: tuple[str, str], chk: Path, table: Path
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "spark_chkpt.jobs.two_stage",
        "--stage",
        stage,
        "--bootstrap-servers",
        servers,
        "--input",
        topics[0],
        "--middle",
        topics[1],
        "--checkpoint",
        str(chk),
        "--trigger",
        "availableNow",
        "--master",
        "local[2]",
    ]
    if stage == "a":
        command += ["--max-offsets-per-trigger", str(PER_BATCH)]
    else:
        # One A snapshot (250 records and 3 barriers) per batch of B.
        command += ["--table", str(table), "--source-option", f"maxOffsetsPerTrigger={PER_BATCH}"]
    return subprocess.run(
        command, cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=300
    )


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=300
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


def report(chk: Path, batch: int, topic: str) -> dict[str, object]:
    """The alignment report B's source wrote with batch ``batch``'s end offsets."""
    lines = (chk / "offsets" / str(batch)).read_text().splitlines()
    doc = json.loads(lines[2])
    return dict(doc["__chkpt__"]["topics"][topic])


def test_rewind_of_a_kafka_sink_revokes_and_downstream_reads_each_event_once(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    raw = make_topic(partitions=3, suffix="raw")
    mid = make_topic(partitions=3, suffix="mid")
    topics = (raw, mid)
    table = tmp_path / "table"
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=raw, first=0, count=FIRST)
    ok(job(tmp_path, "a", bootstrap_servers, topics, tmp_path / "chk-a", table))
    ok(job(tmp_path, "b", bootstrap_servers, topics, tmp_path / "chk-b", table))
    assert [report(tmp_path / "chk-b", n, mid)["snapshots"] for n in range(4)] == [
        [0],
        [1],
        [2],
        [3],
    ]

    # Savepoints of both at snapshot 1: A's snapshot 1, B's batch that ends at barrier 1.
    sp_a = ok(cli(tmp_path, "savepoint", "create", str(tmp_path / "chk-a"), "--dir",
                  str(tmp_path / "sp-a"), "--batch", "1")).strip()  # fmt: skip
    sp_b = ok(cli(tmp_path, "savepoint", "create", str(tmp_path / "chk-b"), "--dir",
                  str(tmp_path / "sp-b"), "--batch", "1")).strip()  # fmt: skip
    # Without the brokers a Kafka rewind is refused before anything is written.
    refused = cli(tmp_path, "savepoint", "restore", sp_a, "--checkpoint",
                  str(tmp_path / "a2"), "--mode", "rewind")  # fmt: skip
    assert refused.returncode != 0 and "--bootstrap-servers" in refused.stderr
    assert not (tmp_path / "a2").exists()

    out = ok(cli(tmp_path, "savepoint", "restore", sp_a, "--checkpoint", str(tmp_path / "a2"),
                 "--mode", "rewind", "--bootstrap-servers", bootstrap_servers))  # fmt: skip
    assert f"topic {mid}: snapshots 2, 3 after 1 revoked at generation 1" in out, out
    ok(cli(tmp_path, "savepoint", "restore", sp_b, "--checkpoint", str(tmp_path / "b2"),
           "--mode", "rewind"))  # fmt: skip
    # Run again (an interrupted restore finished): no second revocation.
    ok(cli(tmp_path, "savepoint", "restore", sp_a, "--checkpoint", str(tmp_path / "a2"),
           "--mode", "rewind", "--bootstrap-servers", bootstrap_servers))  # fmt: skip
    index = ControlTopic(
        bootstrap_servers=bootstrap_servers, control_topic=control_topic_for(mid), data_topic=mid
    )
    index.refresh()
    (revocation,) = index.revocations()
    assert (revocation.snapshot_id, revocation.revoked, revocation.generation) == (1, (2, 3), 1)
    index.close()

    # A writes snapshots 2, 3, ... again under generation 1; B reads on from its cut.
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=raw, first=FIRST, count=MORE)
    ok(job(tmp_path, "a", bootstrap_servers, topics, tmp_path / "a2", table))
    ok(job(tmp_path, "b", bootstrap_servers, topics, tmp_path / "b2", table))
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
    old = job(tmp_path, "b", bootstrap_servers, topics, tmp_path / "chk-b", tmp_path / "t-old")
    assert old.returncode != 0
    text = old.stdout + old.stderr
    assert "RevokedSnapshotError" in text, text[-4000:]
    for part in (f"topic {mid}", revocation.app_id, "revoked snapshots 2, 3", "generation 1"):
        assert part in text, part
