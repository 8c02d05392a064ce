"""The fixed cost of one micro-batch: many small batches, each phase's median per batch.

The Kafka → Delta job reads ``batches`` × ``per_batch`` records with
``maxOffsetsPerTrigger=per_batch`` in a warm session. With so few records per batch the
time is what every batch pays whatever its size: Spark's planning round trip to the
source (``latestOffset``), the offset log (``walCommit``), running the batch
(``addBatch``: task launch, Python workers, the read and staging, the driver's commit),
the commit log (``commitOffsets``); and, inside ``addBatch``, the driver's Delta commit
as the snapshot records measure it (``commit_ms``). :mod:`bench.batch_anatomy` then
replays our code of such a batch in this process and names each millisecond of the
median batch as Spark's or ours (``anatomy``: rows of ms, what, whose).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

PHASES = ("triggerExecution", "latestOffset", "walCommit", "addBatch", "commitOffsets")


def fill(*, servers: str, topic: str, records: int, partitions: int) -> None:
    """Create ``topic`` and produce the benchmark's page views into it."""
    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.testing.generator import produce_page_views

    create_topic(bootstrap_servers=servers, name=topic, partitions=partitions)
    produce_page_views(
        bootstrap_servers=servers, topic=topic, first=0, count=records, spread_over=partitions
    )


def measure(
    *,
    spark: Any,
    servers: str,
    workdir: Path,
    partitions: int,
    client: str,
    batches: int = 20,
    per_batch: int = 1_000,
) -> dict[str, Any]:
    from deltalake import DeltaTable

    from bench import batch_anatomy
    from bench.query import run_query
    from spark_chkpt.snapshot.record import SNAPSHOT_KEY

    topic = "bench-small"
    fill(servers=servers, topic=topic, records=batches * per_batch, partitions=partitions)
    settings = {
        "source.kafka.bootstrap.servers": servers,
        "source.subscribe": topic,
        "source.startingOffsets": "earliest",
        "source.maxOffsetsPerTrigger": str(per_batch),
        "source.kafka.client": client,
    }
    seconds, _, per_batch_ms = run_query(
        spark=spark, settings=settings, workdir=workdir, name="small"
    )
    with_data = [ms for ms in per_batch_ms if ms.get("addBatch") is not None]
    medians: dict[str, float] = {
        phase: statistics.median(ms.get(phase, 0) for ms in with_data) for phase in PHASES
    }
    commits = [
        float(json.loads(entry[SNAPSHOT_KEY])["commit_ms"])
        for entry in DeltaTable(str(workdir / "small")).history()
        if SNAPSHOT_KEY in entry
    ]
    medians["driver commit_ms"] = round(statistics.median(commits), 1) if commits else 0.0
    spark_ms = batch_anatomy.medians(per_batch_ms)
    cores = spark.sparkContext.defaultParallelism
    ours = batch_anatomy.replay(
        servers=servers,
        topic=topic,
        table=workdir / "small",
        scratch=workdir / "small-replay",
        per_batch=per_batch,
        batches=batches,
        client=client,
        task_slots=cores,
    )
    ours["driver_commit"] = medians["driver commit_ms"]
    return {
        "batches": len(with_data),
        "per_batch": per_batch,
        "seconds": round(seconds, 2),
        "median_ms": medians,
        "spark_ms": spark_ms,
        "ours_ms": {k: round(v, 1) for k, v in ours.items()},
        "cores": cores,
        "anatomy": batch_anatomy.anatomy(spark_ms=spark_ms, ours=ours, cores=cores),
    }
