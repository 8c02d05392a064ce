"""The driver's per-batch planning of the ``chkpt-kafka`` source against partitions, no
Spark: what the driver runs between two batches, timed on a real broker.

    python -m bench.planning                          # 1,000 partitions, its own broker
    python -m bench.planning --partitions 64,1000 --bootstrap-servers host:9092

For each partition count, two topics of ``records_per_partition`` page views per
partition: a plain one, and a barrier topic with its control topic (what a ``chkpt-kafka``
sink writes: each record tagged by its upstream attempt, a barrier in every partition each
``snapshot`` records and a complete entry per snapshot in the control topic). One
:class:`~spark_chkpt.kafka.source.planner.SourcePlanner` per topic (``kafka.group.id``
set, ``maxOffsetsPerTrigger`` a tenth of the topic) then plans the batches one after the
other as Spark calls it: ``latestOffset`` (the group commit of the last batch, partitions,
log ends, the barrier index and its cut), ``planInputPartitions`` (the read tasks) and
``commit``. A batch's time is those three calls; the first batch (clients connecting) is
given apart, the table shows the median and worst of the others.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

COUNTS = (1_000,)


def fill(*, servers: str, topic: str, partitions: int, records_per_partition: int) -> None:
    """``topic`` (plain) and ``topic``-barriers with its control topic and entries."""
    from kafka import KafkaProducer

    from bench.aligned_read import fill as fill_barriers
    from spark_chkpt.alignment.barrier import control_topic_for
    from spark_chkpt.kafka.control.topic import ensure_control_topic, write_entry

    records = partitions * records_per_partition
    _, _, entries = fill_barriers(
        servers=servers,
        topic=topic,
        records=records,
        partitions=partitions,
        snapshot=max(1, records // 10),
    )
    control = control_topic_for(f"{topic}-barriers")
    ensure_control_topic(bootstrap_servers=servers, name=control)
    producer = KafkaProducer(bootstrap_servers=servers.split(","), acks="all")
    try:
        for entry in entries:
            write_entry(producer, control_topic=control, entry=entry)
    finally:
        producer.close()


def batches(*, servers: str, topic: str, per_batch: int) -> Iterator[dict[str, float]]:
    """Plan ``topic`` from earliest batch after batch until its end; each batch's ms."""
    from spark_chkpt.kafka.source.options import SourceConfig
    from spark_chkpt.kafka.source.planner import SourcePlanner

    config = SourceConfig.from_options(
        {
            "kafka.bootstrap.servers": servers,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": str(per_batch),
            "kafka.group.id": f"bench-planning-{topic}",
        },
        streaming=True,
    )
    planner = SourcePlanner(config=config)
    try:
        start = planner.initial_offsets()
        while True:
            began = time.perf_counter()
            end = planner.latest_offset(start, max_rows=per_batch, read_all=False)
            planned = time.perf_counter()
            if end == start:
                return
            tasks = planner.read_tasks(start, end)
            split = time.perf_counter()
            planner.commit_group(end)
            done = time.perf_counter()
            if not tasks:
                raise RuntimeError(f"planning bench: no read task for {topic} {end}")
            yield {
                "latest_ms": (planned - began) * 1000,
                "tasks_ms": (split - planned) * 1000,
                "commit_ms": (done - split) * 1000,
                "batch_ms": (done - began) * 1000,
            }
            start = end
    finally:
        planner.stop()


def measure(
    *, servers: str, partitions: int, records_per_partition: int = 20, profile: Any = None
) -> list[dict[str, Any]]:
    """A row per topic kind (plain, barriers) for ``partitions`` partitions; ``profile``
    (a ``cProfile.Profile``) runs during the planning only."""
    topic = f"plan-p{partitions}"
    print(f"[bench] planning: filling {partitions} partitions", flush=True)
    fill(
        servers=servers,
        topic=topic,
        partitions=partitions,
        records_per_partition=records_per_partition,
    )
    per_batch = max(1, partitions * records_per_partition // 10)
    rows = []
    for kind, name in (("plain", topic), ("barriers", f"{topic}-barriers")):
        if profile is not None:
            profile.enable()
        timed = list(batches(servers=servers, topic=name, per_batch=per_batch))
        if profile is not None:
            profile.disable()
        rows.append(row(label=f"{partitions} partitions, {kind}", timed=timed))
    return rows


def row(*, label: str, timed: Sequence[dict[str, float]]) -> dict[str, Any]:
    """The first batch apart; median (and the worst) of the others, per call."""
    rest = timed[1:] or timed
    return {
        "label": label,
        "batches": len(timed),
        "first_ms": round(timed[0]["batch_ms"], 1) if timed else None,
        **{
            f"{key}_p50": round(statistics.median(t[key] for t in rest), 1)
            for key in ("latest_ms", "tasks_ms", "commit_ms", "batch_ms")
        },
        "batch_ms_max": round(max(t["batch_ms"] for t in rest), 1),
    }


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The rows as a Markdown table."""
    lines = [
        "**Driver planning per batch (no Spark)**",
        "",
        "| topic | batches | first ms | latestOffset ms | read tasks ms | commit ms "
        "| batch ms p50 | batch ms max |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['batches']} | {r['first_ms']} | {r['latest_ms_p50']} | "
            f"{r['tasks_ms_p50']} | {r['commit_ms_p50']} | {r['batch_ms_p50']} | "
            f"{r['batch_ms_max']} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.planning")
    parser.add_argument("--partitions", default=",".join(str(c) for c in COUNTS))
    parser.add_argument("--records-per-partition", type=int, default=20)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument(
        "--profile",
        default=None,
        help="write cProfile stats of the planning calls to this file (the figures then "
        "include the profiler's overhead: about twice the time)",
    )
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    import cProfile

    from bench.broker import kafka_broker

    rows: list[dict[str, Any]] = []
    profile = cProfile.Profile() if args.profile else None
    with kafka_broker(args.bootstrap_servers) as servers:
        for count in (int(c) for c in args.partitions.split(",") if c.strip()):
            rows += measure(
                servers=servers,
                partitions=count,
                records_per_partition=args.records_per_partition,
                profile=profile,
            )
    if profile is not None:
        profile.dump_stats(args.profile)
    print("\n".join(table_lines(rows)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
