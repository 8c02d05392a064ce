"""Pipeline savepoints and the rewind of a Kafka sink, with the real two-stage job
(jobs/two_stage.py) on the real broker: ``spark-chkpt savepoint create/list/show/restore
--pipeline`` run as a user's shell runs them (a folder outside the repo, no
PYSPARK_PYTHON). The stages run on the session's Spark (one JVM for every run).

Stage A (raw → mid, chkpt-kafka) runs to snapshot 5 while stage B (mid → Delta, one A
snapshot per batch) has read to A's snapshot 3 only: the pipeline savepoint takes A at
3 and B at its batch that ends at barrier 3, the newest cut both hold. A create killed
midway leaves nothing listed; a restore that one job cannot take changes nothing and
names the job. The rewind revokes A's snapshots 4 and 5 in ``__chkpt.<mid>`` (once,
however often it runs); A writes 4, 5, ... again under generation 1, and B, restored at
the cut, reads every event once, skipping (and counting) the revoked records. B's old
checkpoint, which had not read them, reads on; a copy of it that had read them fails
naming the revocation."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.kafka.control.topic import ControlTopic
from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import chkpt_cli, ok, run_stage

pytestmark = pytest.mark.integration

PER_BATCH = 250


def job(
    spark: Any, stage: str, servers: str, topics: tuple[str, str], chk: Path, table: Path
) -> None:
    """Stage ``stage`` of jobs/two_stage.py to the end of its input: A 250 records per
    batch; B one A snapshot (250 records and 3 barriers) per batch."""
    run_stage(
        spark,
        stage,
        servers=servers,
        source=topics[0],
        target=topics[1],
        checkpoint=chk,
        table=table,
        max_offsets_per_trigger=PER_BATCH if stage == "a" else None,
        source_options=[f"maxOffsetsPerTrigger={PER_BATCH}"] if stage == "b" else (),
    )


def report(chk: Path, batch: int, topic: str) -> dict[str, Any]:
    """The alignment report B's source wrote with batch ``batch``'s end offsets."""
    doc = json.loads((chk / "offsets" / str(batch)).read_text().splitlines()[2])
    return dict(doc["__chkpt__"]["topics"][topic])


def end_offsets(servers: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPartition

    consumer = KafkaConsumer(bootstrap_servers=servers.split(","), group_id=None)
    try:
        tps = [KafkaPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        return {tp.partition: int(o) for tp, o in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path) and its content's digest."""
    return {
        str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(folder.rglob("*"))
        if f.is_file()
    }


def event_ids(table: Path) -> Counter[int]:
    ids = DeltaTable(str(table)).to_pyarrow_table(columns=["event_id"]).column("event_id")
    return Counter(ids.to_pylist())


