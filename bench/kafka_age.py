"""Restart and first-batch planning of a ``chkpt-kafka`` reader against the Kafka side's
age: a barrier topic of 100,000 snapshots against a young one, no Spark.

    python -m bench --kafka-age-only --snapshots 1000,100000
    python -m bench.kafka_age --snapshots 1000,100000 --profile /tmp/age.prof

Each topic (``--partitions`` partitions) holds what a ``chkpt-kafka`` sink writes, built
cheaply with the project's own record types instead of running the batches: for each old
snapshot a barrier in every partition and a ``complete`` entry in the control topic
(the sink's :class:`~spark_chkpt.alignment.barrier.IndexEntry` records, keys and values),
then a tail of ``--tail`` snapshots of page views. The young topic holds the tail alone.

A first reader life starts right before the tail and plans one batch (Spark writes its
end, with the batch's report, to the offset log): untimed. Then, timed, ``--repeat``
times per topic: a new :class:`~spark_chkpt.kafka.source.planner.SourcePlanner` (a
restarted query) plans the next batch from that end: ``latestOffset`` (the barrier index
read, the cut) and the read tasks, as Spark calls them after a restart. The ratio is each
topic's median over the young topic's, in one run on one broker.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.broker import kafka_broker

SNAPSHOTS = (1_000, 100_000)
TAIL = 20  # snapshots of real records at the end of each topic
PER_SNAPSHOT = 25  # records per partition per tail snapshot


def fill(*, servers: str, topic: str, old: int, partitions: int) -> dict[int, int]:
    """``topic`` and its control topic: ``old`` snapshots of barriers only, then the tail;
    returns the offsets per partition where the tail starts."""
    from kafka import KafkaProducer

    from spark_chkpt.alignment.barrier import (
        ATTEMPT_HEADER,
        BARRIER_KEY,
        Barrier,
        IndexEntry,
        control_topic_for,
    )
    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.kafka.control.topic import ensure_control_topic

    create_topic(bootstrap_servers=servers, name=topic, partitions=partitions)
    control = control_topic_for(topic)
    ensure_control_topic(bootstrap_servers=servers, name=control)
    producer = KafkaProducer(
        bootstrap_servers=servers.split(","), linger_ms=20, batch_size=512 * 1024, acks="all"
    )
    # The sink writes each entry on its own (write_entry waits for its acknowledgement):
    # one record batch per entry, which a reader seeking to an offset decodes alone.
    # Batched entries would make a seek decode the whole batch around the offset.
    entries = KafkaProducer(
        bootstrap_servers=servers.split(","), linger_ms=0, batch_size=1, acks="all"
    )
    app = "bench-upstream"
    at = dict.fromkeys(range(partitions), 0)  # next offset per partition (a fresh topic)
    tail_start: dict[int, int] = {}

    def snapshot(n: int, records: int) -> None:
        tags = tuple(f"{app}.{n}.{p}.0" for p in range(partitions))
        for p in range(partitions):
            for i in range(records):
                producer.send(
                    topic,
                    key=b"k%d" % i,
                    value=b'{"page":"/p%d","n":%d}' % (i, n),
                    partition=p,
                    headers=[(ATTEMPT_HEADER, tags[p].encode())],
                )
            at[p] += records
        marker = Barrier(app_id=app, snapshot_id=n, attempts=tags)
        for p in range(partitions):
            producer.send(
                topic, key=BARRIER_KEY, value=marker.value(), partition=p, headers=Barrier.headers()
            )
        entry = IndexEntry(
            kind="complete",
            app_id=app,
            snapshot_id=n,
            topic=topic,
            attempts=tags,
            positions=dict(at),
        )
        for p in range(partitions):
            at[p] += 1
        entries.send(control, key=entry.key(), value=entry.value(), partition=0)

    try:
        for n in range(old):
            snapshot(n, 0)
        tail_start = dict(at)
        for n in range(old, old + TAIL):
            snapshot(n, PER_SNAPSHOT)
        producer.flush()
        entries.flush()
    finally:
        producer.close()
        entries.close()
    return tail_start


def _config(*, servers: str, topic: str, starting: str, per_batch: int) -> Any:
    from spark_chkpt.kafka.source.options import SourceConfig

    return SourceConfig.from_options(
        {
            "kafka.bootstrap.servers": servers,
            "subscribe": topic,
            "startingOffsets": starting,
            "maxOffsetsPerTrigger": str(per_batch),
        },
        streaming=True,
    )


def first_life(*, servers: str, topic: str, tail_start: dict[int, int], per_batch: int) -> Any:
    """The query before its restart: starts where the tail starts, plans one batch;
    returns that batch's end (what the offset log holds)."""
    import json

    from spark_chkpt.kafka.source.planner import SourcePlanner

    starting = json.dumps({topic: {str(p): o for p, o in tail_start.items()}})
    planner = SourcePlanner(
        config=_config(servers=servers, topic=topic, starting=starting, per_batch=per_batch)
    )
    try:
        start = planner.initial_offsets()
        end = planner.latest_offset(start, max_rows=per_batch, read_all=False)
        if end == start:
            raise RuntimeError(f"kafka-age bench: no first batch on {topic}")
        planner.read_tasks(start, end)
        return end
    finally:
        planner.stop()


