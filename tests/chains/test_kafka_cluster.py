"""A three-node Kafka cluster as production runs one (replication factor 3,
``min.insync.replicas=2``), under a user's running pipeline: its brokers die and restart
and no query may die, lose or repeat a record.

One driver runs five queries at once (``tests/user_scripts/cluster_job.py``, started as a
user starts a script): Kafka -> Delta, Kafka -> Kafka with barriers read back by an aligned
chkpt-kafka query into Delta, Kafka -> Kafka in Kafka transactions (read here by a plain
``read_committed`` consumer), and the per-app counts (stateful). While a producer keeps
writing, the cluster goes through: the broker that leads the data partition 0 killed
``-9`` and down 20 s; the same for the leader of the control topic ``__chkpt.<out>``; for
the broker that leads the transactions' coordinator partition of ``__transaction_state``;
for the active KRaft controller; a partition reassignment of the data topic (each
partition's replicas rotated and its preferred leader elected: every leader moves, no
node down); then a rolling restart (each node stopped and started
in turn, as a Kafka upgrade is done, the partitions in sync before the next). Every id
is then in every output exactly once, and the longest pause between two commits of a
query is measured (printed; bounded below).

The cluster is the session's (``kafka_cluster``); the cheaper checks of the control
topic's replication share it here, in the same module, so one xdist worker starts it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.deadline import Deadline
from spark_chkpt.kafka.client.topics import create_topic
from spark_chkpt.testing.generator import PageViews
from spark_chkpt.testing.kafka_cluster import KafkaCluster
from spark_chkpt.testing.processes import kill_tree
from tests.helpers import user_env

pytestmark = pytest.mark.fault

SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "cluster_job.py"
PARTITIONS = 4
DOWN_S = 20.0  # how long a killed broker stays down
REASSIGNED_S = 10.0  # the query runs on after every leader of its data topic moved
RATE = 100  # events per second the producer writes while the cluster is disturbed
QUERIES = ("delta", "barriers", "aligned", "transactions", "counts")
TXN_APP = "cluster-tx"  # the script's txnAppId
STALL_LIMIT_S = 40.0  # a leader election plus one request timeout


@pytest.fixture
def cluster(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's cluster, every node running again when the test ends."""
    yield kafka_cluster
    kafka_cluster.start()


def _names(request: pytest.FixtureRequest) -> str:
    return f"{request.node.name[:30]}-{int(time.time() * 1000) % 10**8}"


def _schema() -> Any:
    from pyspark.sql.types import BinaryType, StructField, StructType

    return StructType([StructField("value", BinaryType())])


def _assemble_sink(servers: str, topic: str, checkpoint: Path) -> None:
    """What a ``chkpt-kafka`` sink does on the driver when its query starts."""
    from spark_chkpt.kafka.sink.assembler import KafkaSink

    KafkaSink.assemble(
        options={
            "kafka.bootstrap.servers": servers,
            "topic": topic,
            "checkpointLocation": str(checkpoint),
            "txnAppId": "rf-app",
        },
        schema=_schema(),
    )


def test_the_sinks_control_topic_is_replicated_as_the_cluster_replicates(
    cluster: KafkaCluster, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The control topic holds which snapshots committed: on a cluster whose topics have
    three replicas, it must have three too, or one broker's death stops the sink."""
    topic = _names(request)
    create_topic(bootstrap_servers=cluster.bootstrap_servers, name=topic, replication_factor=3)
    _assemble_sink(cluster.bootstrap_servers, topic, tmp_path)
    assert cluster.replication_factor(control_topic_for(topic)) == 3


def test_a_control_topic_less_replicated_than_its_data_is_named_at_start(
    cluster: KafkaCluster,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A control topic created with one replica (by an earlier version, or by hand) under
    a data topic of three: the sink's start names it, its factor and the way to raise it."""
    topic = _names(request)
    control = control_topic_for(topic)
    servers = cluster.bootstrap_servers
    create_topic(bootstrap_servers=servers, name=topic, replication_factor=3)
    create_topic(
        bootstrap_servers=servers,
        name=control,
        replication_factor=1,
        config={"retention.ms": "-1", "retention.bytes": "-1"},
    )
    with caplog.at_level(logging.WARNING):
        _assemble_sink(servers, topic, tmp_path)
    named = [r.getMessage() for r in caplog.records if control in r.getMessage()]
    assert named, f"nothing named {control} at the sink's start: {caplog.text[-2000:]}"
    assert "replication factor 1" in named[0] and "3" in named[0], named[0]


# -- the chain ---------------------------------------------------------------------------


class Producer:
    """Writes page views with ids 0, 1, 2, ... (id i to partition i % 4) at ``RATE`` per
    second until stopped: librdkafka's idempotent producer, ``acks=all``, so a broker's
    death neither loses nor repeats one."""

    def __init__(self, servers: str, topic: str) -> None:
        from confluent_kafka import Producer as Librdkafka

        self.topic = topic
        self.producer = Librdkafka(
            {
                "bootstrap.servers": servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 20,
                "message.timeout.ms": 300000,
            }
        )
        self.sent = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failures.append(str(error))

    def _run(self) -> None:
        views = PageViews(seed=1)
        began = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - began) * RATE) + 1
            while self.sent < due:
                key, value = views.encoded(self.sent)
                self.producer.produce(
                    self.topic,
                    key=key,
                    value=value,
                    partition=self.sent % PARTITIONS,
                    on_delivery=self._delivered,
                )
                self.sent += 1
            self.producer.poll(0.05)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        """Stop writing, wait until every event is acknowledged; how many were written."""
        self._stop.set()
        self._thread.join(timeout=30)
        left = self.producer.flush(300)
        assert left == 0 and not self.failures, f"{left} unsent, failures {self.failures[:3]}"
        return self.sent


