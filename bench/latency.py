"""Latency at a steady input rate: from a record's produce time to its Delta commit.

A producer thread sends page views at ``rate`` records/s for ``seconds`` while the Kafka →
Delta job runs with ``processingTime=0`` (a new batch as soon as the last one is done).
A record's latency is the time its Delta commit became visible (the modification time of
the commit's ``_delta_log`` file) minus its Kafka timestamp (``CreateTime``, set by the
producing client when it sends), read back from the table's ``kafka_timestamp`` column.

Kafka → Kafka (:func:`measure_kafka_to_kafka`): the upstream query copies the topic with
``chkpt-kafka`` → ``chkpt-kafka`` (barriers on), forwarding each record's partition,
offset and Kafka timestamp in a header; the downstream query reads the output with
``alignment=aligned`` into ``chkpt-delta``, both with ``processingTime=0`` in the same
session. A record's latency is from its first produce to its downstream commit: it
includes the upstream's batch and commit, the barrier, the aligned cut and the
downstream's batch. Each source record must be in the downstream table exactly once.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Latency:
    path: str
    rate: int
    seconds: float
    records: int
    produced_rate: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    batches: int


def _paced_producer(
    servers: str, topic: str, rate: int, seconds: float, stop: threading.Event
) -> tuple[int, float]:
    """Send ``rate`` records/s in 10 ms steps; the count sent and the time it took."""
    from spark_chkpt.testing.generator import PageViews

    total = int(rate * seconds)
    pairs = list(PageViews(seed=7).events(0, total))
    try:
        import confluent_kafka

        producer: Any = confluent_kafka.Producer(
            {"bootstrap.servers": servers, "linger.ms": 1, "acks": "all"}
        )

        def send(key: bytes, value: bytes) -> None:
            while True:
                try:
                    producer.produce(topic, value=value, key=key)
                    return
                except BufferError:
                    producer.poll(0.01)

        def flush() -> None:
            producer.poll(0)

        def close() -> None:
            producer.flush(30)

    except ImportError:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=servers.split(","), linger_ms=1, acks="all")

        def send(key: bytes, value: bytes) -> None:
            producer.send(topic, value=value, key=key)

        def flush() -> None:
            pass

        def close() -> None:
            producer.flush()
            producer.close()

    step_s = 0.01
    started = time.monotonic()
    sent = 0
    while sent < total and not stop.is_set():
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        while sent < due:
            key, value = pairs[sent]
            send(key, value)
            sent += 1
        flush()
        time.sleep(step_s)
    close()
    return sent, time.monotonic() - started


def _rows_committed(table: Path) -> int:
    """Rows the table's commits added, from the ``numRecords`` of their add actions."""
    rows = 0
    for entry in (table / "_delta_log").glob("*.json"):
        for action in _actions(entry):
            if "add" in action:
                rows += json.loads(action["add"]["stats"])["numRecords"]
    return rows


def _actions(entry: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]


def commit_latencies(table: Path) -> tuple[list[float], int]:
    """Each row's latency in ms (its commit file's mtime minus its ``kafka_timestamp``),
    and the number of commits that added rows."""
    import pyarrow.parquet as pq

    log = table / "_delta_log"
    latencies: list[float] = []
    commits = 0
    for entry in sorted(log.glob("*.json")):
        visible_ms = os.stat(entry).st_mtime_ns / 1e6
        added = [action["add"]["path"] for action in _actions(entry) if "add" in action]
        if not added:
            continue
        commits += 1
        for path in added:
            column = pq.read_table(table / path, columns=["kafka_timestamp"]).column(0)
            for micros in column.cast("int64").to_pylist():
                latencies.append(visible_ms - micros / 1000)
    return latencies, commits


def _rounded(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 1)


def _summary(
    *, path: str, rate: int, seconds: float, sent: int, took: float, table: Path
) -> Latency:
    """The run's figures from the table's commits; every record sent must be in it."""
    from spark_chkpt.metrics.reporter import percentile

    latencies, commits = commit_latencies(table)
    if len(latencies) != sent:
        raise RuntimeError(f"{path} latency run at {rate}/s: {len(latencies)} rows of {sent} sent")
    return Latency(
        path=path,
        rate=rate,
        seconds=seconds,
        records=sent,
        produced_rate=round(sent / took),
        p50_ms=_rounded(percentile(latencies, 50)),
        p99_ms=_rounded(percentile(latencies, 99)),
        max_ms=round(max(latencies), 1) if latencies else None,
        batches=commits,
    )


