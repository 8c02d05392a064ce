"""Kafka → Kafka exactly once: ``chkpt-kafka`` → ``chkpt-kafka`` with barriers, then the
downstream aligned read that counts the output.

With ``delivery="exactly-once-transactions"`` the sink also commits each batch through
Kafka transactions, the row to compare with barrier mode on the same sink client.

The upstream query copies the benchmark topic (key and value) into a new topic with
``Trigger.AvailableNow``: the sink's producers tag each record with its task attempt and
the driver writes a barrier per batch. The downstream query reads that topic with
``alignment=aligned`` (the default) into ``noop``; its input rows must be exactly the
benchmark's records, each once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class KafkaToKafka:
    source_client: str
    sink_client: str
    upstream_s: float
    downstream_s: float
    upstream_batches: int
    downstream_rows: int
    delivery: str = "barriers"  # or "exactly-once-transactions" (with barriers too)


def _sum_rows(query: Any) -> int:
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def run(
    *,
    spark: Any,
    servers: str,
    topic: str,
    records: int,
    partitions: int,
    per_trigger: int,
    workdir: Path,
    name: str,
    source_client: str,
    sink_client: str,
    delivery: str = "barriers",
) -> KafkaToKafka:
    from spark_chkpt.kafka.client.topics import create_topic

    out = f"bench-{name}-out"
    create_topic(bootstrap_servers=servers, name=out, partitions=partitions)
    writer = (
        spark.readStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .option("kafka.client", source_client)
        .load()
        .select("key", "value")
        .writeStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", out)
        .option("checkpointLocation", str(workdir / f"chk-{name}-up"))
        .queryName(f"bench_{name}_up")
        .trigger(availableNow=True)
    )
    # Always named: the sink's default is librdkafka, so a kafka-python row must say so.
    writer = writer.option("kafka.client", sink_client)
    if delivery != "barriers":  # barriers too: the aligned downstream read counts the rows
        writer = writer.option("delivery", delivery).option("barriers", "true")
    started = time.monotonic()
    query = writer.start()
    query.awaitTermination()
    upstream_s = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"bench {name} upstream failed: {query.exception()}")
    upstream_batches = len(query.recentProgress)

    downstream = (
        spark.readStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", out)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .option("kafka.client", source_client)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(workdir / f"chk-{name}-down"))
        .queryName(f"bench_{name}_down")
        .trigger(availableNow=True)
    )
    started = time.monotonic()
    query = downstream.start()
    query.awaitTermination()
    downstream_s = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"bench {name} downstream failed: {query.exception()}")
    rows = _sum_rows(query)
    if rows != records:
        raise RuntimeError(f"bench {name}: the aligned downstream read {rows} of {records}")
    return KafkaToKafka(
        source_client=source_client,
        sink_client=sink_client,
        upstream_s=upstream_s,
        downstream_s=downstream_s,
        upstream_batches=upstream_batches,
        downstream_rows=rows,
        delivery=delivery,
    )
