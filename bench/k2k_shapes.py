"""Kafka → Kafka by record shape: ``chkpt-kafka`` → ``chkpt-kafka`` exactly once (Kafka
transactions, librdkafka source and sink) against Spark's ``kafka`` → ``kafka``
(at least once), on one broker, in one warm SparkSession.

    python -m bench --k2k-shapes-only [--k2k-shapes bench,100,1000,10000] [--repeat 1]

Shapes: ``bench`` (the benchmark's page views, about 210 bytes) and JSON values padded
to about 100 B, 1 KB and 10 KB. Each shape runs as a plain copy (``key``, ``value``) and
with a JSON transformation (``get_json_object`` of three fields → ``to_json``). Each row
is the records/s of the upstream query (``Trigger.AvailableNow``, wall time); the
ratio is ours over Spark's. Each best run is also split (:func:`split`): its start (the
query's start, first batch and stop) and the rate of its later batches, for each side.
The copy is then counted (``read_committed``): ours must hold every record exactly
once, Spark's at least once.

More: docs/performance/benchmarks.md (bench/k2k_shapes.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The format this row times (the other is Spark's own "kafka"): a format the bench picks,
# not a sink kind read from a record.
OURS = "chkpt-kafka"

# Records per shape: a bounded volume (the 10 KB rows would be 3 GB at 300,000).
RECORDS = {"bench": 200_000, "100": 200_000, "1000": 100_000, "10000": 20_000}
SHAPES = tuple(RECORDS)


def _values(shape: str, count: int) -> list[tuple[bytes, bytes]]:
    """``count`` (key, value) pairs of ``shape``: page views, or JSON padded to bytes."""
    from spark_chkpt.testing.generator import PageViews

    if shape == "bench":
        return list(PageViews(seed=1).events(0, count))
    size = int(shape)
    out = []
    for i in range(count):
        head = {"app": f"app{i % 7}", "user_id": f"user-{i % 10_000:05d}", "ts": i}
        pad = max(0, size - len(json.dumps({**head, "pad": ""}, separators=(",", ":"))))
        body = json.dumps({**head, "pad": "x" * pad}, separators=(",", ":"))
        out.append((f"app{i % 7}".encode(), body.encode()))
    return out


def fill(*, servers: str, topic: str, shape: str, records: int, partitions: int) -> int:
    """Create ``topic`` and fill it; the average value size in bytes."""
    import confluent_kafka

    from spark_chkpt.kafka.client.topics import create_topic

    create_topic(bootstrap_servers=servers, name=topic, partitions=partitions)
    pairs = _values(shape, records)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": servers, "linger.ms": 20, "queue.buffering.max.kbytes": 1 << 20}
    )
    for i, (key, value) in enumerate(pairs):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError(f"bench: filling {topic} did not finish")
    return round(sum(len(v) for _, v in pairs) / max(1, len(pairs)))


def projected(rows: Any, json_step: bool) -> Any:
    """The bench's projection of Kafka rows: ``key`` and ``value`` as they are, or (with
    ``json_step``) ``value`` parsed as a page view and written back as JSON of three fields."""
    from pyspark.sql import functions as F

    if not json_step:
        return rows.select("key", "value")
    text = F.col("value").cast("string")
    return rows.select(
        "key",
        F.to_json(
            F.struct(
                F.get_json_object(text, "$.app").alias("app"),
                F.get_json_object(text, "$.user_id").alias("user_id"),
                F.get_json_object(text, "$.ts").alias("ts"),
            )
        ).alias("value"),
    )


def stream_reader(spark: Any, fmt: str, *, servers: str, topic: str, per_trigger: int) -> Any:
    """``topic`` read from its start by ``fmt`` (ours or Spark's ``kafka``), the same
    options on both, ``maxOffsetsPerTrigger`` ``per_trigger``."""
    return (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
    )


def copy(
    *,
    spark: Any,
    fmt: str,
    servers: str,
    topic: str,
    out: str,
    per_trigger: int,
    json_step: bool,
    checkpoint: Path,
    source_client: str = "confluent",
    progress: list[dict[str, Any]] | None = None,
) -> float:
    """The query's wall time (s); ``progress``: filled with its batches' progress
    events (``durationMs`` per phase), for the profile's timeline."""
    reader = stream_reader(spark, fmt, servers=servers, topic=topic, per_trigger=per_trigger)
    if fmt == OURS:
        reader = reader.option("kafka.client", source_client)
    writer = (
        projected(reader.load(), json_step)
        .writeStream.format(fmt)
        .option("kafka.bootstrap.servers", servers)
        .option("topic", out)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    if fmt == OURS:
        writer = writer.option("kafka.client", "confluent").option(
            "delivery", "exactly-once-transactions"
        )
    started = time.monotonic()
    query = writer.start()
    query.awaitTermination()
    seconds = time.monotonic() - started
    if progress is not None:
        progress.extend(json.loads(p.json) for p in query.recentProgress)
    if query.exception() is not None:
        raise RuntimeError(f"bench k2k shapes {out} failed: {query.exception()}")
    return seconds


def steady(
    *,
    spark: Any,
    servers: str,
    topic: str,
    out: str,
    records: int,
    per_trigger: int,
    json_step: bool,
    checkpoint: Path,
    skip: int = 2,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Ours' steady exactly-once rate, the figure to set beside Quix's steady phase: a
    long-running query (micro-batches back to back, ``maxOffsetsPerTrigger``
    ``per_trigger``) over the ``records`` of ``topic``, stopped once it has read them all;
    the first ``skip`` batches (the query's start, the first transactions, the Python
    workers' imports) are left out. The rate is the other batches' records over the time
    from the start of the first of them to the end of the last (their progress events'
    ``timestamp`` plus ``triggerExecution``), as Quix's is its first to last record."""
    reader = stream_reader(
        spark, OURS, servers=servers, topic=topic, per_trigger=per_trigger
    ).option("kafka.client", "confluent")
    query = (
        projected(reader.load(), json_step)
        .writeStream.format(OURS)
        .option("kafka.bootstrap.servers", servers)
        .option("topic", out)
        .option("checkpointLocation", str(checkpoint))
        .option("kafka.client", "confluent")
        .option("delivery", "exactly-once-transactions")
        .start()
    )
    started = time.monotonic()
    try:
        while True:
            events = [json.loads(p.json) for p in query.recentProgress]
            if sum(int(e["numInputRows"]) for e in events) >= records:
                break
            if query.exception() is not None:
                raise RuntimeError(f"bench k2k steady {out} failed: {query.exception()}")
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"bench k2k steady {out}: not done in {timeout_s:.0f} s")
            time.sleep(0.5)
    finally:
        query.stop()
    rate = steady_rate(events, skip=skip, out=out)
    return {**rate, "per_trigger": per_trigger, "json": json_step}


def steady_rate(events: Sequence[dict[str, Any]], *, skip: int, out: str = "") -> dict[str, Any]:
    """The steady figures of a query's progress events (:func:`steady`): the batches that
    read records, the first ``skip`` left out; the others' records over the time from the
    start of the first of them to the end of the last."""
    from datetime import datetime

    batches = [e for e in events if int(e["numInputRows"]) > 0]
    counted = batches[skip:]
    if not counted:
        raise RuntimeError(f"bench k2k steady {out}: {len(batches)} batches, none after {skip}")

    def start_s(event: dict[str, Any]) -> float:
        return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()

    first = start_s(counted[0])
    last = start_s(counted[-1]) + int(counted[-1]["durationMs"]["triggerExecution"]) / 1000
    rows = sum(int(e["numInputRows"]) for e in counted)
    return {
        "records": sum(int(e["numInputRows"]) for e in batches),
        "batches": len(batches),
        "skipped_batches": skip,
        "steady_records": rows,
        "steady_s": round(last - first, 3),
        "steady_rps": round(rows / (last - first)),
    }


def split(events: Sequence[dict[str, Any]], *, seconds: float, out: str = "") -> dict[str, Any]:
    """A short query's wall time split in two: ``start_s``, the wall time less the
    batches after the first (the query's start, its first batch, and its stop), and
    ``after_first_rps``, the records of those later batches over their time
    (:func:`steady_rate`, first batch left out). A query of one batch has no later
    part: its rate is then 0."""
    batches = [e for e in events if int(e["numInputRows"]) > 0]
    if len(batches) < 2:
        return {"start_s": round(seconds, 3), "after_first_rps": 0}
    rest = steady_rate(events, skip=1, out=out)
    return {
        "start_s": round(seconds - float(rest["steady_s"]), 3),
        "after_first_rps": rest["steady_rps"],
    }


def _count(spark: Any, servers: str, topic: str) -> int:
    return int(
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
        .load()
        .count()
    )


def measure(
    *,
    spark: Any,
    servers: str,
    workdir: Path,
    partitions: int,
    shapes: Sequence[str] = SHAPES,
    repeat: int = 1,
    scale: float = 1.0,
) -> list[dict[str, Any]]:
    """One row per shape and transformation: ours' and Spark's best seconds of
    ``repeat`` alternating runs, records/s and the ratio ours/Spark's."""
    from spark_chkpt.kafka.client.topics import create_topic

    rows: list[dict[str, Any]] = []
    for shape in shapes:
        records = max(1_000, int(RECORDS[shape] * scale))
        topic = f"shape-{shape}"
        size = fill(
            servers=servers, topic=topic, shape=shape, records=records, partitions=partitions
        )
        per_trigger = max(1, records // 3)
        for json_step in (False, True):
            best: dict[str, float] = {}
            after_first: dict[str, dict[str, Any]] = {}
            for round_no in range(repeat + 1):  # round 0: warm-up of both, not counted
                order = (OURS, "kafka") if round_no % 2 else ("kafka", OURS)
                for fmt in order:
                    out = f"{topic}-{'json' if json_step else 'copy'}-{fmt}-{round_no}"
                    create_topic(bootstrap_servers=servers, name=out, partitions=partitions)
                    events: list[dict[str, Any]] = []
                    seconds = copy(
                        spark=spark,
                        fmt=fmt,
                        servers=servers,
                        topic=topic,
                        out=out,
                        per_trigger=per_trigger,
                        json_step=json_step,
                        checkpoint=workdir / f"chk-{out}",
                        progress=events,
                    )
                    copied = _count(spark, servers, out)
                    exact = fmt == OURS
                    if copied < records or (exact and copied != records):
                        raise RuntimeError(f"bench k2k shapes: {out} holds {copied} of {records}")
                    if round_no and (fmt not in best or seconds < best[fmt]):
                        best[fmt] = seconds
                        after_first[fmt] = split(events, seconds=seconds, out=out)
            ours, spark_s = best[OURS], best["kafka"]
            mine, theirs = after_first[OURS], after_first["kafka"]
            row = {
                "shape": shape,
                "value_bytes": size,
                "json": json_step,
                "records": records,
                "ours_s": round(ours, 3),
                "spark_s": round(spark_s, 3),
                "ours_rps": round(records / ours),
                "spark_rps": round(records / spark_s),
                "ratio": round(spark_s / ours, 3),
                # The same best runs split: the query's start and first batch, then the
                # other batches' rate (the steady part of a short query).
                "ours_start_s": mine["start_s"],
                "spark_start_s": theirs["start_s"],
                "ours_after_first_rps": mine["after_first_rps"],
                "spark_after_first_rps": theirs["after_first_rps"],
                "after_first_ratio": round(
                    mine["after_first_rps"] / max(1, theirs["after_first_rps"]), 3
                ),
            }
            print(f"[bench] k2k shape {json.dumps(row)}", flush=True)
            rows.append(row)
    return rows


def report_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "Kafka -> Kafka by shape: chkpt (librdkafka, exactly once via transactions) "
        "/ Spark kafka -> kafka (at least once)",
        f"{'shape':<8}{'bytes':>7}{'json':>6}{'records':>9}{'ours rec/s':>12}"
        f"{'Spark rec/s':>13}{'ours/Spark':>12}{'start s ours/Spark':>20}"
        f"{'after 1st ours/Spark':>22}",
    ]
    for r in rows:
        start = f"{r.get('ours_start_s', 0):.2f} / {r.get('spark_start_s', 0):.2f}"
        lines.append(
            f"{r['shape']:<8}{r['value_bytes']:>7}{'yes' if r['json'] else 'no':>6}"
            f"{r['records']:>9}{r['ours_rps']:>12,}{r['spark_rps']:>13,}{r['ratio']:>12.2f}"
            f"{start:>20}{r.get('after_first_ratio', 0):>22.2f}"
        )
    return lines