def measure(
    *,
    spark: Any,
    servers: str,
    workdir: Path,
    rate: int,
    seconds: float,
    partitions: int,
    client: str,
    min_pause: str | None = None,
    progress: list[dict[str, Any]] | None = None,
    settings: dict[str, str] | None = None,
    tag: str = "",
) -> Latency:
    """Run the job at ``rate`` records/s for ``seconds`` and measure each record's latency
    (``min_pause``: the sink's ``minPauseBetweenSnapshots``). ``progress``: filled with
    the query's progress events (``batchId``, ``numInputRows``, ``durationMs``), for the
    batch's breakdown of ``--latency-only``; ``settings``: more job settings
    (``sink.*``, ``source.*``, ``job.*``), over the run's own; ``tag``: appended to the
    topic's and table's names, for more runs on one broker."""
    from spark_chkpt.jobs.kafka_to_delta import start
    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL

    suffix = (f"-pause{min_pause}" if min_pause else "") + tag
    topic = f"latency-{rate}{suffix}"
    create_topic(bootstrap_servers=servers, name=topic, partitions=partitions)
    name = f"latency{rate}{suffix}"
    pause = {"sink.minPauseBetweenSnapshots": min_pause} if min_pause else {}
    job = {
        **pause,
        "source.kafka.bootstrap.servers": servers,
        "source.subscribe": topic,
        "source.startingOffsets": "earliest",
        "source.kafka.client": client,
        "sink.path": str(workdir / name),
        "sink.checkpointLocation": str(workdir / f"chk-{name}"),
        "job.schema": PAGE_VIEW_SCHEMA_DDL,
        "job.trigger": "processingTime=0 seconds",
        "job.queryName": f"bench_{name}",
        **(settings or {}),
    }
    query = start(spark, job)
    try:
        deadline = time.monotonic() + 120
        while not query.recentProgress:  # the first (empty) batch: the query is polling
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"latency query did not start: {query.exception()}")
            time.sleep(0.2)
        stop = threading.Event()
        sent, took = _paced_producer(servers, topic, rate, seconds, stop)
        deadline = time.monotonic() + 120
        while _rows_committed(workdir / name) < sent:
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"latency query fell behind or failed: {query.exception()}")
            time.sleep(0.2)
        if progress is not None:
            # The last batch's progress event comes after its Delta commit (Spark's
            # commit log and the report follow): wait for it before it is read.
            _await_progress(query, _last_batch_id(workdir / name), deadline_s=30)
    finally:
        if progress is not None:
            progress.extend(json.loads(p.json) for p in query.recentProgress)
        query.stop()
    return _summary(
        path="kafka->delta", rate=rate, seconds=seconds, sent=sent, took=took, table=workdir / name
    )


def _last_batch_id(table: Path) -> int | None:
    """The batch id of the table's newest commit that carries a snapshot record."""
    from spark_chkpt.snapshot.record import SNAPSHOT_KEY

    for entry in sorted((table / "_delta_log").glob("*.json"), reverse=True):
        for action in _actions(entry):
            info = action.get("commitInfo") or {}
            if SNAPSHOT_KEY in info:
                return int(json.loads(info[SNAPSHOT_KEY])["batch_id"])
    return None


def _await_progress(query: Any, batch_id: int | None, *, deadline_s: float) -> None:
    """Until ``query`` has reported the progress of ``batch_id`` (or the deadline)."""
    deadline = time.monotonic() + deadline_s
    while batch_id is not None and time.monotonic() < deadline:
        last = query.lastProgress
        if last is not None and int(last["batchId"]) >= batch_id:
            return
        time.sleep(0.05)