def test_pipeline_savepoint_rewinds_a_kafka_sink_and_its_reader_exactly_once(
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
    assert [report(chk_b, n, mid)["snapshots"] for n in range(4)] == [[0], [1], [2], [3]]
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=raw, first=1000, count=500)
    job(spark, "a", bootstrap_servers, topics, chk_a, table)  # snapshots 4, 5; B not yet
    # A reader that reads A's snapshot 4 before the rewind (a copy of B run on).
    passed = tmp_path / "chk-b-passed"
    shutil.copytree(chk_b, passed)
    job(spark, "b", bootstrap_servers, topics, passed, tmp_path / "table-passed")
    assert report(passed, 4, mid)["snapshots"] == [4]

    work = tmp_path / "user"
    work.mkdir()
    sp = tmp_path / "sp"
    create = ["savepoint", "create", "--pipeline", "two", "--job", str(chk_a), "--job",
              str(chk_b), "--dir", str(sp), "--bootstrap-servers", bootstrap_servers]  # fmt: skip
    # Killed midway (a job's savepoint half copied): nothing listed.
    killed = chkpt_cli(work, *create, SPARK_CHKPT_KILL_AT="in-savepoint")
    assert killed.returncode == -9, killed.stderr[-3000:]
    listed = chkpt_cli(work, "savepoint", "list", str(sp))
    assert listed.returncode == 1 and "no complete savepoint" in listed.stdout, listed.stdout
    assert "pipeline pipeline-" not in listed.stdout

    # The same pipeline from a pipeline file, as a user keeps it beside the jobs: first
    # one that says B writes a topic (B writes Delta) is refused naming the job, before
    # anything is written; then the right one.
    pipeline_file = work / "pipeline.toml"

    def write_pipeline_file(b_writes: str) -> None:
        pipeline_file.write_text(
            f'name = "two"\nbootstrap_servers = "{bootstrap_servers}"\n'
            f'savepoint_dir = "{sp}"\n\n'
            f'[[jobs]]\ncheckpoint = "{chk_a}"\nreads = ["{raw}"]\nwrites = ["{mid}"]\n\n'
            f'[[jobs]]\ncheckpoint = "{chk_b}"\nreads = ["{mid}"]\nwrites = [{b_writes}]\n'
        )

    write_pipeline_file(f'"{mid}"')
    wrong = chkpt_cli(work, "savepoint", "create", "--pipeline-file", "pipeline.toml")
    assert wrong.returncode != 0, wrong.stdout
    assert "job stage_b" in wrong.stderr and f"the file says [{mid}]" in wrong.stderr, wrong.stderr
    assert "Nothing was written" in wrong.stderr
    assert chkpt_cli(work, "savepoint", "list", str(sp)).returncode == 1
    write_pipeline_file("")
    location = ok(chkpt_cli(work, "savepoint", "create", "--pipeline-file", "pipeline.toml"))
    location = location.strip()
    listed = chkpt_cli(work, "savepoint", "list", str(sp))
    assert listed.returncode == 0 and "stage_a at 3, stage_b at 3" in listed.stdout, listed
    shown = ok(chkpt_cli(work, "savepoint", "show", "--pipeline", location))
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
    assert json.loads((chk_b / "offsets" / "3").read_text().splitlines()[2])[mid] == join["offsets"]

    # A restore one job cannot take (A writes Kafka: the brokers are needed) changes
    # nothing, B's table included, and names the job.
    version = DeltaTable(str(table)).version()
    restored = tmp_path / "restored"
    restore = ["savepoint", "restore", "--pipeline", location, "--mode", "rewind",
               "--checkpoint-dir", str(restored)]  # fmt: skip
    refused = chkpt_cli(work, *restore)
    assert refused.returncode != 0
    assert "job stage_a" in refused.stderr and "nothing was changed" in refused.stderr
    assert "--bootstrap-servers" in refused.stderr, refused.stderr[-3000:]
    assert not restored.exists() and DeltaTable(str(table)).version() == version

    out = ok(chkpt_cli(work, *restore, "--bootstrap-servers", bootstrap_servers))
    assert f"topic {mid}: snapshots 4, 5 after 3 revoked at generation 1" in out, out
    # Run again (an interrupted restore finished): no second revocation.
    ok(chkpt_cli(work, *restore, "--bootstrap-servers", bootstrap_servers))
    index = ControlTopic(
        bootstrap_servers=bootstrap_servers, control_topic=control_topic_for(mid), data_topic=mid
    )
    index.refresh()
    (revocation,) = index.revocations()
    index.close()
    assert (revocation.snapshot_id, revocation.revoked, revocation.generation) == (3, (4, 5), 1)

    # A writes snapshots 4, 5, ... again under generation 1; B reads on from its cut.
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=raw, first=1500, count=250)
    job(spark, "a", bootstrap_servers, topics, restored / "stage_a", table)
    job(spark, "b", bootstrap_servers, topics, restored / "stage_b", table)
    counts = event_ids(table)
    assert sorted(counts) == list(range(1750)), "events missing"
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]
    # B's first batch after the cut skipped the revoked snapshots' records and barriers,
    # and says so in its report.
    first = report(restored / "stage_b", 4, mid)
    assert first["snapshots"] == [4] and first["revoked"] == 2 * (PER_BATCH + 3), first

    # The copy of B that read A's revoked snapshot 4 fails, naming the revocation.
    with pytest.raises(Exception, match="RevokedSnapshotError") as failed:
        job(spark, "b", bootstrap_servers, topics, passed, tmp_path / "table-passed")
    for part in (f"topic {mid}", revocation.app_id, "revoked snapshots 4, 5", "generation 1"):
        assert part in str(failed.value), part


