"""The broker freezes mid-run (SIGSTOP of its process, the Kafka JVM or Tansu, then
SIGCONT; a restart of the broker with its data kept is tests/kafka/client/test_kafka_restart.py's
business). A pause within the clients' timeouts is waited out; a longer outage fails the
query with one error naming the broker and the timeout to raise, and a restart after the
broker is back goes on. Every event ends in the Delta table exactly once."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_chkpt.kafka.client.topics import create_topic
from spark_chkpt.testing.embedded_broker import EmbeddedBroker
from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, produce_page_views
from spark_chkpt.testing.kafka_broker import EmbeddedKafka
from spark_chkpt.testing.processes import kill_tree
from tests.helpers import embedded_broker, user_env

pytestmark = pytest.mark.fault

FIRST, SECOND = 3000, 1000
Broker = EmbeddedKafka | EmbeddedBroker


@pytest.fixture
def broker() -> Iterator[Broker]:
    """A broker of this test's own: pausing the session's would stall other tests."""
    with embedded_broker() as own:
        yield own


def job(
    tmp_path: Path, broker: Broker, topic: str, *settings: str, trigger: str
) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "spark_chkpt.jobs.kafka_to_delta",
        "--bootstrap-servers",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--table",
        str(tmp_path / "table"),
        "--checkpoint",
        str(tmp_path / "chk"),
        "--schema",
        PAGE_VIEW_SCHEMA_DDL,
        "--trigger",
        trigger,
        "--max-offsets-per-trigger",
        "500",
        "--master",
        "local[2]",
    ]
    for setting in settings:
        command += ["--set", setting]
    log = open(tmp_path / "job.log", "a")  # noqa: SIM115 - the child's output
    return subprocess.Popen(
        command,
        cwd=tmp_path,
        env=user_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def table_ids(tmp_path: Path) -> list[int]:
    if not (tmp_path / "table" / "_delta_log").exists():
        return []
    table = DeltaTable(str(tmp_path / "table")).to_pyarrow_table(columns=["event_id"])
    return sorted(table.column("event_id").to_pylist())


def wait_for_rows(
    tmp_path: Path, n: int, *, process: subprocess.Popen[str], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while len(table_ids(tmp_path)) < n:
        assert process.poll() is None, (tmp_path / "job.log").read_text()[-4000:]
        assert time.monotonic() < deadline, f"{len(table_ids(tmp_path))} of {n} rows"
        time.sleep(0.5)


def exactly_once(tmp_path: Path, count: int) -> None:
    ids = table_ids(tmp_path)
    assert ids == list(range(count)), (
        f"{len(ids)} rows, {len(set(ids))} distinct, missing "
        f"{sorted(set(range(count)) - set(ids))[:10]}"
    )


def test_a_pause_within_the_timeouts_is_waited_out(broker: Broker, tmp_path: Path) -> None:
    servers = broker.bootstrap_servers
    create_topic(bootstrap_servers=servers, name="views", partitions=3)
    produce_page_views(bootstrap_servers=servers, topic="views", first=0, count=FIRST)
    process = job(tmp_path, broker, "views", trigger="processingTime=1 second")
    try:
        wait_for_rows(tmp_path, 500, process=process, timeout=240)
        broker.pause()
        time.sleep(12)  # several triggers' worth
        broker.resume()
        produce_page_views(bootstrap_servers=servers, topic="views", first=FIRST, count=SECOND)
        wait_for_rows(tmp_path, FIRST + SECOND, process=process, timeout=240)
        assert process.poll() is None, "the query failed instead of waiting"
    finally:
        broker.resume()
        process.terminate()
        process.wait(timeout=60)
    exactly_once(tmp_path, FIRST + SECOND)


def test_a_connection_opened_during_a_pause_waits_out_the_request_timeout(
    broker: Broker,
) -> None:
    """A client that opens a connection while the broker is frozen (a metadata lookup
    after its bootstrap connection closed) waits as long as ``kafka.request.timeout.ms``,
    as a request on an open connection does. kafka-python 3 bounds a connection's setup,
    its ApiVersions and SASL exchanges included, by a setup timeout of its own (10 s):
    a reading task's leader lookup failed a 14 s pause of a query whose request timeout
    was 30 s. Consumer, producer and admin client each open theirs during one 13 s pause."""
    from spark_chkpt.kafka.client.factory import kafka_admin, kafka_consumer, kafka_producer
    from spark_chkpt.kafka.client.settings import kafka_client_settings

    servers = broker.bootstrap_servers
    create_topic(bootstrap_servers=servers, name="views", partitions=1)
    options = {"kafka.request.timeout.ms": "30000"}
    consumer = kafka_consumer(
        bootstrap_servers=servers, settings=kafka_client_settings(options, role="consumer")
    )
    producer = kafka_producer(
        bootstrap_servers=servers, settings=kafka_client_settings(options, role="producer")
    )
    admin = kafka_admin(
        bootstrap_servers=servers, settings=kafka_client_settings(options, role="consumer")
    )
    calls = {
        "consumer": lambda: "views" in consumer.topics(),
        "producer": lambda: producer.partitions_for("views") == {0},
        "admin": lambda: "views" in admin.list_topics(),
    }
    answers: dict[str, object] = {}

    def call(name: str) -> None:
        try:
            answers[name] = calls[name]()
        except Exception as e:  # the answer under test: which client failed, and how
            answers[name] = e

    broker.pause()
    try:
        threads = [threading.Thread(target=call, args=(name,)) for name in calls]
        for thread in threads:
            thread.start()
        time.sleep(13)
    finally:
        broker.resume()
    for thread in threads:
        thread.join(timeout=60)
    for client in (consumer, producer, admin):
        client.close()
    assert answers == {"consumer": True, "producer": True, "admin": True}, answers


def test_a_read_tasks_offset_lookup_outlasting_one_request_is_asked_again(
    broker: Broker,
) -> None:
    """The broker freezes between the driver's planning and a read task's first offset
    lookup (``beginning_offsets``, its leader known from the task's earlier reads) for
    longer than one request (8 s, ``kafka.request.timeout.ms`` 6 s). kafka-python gave
    up after that one request (``Failed to get offsets by timestamps in 6000 ms``; on a
    cluster the same lookup kept asking a dead leader while its partitions had moved).
    Each try now waits a quarter of the request timeout and the metadata is refreshed
    between tries, for up to twice the timeout. Both read-task clients, one pause."""
    from spark_chkpt.kafka.client.consumer import build_consumer
    from spark_chkpt.kafka.source.options import SourceConfig
    from spark_chkpt.offsets import TopicPartition

    servers = broker.bootstrap_servers
    create_topic(bootstrap_servers=servers, name="views", partitions=2)
    produce_page_views(bootstrap_servers=servers, topic="views", first=0, count=10)
    tps = [TopicPartition("views", p) for p in (0, 1)]
    consumers = {}
    for client in ("kafka-python", "confluent"):
        config = SourceConfig.from_options(
            {
                "kafka.bootstrap.servers": servers,
                "subscribe": "views",
                "kafka.client": client,
                "kafka.request.timeout.ms": "6000",
            }
        )
        consumers[client] = build_consumer(config.fetch_settings(client_id=f"task-{client}"))
        assert consumers[client].beginning_offsets(tps) == {tp: 0 for tp in tps}
    answers: dict[str, object] = {}

    def lookup(client: str) -> None:
        try:
            answers[client] = consumers[client].beginning_offsets(tps)
        except Exception as e:  # the answer under test
            answers[client] = e

    broker.pause()
    try:
        threads = [threading.Thread(target=lookup, args=(client,)) for client in consumers]
        for thread in threads:
            thread.start()
        time.sleep(8)
    finally:
        broker.resume()
    for thread in threads:
        thread.join(timeout=60)
    for consumer in consumers.values():
        consumer.close()
    assert answers == {client: {tp: 0 for tp in tps} for client in consumers}, answers


def test_an_outage_longer_than_the_timeouts_fails_clearly_and_a_restart_goes_on(
    broker: Broker, tmp_path: Path
) -> None:
    servers = broker.bootstrap_servers
    create_topic(bootstrap_servers=servers, name="views", partitions=3)
    produce_page_views(bootstrap_servers=servers, topic="views", first=0, count=FIRST)
    short = (
        "source.kafka.bootstrap.timeout.ms=5000",
        "source.kafka.request.timeout.ms=5000",
        "source.kafkaConsumer.pollTimeoutMs=5000",
    )
    process = job(tmp_path, broker, "views", *short, trigger="processingTime=1 second")
    try:
        wait_for_rows(tmp_path, 500, process=process, timeout=240)
        broker.pause()
        code = process.wait(timeout=180)
    finally:
        broker.resume()
        if process.poll() is None:
            process.kill()
    assert code != 0
    log = (tmp_path / "job.log").read_text()
    errors = [line for line in log.splitlines() if "BrokerUnavailableError: " in line]
    assert errors, log[-4000:]
    assert servers in errors[-1] and "timeout.ms=5000" in errors[-1], errors[-1]
    committed = len(table_ids(tmp_path))
    assert 500 <= committed < FIRST
    # The broker is back: a restart goes on from the last snapshot, exactly once.
    produce_page_views(bootstrap_servers=servers, topic="views", first=FIRST, count=SECOND)
    again = job(tmp_path, broker, "views", trigger="availableNow")
    assert again.wait(timeout=300) == 0, (tmp_path / "job.log").read_text()[-4000:]
    exactly_once(tmp_path, FIRST + SECOND)


def test_an_outage_between_the_data_and_the_barriers_confirms_each_snapshot_once(
    broker: Broker, tmp_path: Path
) -> None:
    """Kafka → A → Kafka → B → Delta. Stage A's commit of batch 2 has written its intent
    and stalls before the barriers (SPARK_CHKPT_STALL_AT); the broker freezes there, the
    barrier writes time out and A fails naming the broker. After SIGCONT a restart of A
    resumes from the intent: each snapshot is completed once, B holds every event once."""
    from tests.chains.test_two_stage import (
        EVENTS,
        index_entries,
        stage,
        wait_for_every_event,
    )
    from tests.chains.test_two_stage import (
        assert_exactly_once as assert_two_stage_exactly_once,
    )

    servers = broker.bootstrap_servers
    topics = ("views", "enriched")
    for name in topics:
        create_topic(bootstrap_servers=servers, name=name, partitions=3)
    produce_page_views(bootstrap_servers=servers, topic="views", first=0, count=EVENTS)
    stalled = tmp_path / "stalled"
    b = stage(tmp_path, "b", servers, topics, trigger="processingTime=1 second")
    try:
        a = stage(
            tmp_path,
            "a",
            servers,
            topics,
            sink_options=(
                "kafka.delivery.timeout.ms=5000",
                "kafka.request.timeout.ms=3000",
                "kafka.max.block.ms=5000",
            ),
            env={
                "SPARK_CHKPT_STALL_AT": "after-intent@2",
                "SPARK_CHKPT_STALL_SIGNAL": str(stalled),
                "SPARK_CHKPT_STALL_SECONDS": "4",
            },
        )
        deadline = time.monotonic() + 240
        while not stalled.exists():
            assert a.poll() is None and time.monotonic() < deadline, "no stall at batch 2"
            time.sleep(0.05)
        # Frozen for longer than A's stall plus its delivery timeout (4 + 5 + 3 s), so the
        # barrier writes fail; shorter than B's 30 s timeouts, which B waits out.
        broker.pause()
        time.sleep(14)
        broker.resume()
        log = tmp_path / "stage-a.log"
        assert a.wait(timeout=180) != 0, log.read_text()[-3000:]
        failure = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if "BrokerUnavailableError: " in line
        ][-1]
        assert servers in failure and "committing snapshot 2" in failure, failure
        assert index_entries(servers, "enriched")[-1] == ("intent", 2)
        a = stage(tmp_path, "a", servers, topics)
        assert a.wait(timeout=300) == 0, log.read_text()[-3000:]
        wait_for_every_event(tmp_path, b)
    finally:
        broker.resume()
        kill_tree(b.pid)
        b.wait(timeout=60)
    assert_two_stage_exactly_once(tmp_path, servers, "enriched")
    completes = [n for kind, n in index_entries(servers, "enriched") if kind == "complete"]
    assert sorted(completes) == list(range(len(completes))) and len(completes) >= 8