def breakdown(progress: list[dict[str, Any]], table: Path) -> dict[str, Any]:
    """Where a batch's time goes, over the batches that read rows: p50 / p99 of each
    ``durationMs`` phase, of the gap from one batch's end to the next one's start (Spark's
    progress report and trigger wait), of the sink's driver commit (``commit_ms`` of the
    snapshot records in ``table``), and the rows per batch."""
    from datetime import datetime

    from deltalake import DeltaTable

    from spark_chkpt.metrics.reporter import percentile
    from spark_chkpt.snapshot.record import SNAPSHOT_KEY

    def started(event: dict[str, Any]) -> float:
        stamp = event["timestamp"].replace("Z", "+00:00")
        return datetime.fromisoformat(stamp).timestamp() * 1000

    with_rows = [e for e in progress if e.get("numInputRows")]
    phases: dict[str, list[float]] = {}
    for event in with_rows:
        for phase, ms in (event.get("durationMs") or {}).items():
            phases.setdefault(phase, []).append(float(ms))
    gaps = [
        started(after) - started(before) - float(before["durationMs"]["triggerExecution"])
        for before, after in itertools.pairwise(progress)
        if before.get("numInputRows") and "triggerExecution" in (before.get("durationMs") or {})
    ]
    commits = [
        float(json.loads(entry[SNAPSHOT_KEY])["commit_ms"])
        for entry in DeltaTable(str(table)).history()
        if SNAPSHOT_KEY in entry
    ]
    rows = [float(e["numInputRows"]) for e in with_rows]

    def p50_p99(values: list[float]) -> list[float | None]:
        return [_rounded(percentile(values, 50)), _rounded(percentile(values, 99))]

    figures = {phase: p50_p99(ms) for phase, ms in sorted(phases.items())}
    figures["gap_between_batches"] = p50_p99(gaps)
    figures["sink_driver_commit"] = p50_p99(commits)
    figures["rows_per_batch"] = p50_p99(rows)
    return {"batches": len(with_rows), "p50_p99_ms": figures}


def latency_split(progress: list[dict[str, Any]], table: Path) -> dict[str, Any]:
    """Each record's latency in two parts: the wait (its Kafka timestamp to the start of
    the batch that read it: the batch running when it arrived, and the trigger) and its
    own batch (that batch's start to its Delta commit's file time); p50 / p99 of each
    over all records, and the medians of both over the slowest 1% (what the p99 is made
    of). A batch's start is its progress event's ``timestamp``; a commit's batch is its
    snapshot record's ``batch_id``."""
    import statistics
    from datetime import datetime

    import pyarrow.parquet as pq

    from spark_chkpt.metrics.reporter import percentile
    from spark_chkpt.snapshot.record import SNAPSHOT_KEY

    starts = {
        int(e["batchId"]): datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
        * 1000
        for e in progress
    }
    parts: list[tuple[float, float, float]] = []  # (latency, wait, own batch)
    for entry in sorted((table / "_delta_log").glob("*.json")):
        actions = _actions(entry)
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if SNAPSHOT_KEY not in info:
            continue
        start = starts.get(int(json.loads(info[SNAPSHOT_KEY])["batch_id"]))
        if start is None:
            continue
        visible_ms = os.stat(entry).st_mtime_ns / 1e6
        for action in actions:
            if "add" not in action:
                continue
            column = pq.read_table(table / action["add"]["path"], columns=["kafka_timestamp"])
            for micros in column.column(0).cast("int64").to_pylist():
                parts.append(
                    (visible_ms - micros / 1000, start - micros / 1000, visible_ms - start)
                )
    if not parts:
        return {}
    parts.sort()
    slowest = parts[int(len(parts) * 0.99) :]
    waits = [w for _, w, _ in parts]
    owns = [o for _, _, o in parts]
    return {
        "records": len(parts),
        "wait_p50_p99_ms": [_rounded(percentile(waits, 50)), _rounded(percentile(waits, 99))],
        "own_batch_p50_p99_ms": [_rounded(percentile(owns, 50)), _rounded(percentile(owns, 99))],
        "slowest_1pct_median_wait_ms": _rounded(statistics.median(w for _, w, _ in slowest)),
        "slowest_1pct_median_own_batch_ms": _rounded(statistics.median(o for _, _, o in slowest)),
    }


# The header the upstream query forwards each record's origin in: "partition:offset:ms".
ORIGIN_HEADER = "bench-origin"


def _wait_polling(queries: list[Any], seconds: float) -> None:
    """Until each query has finished its first (empty) batch, so it is polling."""
    deadline = time.monotonic() + seconds
    while not all(q.recentProgress for q in queries):
        failed = [q.exception() for q in queries if q.exception() is not None]
        if failed or time.monotonic() > deadline:
            raise RuntimeError(f"latency queries did not start: {failed}")
        time.sleep(0.2)