def test_pipeline_savepoint_across_a_fan_in_topic_rewinds_both_writers_exactly_once(
    tmp_path: Path, spark: Any, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """Fan-in into one topic: A1 (raw1) and A2 (raw2) both write mid, B reads it aligned
    with upstreamApps into Delta. A pipeline savepoint cuts each writer at its own
    snapshot and B at the batch whose pending offsets join both. After everything ran on
    past it, the pipeline is forked into a new topic and a new table: the forked B
    starts both apps at the new topic's first offsets, and the three forked jobs deliver
    every id after the savepoint once, leaving mid, its control topic, B's table and the
    three checkpoints as they were. Then the rewind revokes both writers' later
    snapshots and rolls B's table back, and running the three again delivers every id of
    both inputs exactly once."""
    raw1 = make_topic(partitions=2, suffix="raw1")
    raw2 = make_topic(partitions=2, suffix="raw2")
    mid = make_topic(partitions=3, suffix="mid")
    table = tmp_path / "table"
    apps = {"a1": "fan-pipe-a1", "a2": "fan-pipe-a2"}

    def run(stage: str, chk: Path, *, topic: str = mid, into: Path = table) -> None:
        writer = stage if stage in apps else None
        run_stage(
            spark,
            "a" if writer else "b",
            servers=bootstrap_servers,
            source=raw1 if stage == "a1" else raw2,
            target=topic,
            checkpoint=chk,
            table=into,
            max_offsets_per_trigger=PER_BATCH if writer else None,
            source_options=() if writer else [f"upstreamApps={apps['a1']},{apps['a2']}"],
            sink_options=[f"txnAppId={apps[writer]}"] if writer else (),
        )

    def produce(first: int, count: int) -> None:
        produce_page_views(
            bootstrap_servers=bootstrap_servers, topic=raw1, first=first, count=count
        )
        produce_page_views(
            bootstrap_servers=bootstrap_servers, topic=raw2, first=10_000 + first, count=count
        )

    chk = {name: tmp_path / f"chk-{name}" for name in ("a1", "a2", "b")}
    produce(0, 500)
    for name in ("a1", "a2", "b"):
        run(name, chk[name])
    produce(500, 500)
    run("a1", chk["a1"])  # A1 on; A2 and B not yet: the cut joins unequal positions
    work = tmp_path / "user"
    work.mkdir()
    location = ok(
        chkpt_cli(
            work,
            "savepoint",
            "create",
            "--pipeline",
            "fan",
            "--job",
            str(chk["a1"]),
            "--job",
            str(chk["a2"]),
            "--job",
            str(chk["b"]),
            "--dir",
            str(tmp_path / "sp"),
            "--bootstrap-servers",
            bootstrap_servers,
        )
    ).strip()
    manifest = json.loads((Path(location.removeprefix("file://")) / "pipeline.json").read_text())
    joins = {(j["upstream"], j["downstream"]) for j in manifest["joins"]}
    # Two jobs share the query name stage_a: every job is named by its folder.
    assert joins == {("chk-a1", "chk-b"), ("chk-a2", "chk-b")}, manifest["joins"]
    at_savepoint = event_ids(table)

    # Everything runs on past the savepoint: B reads A1's and A2's later snapshots.
    run("a2", chk["a2"])
    run("b", chk["b"])
    assert sum(event_ids(table).values()) > sum(at_savepoint.values())

    # The fork, before the rewind: it reads only the savepoint's copies and writes a new
    # topic and table, so it must leave production exactly as it is here, with the
    # snapshots past the cut that the rewind will revoke; the rewind then shows that
    # production still runs exactly once after it (after the rewind, mid's revocations
    # would be part of what "untouched" compares). No second pipeline run: the fork's
    # own three jobs only.
    fork_mid, fork_table, forked = f"{mid}-fork", tmp_path / "table-fork", tmp_path / "forked"
    original = {t: end_offsets(bootstrap_servers, t) for t in (mid, control_topic_for(mid))}
    version = DeltaTable(str(table)).version()
    files = {name: digests(folder) for name, folder in chk.items()}
    fork = ["savepoint", "restore", "--pipeline", location, "--mode", "fork",
            "--checkpoint-dir", str(forked), "--bootstrap-servers", bootstrap_servers]  # fmt: skip
    refused = chkpt_cli(work, *fork, "--table-path", str(fork_table))
    assert refused.returncode != 0
    assert f"rename {mid} (written by jobs chk-a1, chk-a2)" in refused.stderr, refused.stderr
    out = ok(chkpt_cli(work, *fork, "--rename-topic", f"{mid}={fork_mid}", "--table-path",
                       str(fork_table)))  # fmt: skip
    assert f"topic {mid} forked into {fork_mid} (3 partitions)" in out, out
    # The forked B starts each app at the new topic's first offsets, not at its pending
    # offsets in mid (positions in the old topic).
    cut_b = next(j for j in manifest["jobs"] if j["name"] == "chk-b")["batch_id"]
    source = json.loads((forked / "chk-b" / "offsets" / str(cut_b)).read_text().splitlines()[2])
    assert set(source) == {fork_mid, "__chkpt__"} and source[fork_mid] == {"0": 0, "1": 0, "2": 0}
    fanned = source["__chkpt__"]["topics"][fork_mid]["apps"]
    assert set(fanned) == set(apps.values()), fanned
    assert all(r["pending"] == source[fork_mid] for r in fanned.values()), fanned
    for name in ("a1", "a2", "b"):
        run(name, forked / f"chk-{name}", topic=fork_mid, into=fork_table)
    counts = event_ids(fork_table)
    after = (set(range(1000)) | set(range(10_000, 11_000))) - set(at_savepoint)
    assert set(counts) == after, (len(counts), len(after), sorted(after - set(counts))[:10])
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]
    # The original pipeline is untouched: its topic, control topic, table, checkpoints.
    assert {t: end_offsets(bootstrap_servers, t) for t in original} == original
    assert DeltaTable(str(table)).version() == version
    assert {name: digests(folder) for name, folder in chk.items()} == files

    restored = tmp_path / "restored"
    out = ok(
        chkpt_cli(
            work,
            "savepoint",
            "restore",
            "--pipeline",
            location,
            "--mode",
            "rewind",
            "--checkpoint-dir",
            str(restored),
            "--bootstrap-servers",
            bootstrap_servers,
        )
    )
    assert f"topic {mid}" in out and "revoked" in out, out
    assert event_ids(table) == at_savepoint  # B's table back at the savepoint

    produce(1000, 250)
    for name in ("a1", "a2", "b"):
        run(name, restored / f"chk-{name}")
    counts = event_ids(table)
    expected = set(range(1250)) | set(range(10_000, 11_250))
    assert set(counts) == expected, sorted(expected - set(counts))[:10]
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]
