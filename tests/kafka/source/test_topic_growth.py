"""Topics that grow under running queries (issue 35), on the real Kafka broker.

The user's schedule: queries run unattended with processing-time triggers while records
keep arriving; a topic grows from two partitions to six (``create_partitions``) and the
producers spread over all six at once. The read tasks' pooled consumers have read the
topic before the growth, so their cached metadata knows two partitions; a task is given
old and new partitions together (local[2]: six partitions in two tasks). On kafka-python
that task died with ``KeyError: TopicPartition(..., partition=2)`` and the query stopped.

The partition-growth test this file replaces (in ``test_real_kafka.py``) grew a topic from
two partitions to four: its read tasks held either the two old partitions or the two new
ones, never both, and a kafka-python consumer that knows none of a request's partitions
refreshes its metadata and retries; one that knows some leaves the others out.

Every query here must stay up through the growth (no restart) and every record must
arrive exactly once, including the records written to the new partitions before the query
noticed them. The Makefile's second pass runs this file on the other clients (the source
on librdkafka, the sink on kafka-python).

Needs Apache Kafka: Tansu has no CreatePartitions (docs/reference/brokers.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_chkpt.kafka.client.topics import add_partitions, partition_count
from tests.helpers import BROKER_ENV, kafka_stream

# make test's second pass runs this module again, each format on its other client.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.other_clients,
    pytest.mark.skipif(
        os.environ.get(BROKER_ENV) == "tansu", reason="Tansu has no CreatePartitions"
    ),
]

TRIGGER = "500 milliseconds"


class Feeder:
    """Writes ``<prefix>-<i>`` round-robin over the topic's first ``partitions`` partitions,
    about 200 records a second, until stopped; ``partitions`` may be raised while it runs
    (after the topic grew), as a producer spreading keys over the new partition count."""

    def __init__(self, servers: str, topic: str, prefix: str, *, partitions: int = 2) -> None:
        self.topic, self.prefix, self.partitions = topic, prefix, partitions
        self.sent = 0
        self._servers = servers
        self._producer = self._new_producer()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _new_producer(self) -> Any:
        from kafka import KafkaProducer

        return KafkaProducer(bootstrap_servers=self._servers.split(","), linger_ms=5)

    def _run(self) -> None:
        known = self.partitions
        try:
            while not self._stop.is_set():
                if self.partitions != known:  # kafka-python's producer refuses a partition
                    self._producer.close()  # its metadata does not know: a new producer
                    self._producer, known = self._new_producer(), self.partitions
                for _ in range(20):
                    i = self.sent
                    self._producer.send(
                        self.topic,
                        value=f"{self.prefix}-{i}".encode(),
                        partition=i % self.partitions,
                    )
                    self.sent += 1
                self._producer.flush()
                time.sleep(0.1)
        except BaseException as e:  # reported by stop()
            self._error = e

    def stop(self) -> list[str]:
        """Stop, flush and close (once); every value written."""
        if self._stop.is_set():
            return [f"{self.prefix}-{i}" for i in range(self.sent)]
        self._stop.set()
        self._thread.join(timeout=60)
        self._producer.flush()
        self._producer.close()
        assert self._error is None, f"the feeder of {self.topic} failed: {self._error!r}"
        return [f"{self.prefix}-{i}" for i in range(self.sent)]


def _to_kafka(df: Any, servers: str, topic: str, app: str, checkpoint: Path) -> Any:
    """A ``chkpt-kafka`` sink query: each value tagged with the partition it was read from,
    keyed by itself (so the sink spreads it over the output topic's partitions)."""
    return (
        df.selectExpr(
            "CAST(value AS STRING) AS key",
            "CONCAT(CAST(value AS STRING), '@', CAST(partition AS STRING)) AS value",
        )
        .writeStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", topic)
        .option("txnAppId", app)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=TRIGGER)
        .start()
    )


def _to_delta(df: Any, path: Path, checkpoint: Path) -> Any:
    return (
        df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("chkpt-delta")
        .option("path", str(path))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=TRIGGER)
        .start()
    )