def restart(*, servers: str, topic: str, start: Any, per_batch: int) -> dict[str, float]:
    """A restarted reader's first batch from ``start``: ms per call."""
    from spark_chkpt.kafka.source.planner import SourcePlanner

    began = time.perf_counter()
    planner = SourcePlanner(
        config=_config(servers=servers, topic=topic, starting="earliest", per_batch=per_batch)
    )
    try:
        end = planner.latest_offset(start, max_rows=per_batch, read_all=False)
        planned = time.perf_counter()
        if end == start:
            raise RuntimeError(f"kafka-age bench: no batch after the restart on {topic}")
        tasks = planner.read_tasks(start, end)
        done = time.perf_counter()
        if not tasks:
            raise RuntimeError(f"kafka-age bench: no read task on {topic}")
        held = len(planner._indexes[topic].entries)
    finally:
        planner.stop()
    return {
        "latest_ms": (planned - began) * 1000,
        "tasks_ms": (done - planned) * 1000,
        "batch_ms": (done - began) * 1000,
        "held": held,
    }


def measure(
    *,
    servers: str,
    snapshots: Sequence[int],
    partitions: int = 4,
    repeat: int = 3,
    profile: Any = None,
) -> list[dict[str, Any]]:
    """A row for the young topic (the tail alone) and one per aged size; ``profile`` (a
    ``cProfile.Profile``) runs during the oldest topic's timed restarts."""
    per_batch = 5 * partitions * PER_SNAPSHOT
    sizes = [0, *snapshots]
    starts = {}
    for old in sizes:
        topic = f"age-{old}-{int(time.time())}"
        print(f"[bench] kafka-age: writing {old} old snapshots to {topic}", flush=True)
        tail = fill(servers=servers, topic=topic, old=old, partitions=partitions)
        starts[old] = (
            topic,
            first_life(servers=servers, topic=topic, tail_start=tail, per_batch=per_batch),
        )
    timed: dict[int, list[dict[str, float]]] = {old: [] for old in sizes}
    for _ in range(repeat):  # interleaved, so load drifts hit every size alike
        for old in sizes:
            topic, start = starts[old]
            profiling = profile is not None and old == max(sizes)
            if profiling:
                profile.enable()
            timed[old].append(
                restart(servers=servers, topic=topic, start=start, per_batch=per_batch)
            )
            if profiling:
                profile.disable()
    young = statistics.median(t["batch_ms"] for t in timed[0])
    rows = []
    for old in sizes:
        median = statistics.median(t["batch_ms"] for t in timed[old])
        rows.append(
            {
                "snapshots": old + TAIL,
                "restarts": len(timed[old]),
                "latest_ms_p50": round(statistics.median(t["latest_ms"] for t in timed[old]), 1),
                "tasks_ms_p50": round(statistics.median(t["tasks_ms"] for t in timed[old]), 1),
                "batch_ms_p50": round(median, 1),
                "batch_ms_max": round(max(t["batch_ms"] for t in timed[old]), 1),
                "entries_held": int(timed[old][-1]["held"]),
                "ratio": round(median / young, 2),
            }
        )
    return rows


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "**Restart and first-batch planning against the Kafka side's age (no Spark)**",
        "",
        "| snapshots | restarts | latestOffset ms | read tasks ms | restart + batch ms p50 "
        "| max | index entries held | × young |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['snapshots']:,} | {r['restarts']} | {r['latest_ms_p50']} | "
            f"{r['tasks_ms_p50']} | {r['batch_ms_p50']} | {r['batch_ms_max']} | "
            f"{r['entries_held']:,} | {r['ratio']} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_age")
    parser.add_argument("--snapshots", default=",".join(str(c) for c in SNAPSHOTS))
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--profile", default=None, help="cProfile stats of the oldest restarts")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    import cProfile

    profile = cProfile.Profile() if args.profile else None
    with kafka_broker(args.bootstrap_servers) as servers:
        rows = measure(
            servers=servers,
            snapshots=[int(c) for c in args.snapshots.split(",") if c.strip()],
            partitions=args.partitions,
            repeat=args.repeat,
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
