"""Kafka → A → Kafka → B → Delta: stage A is SIGKILLed mid-batch several times while
stage B runs; B's Delta table must hold every event exactly once, while a plain
consumer of the middle topic sees the duplicates A's replays wrote."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_chkpt.alignment.barrier import Barrier, attempt_of, control_topic_for, is_barrier
from spark_chkpt.kafka.control.topic import ControlTopic
from spark_chkpt.kafka.source.offset_reader import OffsetReader
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.testing.generator import produce_page_views
from spark_chkpt.testing.processes import kill_tree
from tests.helpers import NO_DAEMON, commit_worker, end_held, kill_jvm_alone, user_env

pytestmark = pytest.mark.fault

EVENTS = 4000
PER_BATCH = 500  # stage A: 8 batches


def stage(
    tmp_path: Path,
    name: str,
    servers: str,
    topics: tuple[str, str],
    *,
    kill_at: str | None = None,
    trigger: str = "availableNow",
    alignment: str = "aligned",
    sink_options: Sequence[str] = (),
    source_options: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    env = user_env(**(env or {}))
    if kill_at:
        env["SPARK_CHKPT_KILL_AT"] = kill_at
    command = [
        sys.executable,
        "-m",
        "spark_chkpt.jobs.two_stage",
        "--stage",
        name,
        "--bootstrap-servers",
        servers,
        "--input",
        topics[0],
        "--middle",
        topics[1],
        "--checkpoint",
        str(tmp_path / f"chk-{name}"),
        "--trigger",
        trigger,
        "--master",
        "local[2]",
    ]
    if name == "a":
        command += ["--max-offsets-per-trigger", str(PER_BATCH)]
        for option in sink_options:
            command += ["--sink-option", option]
    else:
        command += ["--table", str(tmp_path / "table"), "--alignment", alignment]
        for option in source_options:
            command += ["--source-option", option]
    log = open(tmp_path / f"stage-{name}.log", "ab")  # noqa: SIM115 - the child's output
    return subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True
    )


def in_flight(checkpoint: Path, *, after: int) -> int | None:
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    if not offsets.exists():
        return None
    for batch in sorted((int(p.name) for p in offsets.iterdir() if p.name.isdigit()), reverse=True):
        if batch > after and not (commits / str(batch)).exists():
            return batch
    return None


def read_middle(servers: str, topic: str) -> list[tuple[int, Any]]:
    """Every record of the middle topic as a plain consumer sees it: (offset, record)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    reader = OffsetReader(
        config=SourceConfig.from_options({"kafka.bootstrap.servers": servers, "subscribe": topic}),
        client_id="plain",
    )
    ends = reader.latest(reader.partitions())
    reader.close()
    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    records = []
    for tp, end in ends.items():
        ktp = KTP(tp.topic, tp.partition)
        consumer.assign([ktp])
        consumer.seek(ktp, 0)
        while consumer.position(ktp) < end:
            for batch in consumer.poll(timeout_ms=1000).values():
                records += [(r.offset, r) for r in batch]
    consumer.close()
    return records


def test_stage_a_killed_repeatedly_stage_b_exactly_once(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """B aligned (a consistent cut) while A's sink, on kafka-python, is killed at three
    points. Kill 1 is the producer's window: batch 2's records produced, flushed and
    acknowledged, no barrier yet. B unaligned (each partition up to its own newest
    barrier) and A's sink on librdkafka go through the kills of the next test, which
    also kills librdkafka's A in the producer's window (this test used to run a second
    time, B unaligned and A on librdkafka: four runs of A and one of B more)."""
    alignment, sink_client = "aligned", "kafka-python"
    source = make_topic(partitions=3, suffix="in")
    middle = make_topic(partitions=3, suffix="mid")
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=source, first=0, count=EVENTS)
    topics = (source, middle)
    client = (f"kafka.client={sink_client}",)
    b = stage(
        tmp_path,
        "b",
        bootstrap_servers,
        topics,
        trigger="processingTime=1 second",
        alignment=alignment,
    )
    try:
        # Kill 1: data of batch 2 produced, no barrier yet (the replay writes it again).
        a = stage(
            tmp_path,
            "a",
            bootstrap_servers,
            topics,
            kill_at="after-staging@2",
            sink_options=client,
        )
        assert a.wait(timeout=300) == -signal.SIGKILL
        assert index_entries(bootstrap_servers, middle)[-1] == ("complete", 1)
        # Kill 2: barriers of batch 4 written, index entry not (the replay resumes it).
        a = stage(
            tmp_path,
            "a",
            bootstrap_servers,
            topics,
            kill_at="after-barriers@4",
            sink_options=client,
        )
        assert a.wait(timeout=300) == -signal.SIGKILL
        # Kill 3: an outside kill -9 while a batch is in flight.
        a = stage(tmp_path, "a", bootstrap_servers, topics, sink_options=client)
        deadline = time.monotonic() + 300
        while (
            a.poll() is None
            and time.monotonic() < deadline
            and in_flight(tmp_path / "chk-a", after=5) is None
        ):
            time.sleep(0.02)
        if a.poll() is None:
            kill_tree(a.pid)
        a.wait(timeout=60)
        # Then stage A runs to the end.
        a = stage(tmp_path, "a", bootstrap_servers, topics, sink_options=client)
        assert a.wait(timeout=300) == 0, (tmp_path / "stage-a.log").read_text()[-3000:]

        wait_for_every_event(tmp_path, b)
    finally:
        kill_tree(b.pid)
        b.wait(timeout=60)
    assert_exactly_once(tmp_path, bootstrap_servers, middle)