def measure_kafka_to_kafka(
    *,
    spark: Any,
    servers: str,
    workdir: Path,
    rate: int,
    seconds: float,
    partitions: int,
    client: str,
    sink_client: str | None = None,
    progress: dict[str, list[dict[str, Any]]] | None = None,
) -> Latency:
    """Run ``chkpt-kafka`` → ``chkpt-kafka`` and its aligned downstream read at ``rate``
    records/s for ``seconds``; each record's latency to the downstream's commit.

    ``sink_client``: the upstream sink's ``kafka.client`` (default: none set, the sink's
    own default, librdkafka, as a user's job gets it). ``progress``: filled with each
    query's progress events (``up``, ``down``), for bench/profile.py. The table also
    keeps each record's timestamp in the middle topic (``hop_timestamp``: when the
    upstream sink produced it), which splits a record's latency into the upstream's part
    and the downstream's."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    from spark_chkpt.kafka.client.topics import create_topic

    name = f"k2k-latency{rate}"
    topic, out = f"{name}-in", f"{name}-out"
    for each in (topic, out):
        create_topic(bootstrap_servers=servers, name=each, partitions=partitions)

    def read(subscribe: str) -> Any:
        return (
            spark.readStream.format("chkpt-kafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", subscribe)
            .option("startingOffsets", "earliest")
            .option("kafka.client", client)
        )

    origin = F.concat_ws(
        ":", "partition", "offset", F.unix_millis("timestamp").cast("string")
    ).cast("binary")
    upstream_writer = (
        read(topic)
        .load()
        .select(
            "key",
            "value",
            F.array(F.struct(F.lit(ORIGIN_HEADER).alias("key"), origin.alias("value"))).alias(
                "headers"
            ),
        )
        .writeStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", out)
        .option("checkpointLocation", str(workdir / f"chk-{name}-up"))
        .queryName(f"bench_{name}_up".replace("-", "_"))
        .trigger(processingTime="0 seconds")
    )
    if sink_client is not None:
        upstream_writer = upstream_writer.option("kafka.client", sink_client)
    upstream = upstream_writer
    fields = F.split(
        F.expr(f"filter(headers, h -> h.key = '{ORIGIN_HEADER}')[0].value").cast("string"), ":"
    )
    table = workdir / name
    downstream = (
        read(out)
        .option("includeHeaders", "true")
        .load()
        .select(
            fields[0].cast("int").alias("origin_partition"),
            fields[1].cast("long").alias("origin_offset"),
            F.timestamp_millis(fields[2].cast("long")).alias("kafka_timestamp"),
            F.col("timestamp").alias("hop_timestamp"),
        )
        .writeStream.format("chkpt-delta")
        .option("path", str(table))
        .option("checkpointLocation", str(workdir / f"chk-{name}-down"))
        .queryName(f"bench_{name}_down".replace("-", "_"))
        .trigger(processingTime="0 seconds")
    )
    queries = [upstream.start(), downstream.start()]
    try:
        _wait_polling(queries, 120)
        sent, took = _paced_producer(servers, topic, rate, seconds, threading.Event())
        deadline = time.monotonic() + 180
        while _rows_committed(table) < sent:
            failed = [q.exception() for q in queries if q.exception() is not None]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(f"Kafka -> Kafka latency run fell behind or failed: {failed}")
            time.sleep(0.2)
    finally:
        if progress is not None:
            progress["up"] = [json.loads(p.json) for p in queries[0].recentProgress]
            progress["down"] = [json.loads(p.json) for p in queries[1].recentProgress]
        for query in queries:
            query.stop()
    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["origin_partition", "origin_offset"])
    origins = pc.count_distinct(
        pc.binary_join_element_wise(
            pc.cast(rows["origin_partition"], "string"),
            pc.cast(rows["origin_offset"], "string"),
            ":",
        )
    ).as_py()
    if rows.num_rows != sent or origins != sent:
        raise RuntimeError(
            f"Kafka -> Kafka latency run at {rate}/s: {rows.num_rows} rows, "
            f"{origins} distinct source records, {sent} sent"
        )
    return _summary(
        path="kafka->kafka", rate=rate, seconds=seconds, sent=sent, took=took, table=table
    )
