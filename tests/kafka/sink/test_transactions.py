"""``delivery=exactly-once-transactions``: Kafka → Spark → Kafka read by a PLAIN kafka-python
consumer with ``isolation_level="read_committed"`` (no barriers, no chkpt-kafka reader).

The upstream sink is SIGKILLed at every fail point of its commit protocol and a task is
retried; the consumer must see every event exactly once and no record of an aborted
attempt. Then the schedule the transaction timeout rule exists for: the driver dies after
the intent and stays down longer than ``transaction.timeout.ms``; and the broker killed
and started again after a batch's intent and while its write tasks produce."""

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

from spark_chkpt.alignment.barrier import attempt_of, control_topic_for
from spark_chkpt.kafka.control.topic import ControlTopic
from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.fault

EVENTS = 900
PER_BATCH = 150  # 6 batches
TXN = ("delivery=exactly-once-transactions",)


def stage_a_command(
    servers: str,
    topics: tuple[str, str],
    tmp_path: Path,
    *,
    master: str,
    sink_options: Sequence[str] = TXN,
) -> list[str]:
    """The command line of stage A of the two-stage job, its sink in transactions mode,
    ``PER_BATCH`` events a batch, ``availableNow``, a read task per task slot
    (``recordsPerTask=1``): each batch is written by several tasks, so its commit holds
    several transactions and the ``between-transactions`` point is between two of them
    (by default a batch this small is one task, one transaction)."""
    command = [
        sys.executable,
        "-m",
        "spark_chkpt.jobs.two_stage",
        "--stage",
        "a",
        "--bootstrap-servers",
        servers,
        "--input",
        topics[0],
        "--middle",
        topics[1],
        "--checkpoint",
        str(tmp_path / "chk-a"),
        "--trigger",
        "availableNow",
        "--master",
        master,
        "--max-offsets-per-trigger",
        str(PER_BATCH),
        "--source-option",
        "recordsPerTask=1",
    ]
    for option in sink_options:
        command += ["--sink-option", option]
    return command


def run_a(
    tmp_path: Path,
    servers: str,
    topics: tuple[str, str],
    *,
    kill_at: str | None = None,
    fail_at: str | None = None,
    master: str = "local[2]",
    sink_options: Sequence[str] = TXN,
) -> subprocess.CompletedProcess[str]:
    """Stage A of the two-stage job (its sink in transactions mode), once, to its end or
    its kill."""
    env = user_env()
    if kill_at:
        env["SPARK_CHKPT_KILL_AT"] = kill_at
    if fail_at:
        env["SPARK_CHKPT_FAIL_AT"] = fail_at
    command = stage_a_command(servers, topics, tmp_path, master=master, sink_options=sink_options)
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    with open(tmp_path / "stage-a.log", "a") as log:
        log.write(done.stdout + done.stderr)
    return done