def wait_for_every_event(tmp_path: Path, b: subprocess.Popen) -> None:
    """Until B's table holds every event (or 240 s), then a few more of B's triggers."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if (tmp_path / "table" / "_delta_log").exists():
            ids = (
                DeltaTable(str(tmp_path / "table"))
                .to_pyarrow_table(columns=["event_id"])
                .column("event_id")
                .to_pylist()
            )
            if len(set(ids)) == EVENTS:
                break
        assert b.poll() is None, (tmp_path / "stage-b.log").read_text()[-3000:]
        time.sleep(1)
    time.sleep(4)  # a few more of B's triggers: nothing else may arrive


def assert_exactly_once(tmp_path: Path, bootstrap_servers: str, middle: str) -> None:
    """B's table holds every event once; the middle topic holds A's replays, which a
    plain consumer can drop by the barriers' attempts; B's records name A's snapshots."""
    table = DeltaTable(str(tmp_path / "table")).to_pyarrow_table()
    ids = table.column("event_id").to_pylist()
    counts = Counter(ids)
    assert sorted(counts) == list(range(EVENTS)), "events missing in B's table"
    duplicated = [i for i, n in counts.items() if n > 1]
    assert not duplicated, f"duplicated in B: {duplicated[:10]}"
    assert all(table.column("slow_view").to_pylist()[i] is not None for i in range(10))

    # A plain consumer of the middle topic sees what A's replays wrote twice ...
    records = read_middle(bootstrap_servers, middle)
    data = [r for _, r in records if not is_barrier(r.headers)]
    plain = Counter(json.loads(r.value)["event_id"] for r in data)
    assert sorted(plain) == list(range(EVENTS))
    assert sum(n - 1 for n in plain.values()) > 0, "the kills should have left duplicates"
    # ... and can drop them itself by keeping only attempts a barrier names (README).
    confirmed = {
        a
        for _, r in records
        if is_barrier(r.headers)
        for a in Barrier.parse(
            r.value, topic=middle, partition=r.partition, offset=r.offset
        ).attempts
    }
    filtered = Counter(
        json.loads(r.value)["event_id"] for r in data if attempt_of(r.headers) in confirmed
    )
    assert sorted(filtered) == list(range(EVENTS)) and max(filtered.values()) == 1

    # B's snapshot records say which of A's snapshots each of B's batches contains.
    snapshots = sorted((tmp_path / "chk-b" / "chkpt" / "snapshots").glob("*.json"))
    upstream = [json.loads(p.read_text())["upstream_snapshots"] for p in snapshots]
    covered = (
        [s for report in upstream for topic in report for s in topic[middle]["snapshots"]]
        if upstream
        else []
    )
    assert covered == sorted(covered) and covered, upstream