def _rows(path: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    if not (path / "_delta_log").exists():
        return []
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def _healthy(queries: Iterable[Any]) -> None:
    for query in queries:
        error = query.exception()
        assert error is None, f"query {query.name or query.id} died: {error}"
        assert query.isActive, f"query {query.name or query.id} stopped"


def _wait(queries: list[Any], done: Callable[[], bool], *, seconds: float, what: str) -> None:
    """Until ``done()``, failing at once if a query dies (the defect: no restart)."""
    deadline = time.monotonic() + seconds
    while not done():
        _healthy(queries)
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    _healthy(queries)


def _batches(query: Any) -> int:
    progress = query.lastProgress
    return -1 if not progress else int(progress["batchId"])


def _grow(servers: str, topic: str, feeders: Iterable[Feeder] = ()) -> None:
    add_partitions(bootstrap_servers=servers, name=topic, total=6)
    assert partition_count(bootstrap_servers=servers, name=topic) == 6
    for feeder in feeders:
        feeder.partitions = 6


def _scan(servers: str, topic: str) -> tuple[set[int], dict[int, list[int]]]:
    """The partitions of ``topic`` that hold a barrier record, and each partition's data
    offsets (barriers take offsets too: a new partition's first record may be one)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    from spark_chkpt.alignment.barrier import BARRIER_KEY

    consumer = KafkaConsumer(bootstrap_servers=servers.split(","), enable_auto_commit=False)
    try:
        tps = [KafkaTopicPartition(topic, p) for p in range(6)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(tps)
        barriers: set[int] = set()
        data: dict[int, list[int]] = {p: [] for p in range(6)}
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"reading {topic} timed out"
            for tp, records in consumer.poll(timeout_ms=500).items():
                for r in records:
                    if r.key == BARRIER_KEY:
                        barriers.add(tp.partition)
                    else:
                        data[tp.partition].append(r.offset)
        return barriers, data
    finally:
        consumer.close()


def _stop(queries: Iterable[Any]) -> None:
    for query in queries:
        with contextlib.suppress(Exception):  # the test's own assertion says why it failed
            query.stop()


def test_a_pipeline_keeps_running_when_its_input_and_middle_topics_grow(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Job A reads ``in`` (plain) into ``mid`` with barriers; jobs B (aligned) and C
    (unaligned) read ``mid`` into Delta. ``in`` grows under A while records arrive, then
    ``mid`` grows under A's sink and B's and C's reads. No query stops, and each table
    holds every input record once, read from all six partitions of each topic."""
    source, mid = make_topic(partitions=2, suffix="in"), make_topic(partitions=2, suffix="mid")
    feeder = Feeder(bootstrap_servers, source, "r")
    queries: list[Any] = []
    try:
        queries.append(
            _to_kafka(
                kafka_stream(spark, bootstrap_servers, source),
                bootstrap_servers,
                mid,
                "grow-a",
                tmp_path / "a",
            )
        )
        tables = {mode: tmp_path / mode for mode in ("aligned", "unaligned")}
        for mode, table in tables.items():
            down = kafka_stream(spark, bootstrap_servers, mid, alignment=mode)
            queries.append(_to_delta(down, table, tmp_path / f"chk-{mode}"))
        a = queries[0]
        # Between batches or during one: records arrive the whole time, A runs every 0.5 s.
        _wait(queries, lambda: _batches(a) >= 2, seconds=120, what="A's third batch")
        _grow(bootstrap_servers, source, [feeder])
        _wait(queries, lambda: _batches(a) >= 6, seconds=120, what="A after in grew")
        _grow(bootstrap_servers, mid)
        sent = feeder.sent
        _wait(queries, lambda: _batches(a) >= 10, seconds=120, what="A after mid grew")
        values = feeder.stop()
        assert len(values) > sent
        for mode, table in tables.items():
            _wait(
                queries,
                lambda table=table: len(_rows(table)) >= len(values),
                seconds=180,
                what=f"every record in the {mode} table",
            )
    finally:
        feeder.stop()
        _stop(queries)

    # A's sink put its barriers into the partitions added under it, from the next snapshot.
    barriers, data = _scan(bootstrap_servers, mid)
    assert barriers == set(range(6))
    for mode, table in tables.items():
        rows = _rows(table)
        read = sorted(str(r["value"]).split("@")[0] for r in rows)
        assert read == sorted(values), f"{mode}: not every record once"
        # Records of every partition of both topics; of the new ones, every data record
        # from the first (a new partition's first offset may hold a barrier, not data).
        assert {int(str(r["value"]).split("@")[1]) for r in rows} == set(range(6)), mode
        assert {r["partition"] for r in rows} == set(range(6)), mode
        for p in range(2, 6):
            offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
            assert offsets == data[p], f"{mode}: {mid}-{p} not read from its first record"


def test_a_fan_in_reader_keeps_running_when_the_shared_topic_grows(
    spark: SparkSession, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Two writers (apps) into one topic, read aligned with ``upstreamApps``: the shared
    topic grows under both writers and the reader while records arrive."""
    ins = [make_topic(partitions=2, suffix=f"in{n}") for n in (1, 2)]
    mid = make_topic(partitions=2, suffix="mid")
    feeders = [Feeder(bootstrap_servers, t, f"w{n}") for n, t in enumerate(ins, 1)]
    queries: list[Any] = []
    table = tmp_path / "table"
    try:
        for n, topic in enumerate(ins, 1):
            queries.append(
                _to_kafka(
                    kafka_stream(spark, bootstrap_servers, topic),
                    bootstrap_servers,
                    mid,
                    f"grow-fan{n}",
                    tmp_path / f"w{n}",
                )
            )
        down = kafka_stream(spark, bootstrap_servers, mid, upstreamApps="grow-fan1,grow-fan2")
        queries.append(_to_delta(down, table, tmp_path / "chk"))
        writers = queries[:2]
        _wait(queries, lambda: min(map(_batches, writers)) >= 2, seconds=120, what="writers")
        _grow(bootstrap_servers, mid)
        _wait(queries, lambda: min(map(_batches, writers)) >= 8, seconds=120, what="growth")
        values = [v for feeder in feeders for v in feeder.stop()]
        _wait(queries, lambda: len(_rows(table)) >= len(values), seconds=180, what="table")
    finally:
        for feeder in feeders:
            feeder.stop()
        _stop(queries)

    rows = _rows(table)
    assert sorted(str(r["value"]).split("@")[0] for r in rows) == sorted(values)
    assert {r["partition"] for r in rows} == set(range(6))
