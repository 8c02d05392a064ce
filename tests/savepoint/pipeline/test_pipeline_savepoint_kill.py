"""The proof of issue 27: a three-job pipeline raw → A → t1 → M → t2 → B → Delta
(jobs/two_stage.py stages a, m, b, each a real job in its own process) savepointed while
all three run under load, then rewound and forked with ``spark-chkpt savepoint ...
--pipeline`` run as a user's shell runs it.

One module-scoped run (the three jobs started once, the savepoint taken once) serves
both cases:

* rewind: B is killed with -9 after it went past the savepoint; the restore is itself
  killed with -9 after its first job (A's revocation written) and run again; A, still
  running during the restore, is stopped by fencing at its next commit; the table equals
  its version at the savepoint; the restored jobs run to the end: every id once;
* fork: into new topics (created with the same partitions, the downstream jobs starting at
  their first offsets) and a new table, refused first when a Kafka sink topic is not
  renamed or the table is production's; run to the end, the new table holds every id
  after the savepoint once, and the original topics, control topics, table and
  checkpoints are untouched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.kafka.client.topics import create_topic, partition_count, topic_names
from spark_chkpt.testing.generator import produce_page_views
from spark_chkpt.testing.processes import kill_tree
from tests.helpers import chkpt_cli, ok, run_stage, user_env

pytestmark = pytest.mark.fault

PER_TRIGGER = 250
FIRST = 1500  # before the jobs start
LOAD = 1500  # while the savepoint is taken
AFTER = 500  # after the restore


def _env(**extra: str) -> dict[str, str]:
    jars = os.environ.get("SPARK_CHKPT_JARS_DIR")
    return user_env(**({"SPARK_CHKPT_JARS_DIR": jars} if jars else {}), **extra)


def commits(checkpoint: Path) -> list[int]:
    folder = checkpoint / "commits"
    return (
        sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []
    )


def event_ids(table: Path, version: int | None = None) -> Counter[int]:
    ids = DeltaTable(str(table), version=version).to_pyarrow_table(columns=["event_id"])
    return Counter(ids.column("event_id").to_pylist())


def ends(servers: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=servers.split(","), group_id=None)
    try:
        tps = [KTP(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        return {tp.partition: int(o) for tp, o in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def wait_for(what: str, check: Any, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@dataclass
class Pipeline:
    root: Path
    servers: str
    raw: str
    t1: str
    t2: str
    location: str  # the pipeline savepoint
    manifest: dict[str, Any]
    produced: int
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def chk(self, stage: str) -> Path:
        return self.root / f"chk-{stage}"

    @property
    def table(self) -> Path:
        return self.root / "table"

    def job(self, name: str) -> dict[str, Any]:
        return next(j for j in self.manifest["jobs"] if j["name"] == name)

    def produce(self, count: int) -> None:
        produce_page_views(
            bootstrap_servers=self.servers, topic=self.raw, first=self.produced, count=count
        )
        self.produced += count

    def run_to_end(self, spark: Any, *, checkpoints: Path, t1: str, t2: str, table: Path) -> None:
        """A, M and B in turn on the session's Spark to the end of their input, from the
        restored checkpoints ``checkpoints/stage_<x>``, through topics ``t1`` and ``t2``."""
        for stage, source, target in (("a", self.raw, t1), ("m", t1, t2), ("b", self.raw, t2)):
            run_stage(
                spark,
                stage,
                servers=self.servers,
                source=source,
                target=target,
                checkpoint=checkpoints / f"stage_{stage}",
                table=table,
            )

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait(timeout=30)


def start(root: Path, servers: str, stage: str, source: str, target: str) -> subprocess.Popen:
    """Stage ``stage`` in its own process: a reads ``source`` into ``target``, m too, b
    reads ``target`` (its --middle) into the table."""
    command = [sys.executable, "-m", "spark_chkpt.jobs.two_stage", "--stage", stage,
               "--bootstrap-servers", servers, "--input", source, "--middle", target,
               "--checkpoint", str(root / f"chk-{stage}"), "--trigger",
               "processingTime=1 second", "--master", "local[1]",
               # As in production: a task failure (a Python worker slow to start on a
               # loaded machine) restarts the query; a fenced one is not restarted.
               "--restart", "restart-strategy.type=fixed-delay",
               "--restart", "restart-strategy.fixed-delay.attempts=20"]  # fmt: skip
    if stage == "a":
        command += ["--max-offsets-per-trigger", str(PER_TRIGGER)]
    if stage == "b":
        command += ["--table", str(root / "table")]
    log = open(root / f"stage-{stage}.log", "ab")  # noqa: SIM115 - the child's output
    return subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=root, start_new_session=True
    )


@pytest.fixture(scope="module")
def pipeline(
    tmp_path_factory: pytest.TempPathFactory, bootstrap_servers: str
) -> Iterator[Pipeline]:
    root = tmp_path_factory.mktemp("pipeline")
    base = f"pipe-{uuid.uuid4().hex[:6]}"
    raw, t1, t2 = f"{base}-raw", f"{base}-t1", f"{base}-t2"
    for topic in (raw, t1, t2):
        create_topic(bootstrap_servers=bootstrap_servers, name=topic, partitions=3)
    p = Pipeline(root=root, servers=bootstrap_servers, raw=raw, t1=t1, t2=t2, location="",
                 manifest={}, produced=0)  # fmt: skip
    p.produce(FIRST)
    try:
        p.procs = {
            "a": start(root, bootstrap_servers, "a", raw, t1),
            "m": start(root, bootstrap_servers, "m", t1, t2),
            "b": start(root, bootstrap_servers, "b", raw, t2),
        }
        # B's first events in the table (its first batches may be empty ones).
        wait_for(
            "B's first events",
            lambda: (p.table / "_delta_log").exists() and bool(event_ids(p.table)),
        )
        # The savepoint while all three run and events keep coming.
        load = threading.Thread(
            target=lambda: [(p.produce(100), time.sleep(0.2)) for _ in range(LOAD // 100)]
        )
        load.start()
        work = root / "user"
        work.mkdir()
        p.location = ok(
            chkpt_cli(
                work,
                "savepoint",
                "create",
                "--pipeline",
                "three",
                "--job",
                str(p.chk("a")),
                "--job",
                str(p.chk("m")),
                "--job",
                str(p.chk("b")),
                "--dir",
                str(root / "sp"),
                "--bootstrap-servers",
                bootstrap_servers,
                "--timeout",
                "300",
            )
        ).strip()
        load.join()
        p.manifest = json.loads(
            (Path(p.location.removeprefix("file://")) / "pipeline.json").read_text()
        )
        for proc in p.procs.values():
            assert proc.poll() is None, "a job stopped before the savepoint was taken"
        yield p
    finally:
        p.stop()


def test_rewind_after_kill_interrupted_restore_fenced_job_exactly_once(
    pipeline: Pipeline, spark: Any
) -> None:
    p = pipeline
    a, b = p.job("stage_a"), p.job("stage_b")
    # The jobs go on past the savepoint; then B (the Delta job) is killed with -9.
    p.produce(AFTER)
    wait_for(
        "A and B past the savepoint",
        lambda: commits(p.chk("a"))[-1] > a["batch_id"] and commits(p.chk("b"))[-1] > b["batch_id"],
    )
    kill_tree(p.procs["b"].pid)
    assert p.procs["b"].wait(timeout=30) == -signal.SIGKILL
    now = DeltaTable(str(p.table)).version()
    sp_table = json.loads(
        (Path(p.location.removeprefix("file://")) / b["savepoint"] / "manifest.json").read_text()
    )["sink"]["table_version"]
    at_savepoint = event_ids(p.table, sp_table)
    assert now > sp_table and event_ids(p.table) != at_savepoint  # it went on

    work = p.root / "user"
    restored = p.root / "restored"
    restore = ["savepoint", "restore", "--pipeline", p.location, "--mode", "rewind",
               "--checkpoint-dir", str(restored), "--bootstrap-servers", p.servers]  # fmt: skip
    # Killed after its first job (A, upstream first): A's checkpoint and revocation are
    # written, M's and B's not.
    killed = chkpt_cli(work, *restore, SPARK_CHKPT_KILL_AT="in-pipeline-restore")
    assert killed.returncode == -9, (killed.stdout + killed.stderr)[-3000:]
    assert (restored / "stage_a" / "metadata").exists()
    assert not (restored / "stage_m" / "metadata").exists()

    # A's old process, still running, is fenced at its next commit (the revocation's
    # generation is above its checkpoint's) and stops.
    p.produce(AFTER)
    assert p.procs["a"].wait(timeout=600) != 0
    log = (p.root / "stage-a.log").read_text(errors="replace")
    assert "Fenced" in log, log[-3000:]

    out = ok(chkpt_cli(work, *restore))  # run again: finishes M and B
    assert f"topic {p.t1}: snapshots" in out and f"topic {p.t2}: snapshots" in out, out
    assert f"table {p.table}" in out, out
    # M's old process read A's revoked snapshots: it fails, or is fenced; stop it if idle.
    p.stop()
    assert event_ids(p.table) == at_savepoint  # the table is back at the savepoint

    p.run_to_end(spark, checkpoints=restored, t1=p.t1, t2=p.t2, table=p.table)
    counts = event_ids(p.table)
    assert sorted(counts) == list(range(p.produced)), "events missing"
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]


def test_fork_into_new_topics_and_table_leaves_the_original_untouched(
    pipeline: Pipeline, spark: Any
) -> None:
    p = pipeline
    p.stop()
    work = p.root / "user"
    b = p.job("stage_b")
    sp_table = json.loads(
        (Path(p.location.removeprefix("file://")) / b["savepoint"] / "manifest.json").read_text()
    )["sink"]["table_version"]
    before_fork = event_ids(p.table, sp_table)
    t1f, t2f = f"{p.t1}-fork", f"{p.t2}-fork"
    forked, table = p.root / "forked", p.root / "table-fork"
    original = {
        t: ends(p.servers, t)
        for t in (p.t1, p.t2, control_topic_for(p.t1), control_topic_for(p.t2))
    }
    version = DeltaTable(str(p.table)).version()
    files = {s: sorted(str(f.relative_to(p.chk(s))) for f in p.chk(s).rglob("*")) for s in "amb"}
    fork = ["savepoint", "restore", "--pipeline", p.location, "--mode", "fork",
            "--checkpoint-dir", str(forked), "--bootstrap-servers", p.servers]  # fmt: skip

    # Refused before anything is written: t2 not renamed; production's table.
    refused = chkpt_cli(work, *fork, "--rename-topic", f"{p.t1}={t1f}", "--table-path", str(table))
    assert refused.returncode != 0 and f"rename {p.t2} (written by job stage_m)" in refused.stderr
    refused = chkpt_cli(work, *fork, "--rename-topic", f"{p.t1}={t1f}", "--rename-topic",
                  f"{p.t2}={t2f}", "--table-path", str(p.table))  # fmt: skip
    assert refused.returncode != 0 and "job stage_b's table" in refused.stderr, refused.stderr
    assert not forked.exists() and not {t1f, t2f} & topic_names(bootstrap_servers=p.servers)

    out = ok(chkpt_cli(work, *fork, "--rename-topic", f"{p.t1}={t1f}", "--rename-topic",
                 f"{p.t2}={t2f}", "--table-path", str(table)))  # fmt: skip
    assert (
        f"topic {p.t1} forked into {t1f} (3 partitions): its readers start at 0:0, 1:0, 2:0" in out
    )
    assert partition_count(bootstrap_servers=p.servers, name=t2f) == 3
    # The forked M starts on the new topic at its first offsets, not at the cut's.
    m = p.job("stage_m")
    offsets = (forked / "stage_m" / "offsets" / str(m["batch_id"])).read_text().splitlines()
    source = json.loads(offsets[2])
    assert source[t1f] == {"0": 0, "1": 0, "2": 0} and set(source) == {t1f, "__chkpt__"}

    p.run_to_end(spark, checkpoints=forked, t1=t1f, t2=t2f, table=table)
    counts = event_ids(table)
    after = set(range(p.produced)) - set(before_fork)
    assert set(counts) == after, (len(counts), len(after))
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]
    # The original pipeline is untouched.
    assert {t: ends(p.servers, t) for t in original} == original
    assert DeltaTable(str(p.table)).version() == version
    assert {
        s: sorted(str(f.relative_to(p.chk(s))) for f in p.chk(s).rglob("*")) for s in "amb"
    } == files