def test_stage_a_killed_at_each_step_of_its_commit_stage_b_exactly_once(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """One kill of stage A (its sink on librdkafka) inside each step of the Kafka sink's
    commit: after the intent of batch 0 (the control topic's first entry), between the
    barriers of batch 2 (one partition has barrier 2, the others not), after the complete
    entry of batch 4 (the snapshot store not written), and in the producer's window of
    batch 6 (its records in the middle topic, no intent, no barrier). Every replay must
    finish the snapshot its crash left, B (unaligned: each partition up to its own newest
    barrier) must see every event once, and A's store must record every batch with its
    rows."""
    source = make_topic(partitions=3, suffix="in")
    middle = make_topic(partitions=3, suffix="mid")
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=source, first=0, count=EVENTS)
    topics = (source, middle)
    log = tmp_path / "stage-a.log"
    client = ("kafka.client=confluent",)  # A's sink on librdkafka (its default), named
    b = stage(
        tmp_path,
        "b",
        bootstrap_servers,
        topics,
        trigger="processingTime=1 second",
        alignment="unaligned",
    )
    try:
        # Each kill came at its step: what the control topic, the middle topic and the
        # snapshot store hold right after it.
        a = stage(
            tmp_path, "a", bootstrap_servers, topics, kill_at="after-intent@0", sink_options=client
        )
        assert a.wait(timeout=300) == -signal.SIGKILL, log.read_text()[-3000:]
        assert index_entries(bootstrap_servers, middle) == [("intent", 0)]
        assert barriers_in(bootstrap_servers, middle) == Counter()
        a = stage(
            tmp_path,
            "a",
            bootstrap_servers,
            topics,
            kill_at="between-barriers@2",
            sink_options=client,
        )
        assert a.wait(timeout=300) == -signal.SIGKILL, log.read_text()[-3000:]
        assert index_entries(bootstrap_servers, middle)[-1] == ("intent", 2)
        assert {k: n for k, n in barriers_in(bootstrap_servers, middle).items() if k[1] == 2} == {
            (0, 2): 1
        }
        a = stage(
            tmp_path,
            "a",
            bootstrap_servers,
            topics,
            kill_at="after-complete@4",
            sink_options=client,
        )
        assert a.wait(timeout=300) == -signal.SIGKILL, log.read_text()[-3000:]
        assert index_entries(bootstrap_servers, middle)[-2:] == [("intent", 4), ("complete", 4)]
        assert not (tmp_path / "chk-a" / "chkpt" / "snapshots" / "4.json").exists()
        # The producer's window: batch 6's records produced, no intent, no barrier yet.
        a = stage(
            tmp_path, "a", bootstrap_servers, topics, kill_at="after-staging@6", sink_options=client
        )
        assert a.wait(timeout=300) == -signal.SIGKILL, log.read_text()[-3000:]
        assert index_entries(bootstrap_servers, middle)[-1] == ("complete", 5)
        assert barriers_in(bootstrap_servers, middle)[(0, 6)] == 0
        a = stage(tmp_path, "a", bootstrap_servers, topics, sink_options=client)
        assert a.wait(timeout=300) == 0, log.read_text()[-3000:]
        wait_for_every_event(tmp_path, b)
    finally:
        kill_tree(b.pid)
        b.wait(timeout=60)
    assert_exactly_once(tmp_path, bootstrap_servers, middle)

    # A's snapshot records: the replay of batch 4 found its complete entry and stored
    # the snapshot it describes, not a 0-row duplicate.
    stored = {
        int(p.stem): json.loads(p.read_text())
        for p in (tmp_path / "chk-a" / "chkpt" / "snapshots").glob("*.json")
    }
    assert sorted(stored) == list(range(EVENTS // PER_BATCH))
    assert {n: (r["outcome"], r["rows"]) for n, r in stored.items()} == {
        n: ("committed", PER_BATCH) for n in stored
    }
    # The middle topic: barrier 2 twice in the first partition only (the replay wrote
    # them all again), once elsewhere; every other barrier once per partition.
    barriers = barriers_in(bootstrap_servers, middle)
    expected = Counter({(p, n): 1 for p in range(3) for n in range(EVENTS // PER_BATCH)})
    expected[(0, 2)] = 2
    assert barriers == expected


def index_entries(servers: str, middle: str) -> list[tuple[str, int]]:
    """(kind, snapshot) of every entry in the middle topic's control topic, in order."""
    control = ControlTopic(
        bootstrap_servers=servers, control_topic=control_topic_for(middle), data_topic=middle
    )
    try:
        control.refresh()
        return [(e.kind, e.snapshot_id) for e in control.entries]
    finally:
        control.close()


def barriers_in(servers: str, middle: str) -> Counter[tuple[int, int]]:
    """How many barrier records of each snapshot each partition of the middle topic has."""
    return Counter(
        (
            r.partition,
            Barrier.parse(r.value, topic=middle, partition=r.partition, offset=o).snapshot_id,
        )
        for o, r in read_middle(servers, middle)
        if is_barrier(r.headers)
    )


def test_stage_b_killed_and_restarted_reading_with_confluent_and_grouped_partitions(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """The downstream job dies: B (librdkafka client, three partitions per read task, so
    each task aligns its partitions record by record) is SIGKILLed after its Delta commit
    of batch 1 and again from outside while a batch is in flight, and restarted each
    time, while A writes. B's table: every event once."""
    source = make_topic(partitions=3, suffix="in")
    middle = make_topic(partitions=3, suffix="mid")
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=source, first=0, count=EVENTS)
    topics = (source, middle)
    b_options = ("kafka.client=confluent", "partitionsPerTask=3", "maxOffsetsPerTrigger=600")
    a = stage(tmp_path, "a", bootstrap_servers, topics, trigger="processingTime=1 second")
    b = stage(
        tmp_path,
        "b",
        bootstrap_servers,
        topics,
        trigger="processingTime=1 second",
        source_options=b_options,
        kill_at="after-delta-commit@1",
    )
    try:
        assert b.wait(timeout=300) == -signal.SIGKILL, (tmp_path / "stage-b.log").read_text()[
            -3000:
        ]
        b = stage(
            tmp_path,
            "b",
            bootstrap_servers,
            topics,
            trigger="processingTime=1 second",
            source_options=b_options,
        )
        deadline = time.monotonic() + 300
        while (
            b.poll() is None
            and time.monotonic() < deadline
            and in_flight(tmp_path / "chk-b", after=2) is None
        ):
            time.sleep(0.02)
        if b.poll() is None:
            kill_tree(b.pid)
        b.wait(timeout=60)
        b = stage(
            tmp_path,
            "b",
            bootstrap_servers,
            topics,
            trigger="processingTime=1 second",
            source_options=b_options,
        )
        wait_for_every_event(tmp_path, b)
    finally:
        for process in (a, b):
            if process.poll() is None:
                kill_tree(process.pid)
            process.wait(timeout=60)
    table = DeltaTable(str(tmp_path / "table")).to_pyarrow_table(columns=["event_id"])
    counts = Counter(table.column("event_id").to_pylist())
    assert sorted(counts) == list(range(EVENTS)) and max(counts.values()) == 1


def test_the_jvm_of_stage_a_killed_alone_while_its_commit_worker_is_in_the_commit(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """The OOM killer's case (issue 51) on the chkpt-kafka sink: only stage A's JVM dies
    while the Python worker running its commit of batch 1 is inside it, after the intent
    entry and before any barrier (held there by a stall; without PySpark's daemon,
    ``NO_DAEMON``, it outlives the JVM). A is restarted and runs to the end (it resumes
    batch 1's intent); then the old worker is let go. It must add nothing after the new
    driver's commits: no barrier, no entry; and the confirmed records hold every event
    once."""
    events = 2 * PER_BATCH
    source = make_topic(partitions=3, suffix="in")
    middle = make_topic(partitions=3, suffix="mid")
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=source, first=0, count=events)
    topics = (source, middle)
    stalled, release = tmp_path / "stalled", tmp_path / "release"
    a = stage(
        tmp_path,
        "a",
        bootstrap_servers,
        topics,
        env={
            **NO_DAEMON,
            "SPARK_CHKPT_STALL_AT": "after-intent@1",
            "SPARK_CHKPT_STALL_SIGNAL": str(stalled),
            "SPARK_CHKPT_STALL_RELEASE": str(release),
            "SPARK_CHKPT_STALL_SECONDS": "600",
        },
    )
    log = tmp_path / "stage-a.log"
    left: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not stalled.exists() and a.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stalled.exists(), log.read_text()[-3000:]
        left = kill_jvm_alone(a)
        assert commit_worker(left) is not None, "the commit worker did not outlive the JVM"
        a = stage(tmp_path, "a", bootstrap_servers, topics, env=NO_DAEMON)
        assert a.wait(timeout=300) == 0, log.read_text()[-3000:]
        entries = index_entries(bootstrap_servers, middle)
        assert entries[-1] == ("complete", 1), entries
    finally:
        release.write_text("go\n")  # the old worker goes on with its commit of batch 1
        end_held(left)
        if a.poll() is None:
            kill_tree(a.pid)
    assert index_entries(bootstrap_servers, middle) == entries, "a stale entry after the restart"
    assert barriers_in(bootstrap_servers, middle) == Counter(
        {(p, n): 1 for p in range(3) for n in range(2)}
    )
    records = read_middle(bootstrap_servers, middle)
    confirmed = {
        attempt
        for _, r in records
        if is_barrier(r.headers)
        for attempt in Barrier.parse(
            r.value, topic=middle, partition=r.partition, offset=r.offset
        ).attempts
    }
    kept = Counter(
        json.loads(r.value)["event_id"]
        for _, r in records
        if not is_barrier(r.headers) and attempt_of(r.headers) in confirmed
    )
    assert sorted(kept) == list(range(events)) and max(kept.values()) == 1