class Job:
    """The user's script, started from a folder outside the repo."""

    def __init__(self, folder: Path, servers: str, topics: tuple[str, str, str]) -> None:
        self.work = folder / "work"
        self.work.mkdir(parents=True)
        shutil.copy(SCRIPT, folder / "my_pipeline.py")
        self.log = folder / "job.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "my_pipeline.py", servers, *topics, str(self.work)],
                cwd=folder,
                env=user_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def check_alive(self, doing: str) -> None:
        if self.process.poll() is not None:
            pytest.fail(f"the job exited ({self.process.returncode}) {doing}:\n{self.tail()}")
        died = self.work / "died.txt"
        if died.exists():  # the query's error, with the last lines of its traceback
            pytest.fail(f"a query died {doing}:\n{died.read_text(errors='replace')[-6000:]}")

    def progress(self) -> list[dict[str, Any]]:
        path = self.work / "progress.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait(self, what: str, done: Callable[[], bool], *, timeout_s: float) -> None:
        deadline = Deadline.after(seconds=timeout_s)
        while not done():
            self.check_alive(f"while waiting for {what}")
            if deadline.expired():
                pytest.fail(f"{what}: not within {timeout_s}s\n{self.tail()}")
            time.sleep(1.0)

    def hold(self, seconds: float, doing: str) -> None:
        """``seconds`` of a broker down, the job watched meanwhile."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.check_alive(doing)
            time.sleep(0.5)

    def stop(self) -> None:
        (self.work / "stop").touch()
        try:
            code = self.process.wait(timeout=180)
        except subprocess.TimeoutExpired:
            kill_tree(self.process.pid)
            pytest.fail(f"the job did not stop within 180s:\n{self.tail()}")
        assert code == 0, f"the job exited {code}:\n{self.tail()}"


def _table_ids(path: Path) -> Counter[int]:
    from deltalake import DeltaTable

    if not (path / "_delta_log").exists():
        return Counter()
    return Counter(
        DeltaTable(str(path)).to_pyarrow_table(columns=["event_id"]).column(0).to_pylist()
    )


def _counts(path: Path) -> dict[str, int]:
    from deltalake import DeltaTable

    if not (path / "_delta_log").exists():
        return {}
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return {row["app"]: row["count"] for row in rows}


def _committed_ids(servers: str, topic: str) -> Counter[int]:
    """The event ids of ``topic`` as a plain ``read_committed`` consumer reads them."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=servers,
        enable_auto_commit=False,
        isolation_level="read_committed",
        request_timeout_ms=30000,
    )
    ids: Counter[int] = Counter()
    try:
        partitions = [KTP(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)  # the last stable offsets
        deadline = Deadline.after(seconds=120)
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert not deadline.expired(), f"{topic}: not read to {ends} within 120s"
            for records in consumer.poll(timeout_ms=1000).values():
                ids.update(json.loads(r.value)["event_id"] for r in records)
    finally:
        consumer.close()
    return ids


def _once(found: Counter[int], total: int, output: str) -> None:
    missing = sorted(set(range(total)) - set(found))
    repeated = sorted(i for i, n in found.items() if n > 1)
    stray = sorted(set(found) - set(range(total)))
    assert not (missing or repeated or stray), (
        f"{output}: {len(missing)} ids missing (first {missing[:5]}), {len(repeated)} "
        f"repeated (first {repeated[:5]}), {len(stray)} unknown"
    )


def _stalls(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Per query, the longest time between the ends of two batches that read records."""
    ends: dict[str, list[float]] = {}
    for p in progress:
        if p["rows"] > 0:
            began = dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
            ends.setdefault(p["name"], []).append(began.timestamp() + p["ms"] / 1000)
    return {
        name: max((b - a for a, b in zip(sorted(t), sorted(t)[1:], strict=False)), default=0.0)
        for name, t in ends.items()
    }


@contextlib.contextmanager
def _phase(timeline: list[str], name: str) -> Iterator[None]:
    began = time.monotonic()
    yield
    timeline.append(f"{name} {time.monotonic() - began:.1f}s")


def test_a_pipeline_runs_through_broker_deaths_and_a_rolling_restart(
    cluster: KafkaCluster, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    began = time.monotonic()
    servers = cluster.bootstrap_servers
    base = _names(request)
    events, out, txout = f"{base}-events", f"{base}-out", f"{base}-txout"
    for topic in (events, out, txout):
        create_topic(
            bootstrap_servers=servers, name=topic, partitions=PARTITIONS, replication_factor=3
        )
    producer = Producer(servers, events)
    producer.start()
    job = Job(tmp_path / "my-project", servers, (events, out, txout))
    timeline: list[str] = []
    try:
        with _phase(timeline, "first batches"):
            job.wait(
                "a batch with records from each of the five queries",
                lambda: {p["name"] for p in job.progress() if p["rows"] > 0} >= set(QUERIES),
                timeout_s=300,
            )
        topics = [events, out, txout, control_topic_for(out), control_topic_for(txout)]
        victims: list[tuple[str, Callable[[], int]]] = [
            ("data leader", lambda: cluster.leader_of(events, 0)),
            ("control-topic leader", lambda: cluster.leader_of(control_topic_for(out), 0)),
            (
                "transaction coordinator",
                lambda: cluster.transaction_coordinator(f"chkpt-{TXN_APP}-{txout}-0-0"),
            ),
            ("KRaft controller", cluster.controller),
        ]
        for what, find in victims:
            with _phase(timeline, what):
                node = find()
                cluster.kill(node)
                job.hold(DOWN_S, f"while the {what} (node {node}) was down")
                cluster.start(node)
                cluster.wait_in_sync(topics)
            timeline[-1] += f" (node {node})"
        with _phase(timeline, "reassignment"):
            leaders = cluster.reassign(events)
            job.hold(REASSIGNED_S, f"after {events}'s reassignment (leaders {leaders})")
        with _phase(timeline, "rolling restart"):
            for node in sorted(cluster.nodes):
                cluster.stop(node)
                cluster.start(node)
                cluster.wait_in_sync(topics)
                job.check_alive(f"after node {node}'s restart")
        total = producer.stop()
        with _phase(timeline, "catch-up"):
            job.wait(
                f"all {total} events in the three tables",
                lambda: (
                    len(_table_ids(job.work / "delta")) >= total
                    and len(_table_ids(job.work / "aligned")) >= total
                    and sum(_counts(job.work / "counts").values()) >= total
                ),
                timeout_s=240,
            )
            job.wait(
                f"all {total} events committed to {txout}",
                lambda: len(_committed_ids(servers, txout)) >= total,
                timeout_s=120,
            )
        job.stop()
    finally:
        producer._stop.set()
        if job.process.poll() is None:
            kill_tree(job.process.pid)
    _once(_table_ids(job.work / "delta"), total, "Kafka -> Delta")
    _once(_table_ids(job.work / "aligned"), total, "Kafka -> Kafka (barriers), read aligned")
    _once(_committed_ids(servers, txout), total, "Kafka -> Kafka (transactions), read_committed")
    expected = Counter(str(PageViews(seed=1).event(i)["app"]) for i in range(total))
    assert _counts(job.work / "counts") == dict(expected), "the per-app counts"
    assert cluster.replication_factor(control_topic_for(out)) == 3
    stalls = _stalls(job.progress())
    print(
        f"cluster chain: {total} events, {time.monotonic() - began:.0f}s "
        f"(cluster started in {cluster.started_in_s:.1f}s); {'; '.join(timeline)}; "
        "longest stall between commits: "
        + ", ".join(f"{name} {s:.1f}s" for name, s in sorted(stalls.items()))
    )
    assert max(stalls.values()) <= STALL_LIMIT_S, stalls