def read_all(servers: str, topic: str, *, isolation: str, timeout_s: float = 60) -> list[Any]:
    """Every record of ``topic`` a plain consumer with ``isolation`` reads, up to the
    high watermark; fails if a read_committed consumer cannot get there (an open
    transaction holds the last stable offset)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=servers, enable_auto_commit=False, isolation_level=isolation
    )
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)  # high watermarks
        records: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            assert time.monotonic() < deadline, (
                f"{isolation} consumer stuck at {[consumer.position(tp) for tp in parts]} "
                f"before the high watermarks {[ends[tp] for tp in parts]}: an open transaction"
            )
            for batch in consumer.poll(timeout_ms=500).values():
                records += batch
        return records
    finally:
        consumer.close()


def entries(servers: str, topic: str) -> list[Any]:
    control = ControlTopic(
        bootstrap_servers=servers, control_topic=control_topic_for(topic), data_topic=topic
    )
    try:
        control.refresh()
        return list(control.entries)
    finally:
        control.close()


# The six fail points of the transactional commit, shared between the two sink clients:
# each client is killed at three, one of each kind of recovery (transactions recorded in an
# intent that the restart commits with EndTxn; open transactions no intent names, which the
# restart's producers fence and the broker aborts), so every point is killed once. The
# clients differ only in the write tasks' producers (how a task hands its open transaction
# to the driver, how a retry fences the attempt before), which
# tests/kafka/sink/test_kafka_transactions_broker.py proves for each client on the broker;
# the driver's side (intent, EndTxn, resume) is the same code on both. On each client a
# task is retried in a run killed after its batch's intent (the intent records the
# retry's transaction).
KILLS_OF_CLIENT: dict[str, list[tuple[str, str | None]]] = {
    "confluent": [
        ("after-intent@1", "in-write@1"),  # recorded (a retry's transaction), none committed
        ("after-transactions@3", None),  # all committed, no complete entry
        ("in-write@5", None),  # the driver dies while task 0 has records in its open transaction
    ],
    "kafka-python": [
        ("after-staging@0", None),  # transactions open, nothing recorded
        ("between-transactions@2", "in-write@2"),  # recorded (a retry's), the first committed
        ("after-complete@4", None),  # complete entry, no snapshot record
    ],
}  # after-snapshot takes the after-complete path (the batch is in the control topic)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_killed_at_every_step_read_committed_consumer_exactly_once(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str], client: str
) -> None:
    """Stage A killed with SIGKILL at every fail point of the transactional commit, one
    batch each, half of the points on each sink client (``KILLS_OF_CLIENT``), and a task
    retried on each (``local[2,2]``: in the run killed after the intent of a batch, the
    first attempt of task 0 fails after its first records are in the broker, so the intent
    records the retry's transaction); a plain read_committed consumer of the output sees
    each event once, and none of the records of aborted attempts.

    Four runs of the job a client, three kills and a last run to the end (the chain used
    to kill both clients at all six points: seven runs each, eight CI minutes)."""
    source = make_topic(partitions=3, suffix="in")
    out = make_topic(partitions=3, suffix="out")
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=source, first=0, count=EVENTS)
    topics = (source, out)
    log = tmp_path / "stage-a.log"
    kills = KILLS_OF_CLIENT[client]
    options = (*TXN, f"kafka.client={client}")
    for point, fail_at in kills:
        master = "local[2,2]" if fail_at else "local[2]"
        done = run_a(
            tmp_path,
            bootstrap_servers,
            topics,
            kill_at=point,
            fail_at=fail_at,
            master=master,
            sink_options=options,
        )
        assert done.returncode == -signal.SIGKILL, (point, log.read_text()[-3000:])
    for _, fail_at in kills:
        if fail_at:
            failed = "failing {} of batch {}".format(*fail_at.split("@"))
            assert f"fault injection: {failed}" in log.read_text(), fail_at
    done = run_a(tmp_path, bootstrap_servers, topics, sink_options=options)  # the rest
    assert done.returncode == 0, log.read_text()[-4000:]

    committed = read_all(bootstrap_servers, out, isolation="read_committed")
    ids = Counter(json.loads(r.value)["event_id"] for r in committed)
    assert sorted(ids) == list(range(EVENTS)), "events missing"
    assert max(ids.values()) == 1, [i for i, n in ids.items() if n > 1][:10]
    # What the aborted attempts wrote is in the log, and read_committed skipped it.
    raw = read_all(bootstrap_servers, out, isolation="read_uncommitted")
    confirmed = {
        a for e in entries(bootstrap_servers, out) if e.kind == "complete" for a in e.attempts
    }
    aborted = [r for r in raw if attempt_of(r.headers) not in confirmed]
    assert aborted, "the kills should have left records of aborted attempts"
    assert {attempt_of(r.headers) for r in committed} <= confirmed
    # Every batch has one complete entry, whose transactions its intent fixed.
    complete = [e.snapshot_id for e in entries(bootstrap_servers, out) if e.kind == "complete"]
    assert sorted(complete) == list(range(EVENTS // PER_BATCH))
    intents = [e for e in entries(bootstrap_servers, out) if e.kind == "intent"]
    assert all(e.transactions for e in intents)


def wait_aborted(servers: str, transactional_ids: Sequence[str]) -> None:
    """Until the broker has aborted these transactions (its timeout plus its check)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        deadline = time.monotonic() + 60
        while True:
            described = admin.describe_transactions(list(transactional_ids)).values()
            states = {d.state.value for d in described}
            if states == {"CompleteAbort"}:
                return
            assert time.monotonic() < deadline, states
            time.sleep(1)
    finally:
        admin.close()


def test_driver_down_longer_than_transaction_timeout(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """The schedules the timeout rule is for: a batch's intent written, the driver killed
    before EndTxn, and down longer than ``kafka.transaction.timeout.ms`` (10 s; the rule
    accepts it with maxBatchDuration + maxRestartTime = 9 s), so the broker aborts the
    recorded transactions.

    1. Killed after the intent of batch 1, before any EndTxn: nothing of batch 1 was
       visible, so the restart marks the intent void and runs batch 1 again: exactly once.
    2. Killed between the EndTxn calls of batch 3 (the first transaction committed): the
       restart cannot commit the rest and fails with TransactionLostError naming them;
       batch 3 is partly visible and never twice. That is the schedule this mode cannot
       make exactly once (docs/known-limits.md). Options that allow a longer restart than
       the timeout are refused at start (tests/kafka/sink/test_kafka_transactions.py)."""
    source = make_topic(partitions=3, suffix="in")
    out = make_topic(partitions=3, suffix="out")
    events = 4 * PER_BATCH
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=source, first=0, count=events)
    topics = (source, out)
    options = (
        *TXN,
        "kafka.transaction.timeout.ms=10000",
        "maxBatchDuration=4s",
        "maxRestartTime=5s",
    )
    log = tmp_path / "stage-a.log"
    done = run_a(
        tmp_path, bootstrap_servers, topics, kill_at="after-intent@1", sink_options=options
    )
    assert done.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    intent = [e for e in entries(bootstrap_servers, out) if e.kind == "intent"][-1]
    assert intent.snapshot_id == 1 and intent.transactions
    wait_aborted(bootstrap_servers, [t[0] for t in intent.transactions])

    done = run_a(
        tmp_path, bootstrap_servers, topics, kill_at="between-transactions@3", sink_options=options
    )
    assert done.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    assert "the broker aborted all" in log.read_text()
    void = [e for e in entries(bootstrap_servers, out) if e.kind == "intent" and e.void]
    assert [e.snapshot_id for e in void] == [1]
    ids = Counter(
        json.loads(r.value)["event_id"]
        for r in read_all(bootstrap_servers, out, isolation="read_committed")
    )
    assert set(range(3 * PER_BATCH)) <= set(ids) and max(ids.values()) == 1

    intent = [e for e in entries(bootstrap_servers, out) if e.kind == "intent"][-1]
    assert intent.snapshot_id == 3 and len(intent.transactions) >= 2
    wait_aborted(bootstrap_servers, [t[0] for t in intent.transactions[1:]])
    done = run_a(tmp_path, bootstrap_servers, topics, sink_options=options)
    text = log.read_text()
    assert done.returncode != 0, text[-3000:]
    assert "TransactionLostError" in text and intent.transactions[1][0] in text, text[-3000:]
    # Loud, and what was lost is part of batch 3: nothing twice, batches 0-2 whole.
    ids = Counter(
        json.loads(r.value)["event_id"]
        for r in read_all(bootstrap_servers, out, isolation="read_committed")
    )
    assert max(ids.values()) == 1
    assert set(range(3 * PER_BATCH)) <= set(ids) and len(ids) < events


def restart_broker_at(
    tmp_path: Path,
    topic_name: str,
    *,
    stall_at: str,
    master: str,
    stall_s: int = 20,
    release: bool = False,
    extra_env: dict[str, str] | None = None,
) -> tuple[list[Any], list[Any], str, tuple[float, float]]:
    """Stage A (transactions mode) on a broker of its own, three batches, stalled
    ``stall_s`` seconds at ``stall_at`` (with ``release``: until the restarted broker is
    ready); there the broker is killed (SIGKILL, its logs recovered at start) and
    started again. Returns the records a read_committed
    consumer of the output reads, the complete entries, the job's log, and
    the wall-clock times (s) of the kill and of the restarted broker's readiness."""
    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.testing.kafka_broker import EmbeddedKafka

    with EmbeddedKafka(data_dir=tmp_path / "kafka") as broker:
        servers = broker.bootstrap_servers
        source, out = f"{topic_name}-in", f"{topic_name}-out"
        for name in (source, out):
            create_topic(bootstrap_servers=servers, name=name, partitions=3)
        produce_page_views(bootstrap_servers=servers, topic=source, first=0, count=3 * PER_BATCH)
        signal_file = tmp_path / "stalled"
        env = user_env(
            SPARK_CHKPT_STALL_AT=stall_at,
            SPARK_CHKPT_STALL_SIGNAL=str(signal_file),
            SPARK_CHKPT_STALL_SECONDS=str(stall_s),
            **({"SPARK_CHKPT_STALL_RELEASE": str(tmp_path / "released")} if release else {}),
            **(extra_env or {}),
        )
        command = stage_a_command(servers, (source, out), tmp_path, master=master)
        log = tmp_path / "stage-a.log"
        with open(log, "ab") as output:
            process = subprocess.Popen(
                command,
                cwd=tmp_path,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + 480  # a loaded machine starts Spark slowly
            while not signal_file.exists():
                assert process.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, f"stage A never reached {stall_at}"
                time.sleep(0.2)
            killed = time.time()
            broker.kill()
            broker.start()
            ready = time.time()
            (tmp_path / "released").touch()
            assert process.wait(timeout=480) == 0, log.read_text()[-4000:]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=60)
        committed = read_all(servers, out, isolation="read_committed")
        complete = [e for e in entries(servers, out) if e.kind == "complete"]
        return committed, complete, log.read_text(), (killed, ready)


def event_ids(records: Sequence[Any]) -> Counter[int]:
    return Counter(json.loads(r.value)["event_id"] for r in records)


def test_broker_restart_between_intent_and_commit_is_survived(
    tmp_path: Path, topic_name: str
) -> None:
    """The broker is killed and started again while stage A's driver stalls right after
    the intent of batch 1: the transactions it records are open in the broker's
    transaction log across the restart, and the driver's EndTxn then commits them. A
    read_committed consumer sees each event once."""
    records, complete, _, _ = restart_broker_at(
        tmp_path, topic_name, stall_at="after-intent@1", master="local[2]"
    )
    ids = event_ids(records)
    assert sorted(ids) == list(range(3 * PER_BATCH)) and max(ids.values()) == 1
    assert sorted(e.snapshot_id for e in complete) == [0, 1, 2]


def test_broker_restart_while_tasks_produce_in_their_transactions(
    tmp_path: Path, topic_name: str
) -> None:
    """The broker is killed and started again while batch 1's write tasks are inside
    their transactions: each has flushed its first Arrow batch (25 records,
    ``spark.sql.execution.arrow.maxRecordsPerBatch``) into its open transaction and
    stalls there (``in-write``) until the restarted broker is ready; then the tasks
    produce the rest into the same transactions and flush.

    What happens: neither a task retry nor a query restart. The tasks' producers
    (librdkafka's, the sink's default client) reconnect; the transactions' state
    (producer id, epoch, partitions) is in the broker's ``__transaction_state`` log and
    its producer state in the data logs,
    both recovered when the broker starts, so the sends after the restart join the same
    open transactions, the driver's intent records them and its EndTxn commits them.
    A read_committed consumer sees each event once: batch 1's records produced before
    the kill and after the restart, in one commit."""
    records, complete, text, (killed, ready) = restart_broker_at(
        tmp_path,
        topic_name,
        stall_at="in-write@1",
        master="local[2,4]",
        stall_s=300,
        release=True,
        extra_env={
            "PYSPARK_SUBMIT_ARGS": "--conf spark.sql.execution.arrow.maxRecordsPerBatch=25 "
            "pyspark-shell"
        },
    )
    ids = event_ids(records)
    assert sorted(ids) == list(range(3 * PER_BATCH)) and max(ids.values()) == 1
    assert sorted(e.snapshot_id for e in complete) == [0, 1, 2]
    # Batch 1's committed records (of the attempts its complete entry names) were
    # produced before the kill and after the restart: the producer sets each record's
    # timestamp when it sends it.
    attempts = {a for e in complete if e.snapshot_id == 1 for a in e.attempts}
    batch_1 = [r for r in records if attempt_of(r.headers) in attempts]
    assert len(batch_1) == PER_BATCH
    assert any(r.timestamp / 1000 < killed for r in batch_1)
    assert any(r.timestamp / 1000 > ready for r in batch_1)
    assert "Lost task" not in text and text.count("supervising query stage_a") == 1
