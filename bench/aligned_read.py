"""An aligned downstream read of a barrier topic, per core, against a plain topic's read.

Every aligned downstream job reads a topic a ``chkpt-kafka`` sink wrote: each record
tagged with its upstream task attempt (``chkpt.attempt``), a barrier record per partition
at every upstream snapshot. This measures the source's read task alone (no Spark: the
executor's decode, record filters and aligner), in records per CPU-second of this
process (``time.process_time``, every thread: a loaded machine changes it less than a
wall-clock rate), best of ``rounds`` (3), the runs taking turns:

- ``plain``: the same records (keys, values, partitions) on a topic without tags or
  barriers, ``decode=columns``: the columnar path's figure, the target's reference;
- ``barriers``: the barrier topic, ``decode=columns``, planned by the driver's own plan
  (:func:`spark_chkpt.alignment.cut.plan_topic`, aligned, from the index entries), all
  partitions in one task (the aligner between them);
- ``barriers-records``: the same with ``decode=records``, the record-by-record path every
  barrier topic took before its columns (the before figure, in the same run).

Rows counted are data records (barriers are never rows). ``barriers/plain`` is the target
(≥ 0.8). ``make bench`` runs it on its broker; ``python -m bench --aligned-read-only`` or
``python -m bench.aligned_read`` alone (bench/broker.py's Kafka broker, or ``--bootstrap-servers``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from bench.broker import kafka_broker

RUNS = ("plain", "barriers", "barriers-records")


def fill(
    *, servers: str, topic: str, records: int, partitions: int, snapshot: int, tasks: int = 4
) -> tuple[dict[Any, int], dict[Any, int], list[Any]]:
    """Write ``topic`` (plain) and ``topic``-barriers (what a chkpt-kafka sink writes: the
    same records, tagged by ``tasks`` upstream attempts per snapshot, a barrier in every
    partition each ``snapshot`` records); their log ends, and the barrier topic's index
    entries."""
    from kafka import KafkaProducer

    from spark_chkpt.alignment.barrier import ATTEMPT_HEADER, BARRIER_KEY, Barrier, IndexEntry
    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.offsets import TopicPartition
    from spark_chkpt.testing.generator import PageViews

    marked = f"{topic}-barriers"
    for name in (topic, marked):
        create_topic(bootstrap_servers=servers, name=name, partitions=partitions)
    producer = KafkaProducer(
        bootstrap_servers=servers.split(","), linger_ms=20, batch_size=256 * 1024, acks="all"
    )
    entries: list[Any] = []
    app = "bench-upstream"
    attempts: list[str] = []
    try:
        for i, (key, value) in enumerate(PageViews(seed=1).events(0, records)):
            n = i // snapshot
            tag = f"{app}.{n}.{i % tasks}.0"
            if tag not in attempts:
                attempts.append(tag)
            producer.send(topic, key=key, value=value, partition=i % partitions)
            producer.send(
                marked,
                key=key,
                value=value,
                partition=i % partitions,
                headers=[(ATTEMPT_HEADER, tag.encode())],
            )
            if (i + 1) % snapshot == 0 or i + 1 == records:
                marker = Barrier(app_id=app, snapshot_id=n, attempts=tuple(attempts))
                sent = {
                    p: producer.send(
                        marked,
                        key=BARRIER_KEY,
                        value=marker.value(),
                        partition=p,
                        headers=Barrier.headers(),
                    )
                    for p in range(partitions)
                }
                producer.flush()
                entries.append(
                    IndexEntry(
                        kind="complete",
                        app_id=app,
                        snapshot_id=n,
                        topic=marked,
                        attempts=tuple(attempts),
                        positions={p: f.get(timeout=60).offset for p, f in sent.items()},
                    )
                )
                attempts = []
        producer.flush()
    finally:
        producer.close()
    plain_ends = {TopicPartition(topic, p): records // partitions for p in range(partitions)}
    for p in range(records % partitions):
        plain_ends[TopicPartition(topic, p)] += 1
    last = entries[-1].positions
    marked_ends = {TopicPartition(marked, p): last[p] + 1 for p in range(partitions)}
    return plain_ends, marked_ends, entries


def _read(servers: str, specs: list[Any], decode: str) -> int:
    from spark_chkpt.kafka.client.pool import ConsumerPool
    from spark_chkpt.kafka.source.fetcher import RangeFetcher
    from spark_chkpt.kafka.source.options import SourceConfig

    topic = specs[0].range.tp.topic
    config = SourceConfig.from_options(
        {"kafka.bootstrap.servers": servers, "subscribe": topic, "decode": decode},
        streaming=False,
    )
    pool = ConsumerPool()
    rows = 0
    try:
        with RangeFetcher(config=config, client_id="bench-aligned-read", pool=pool) as fetcher:
            for batch in fetcher.read_group(specs):
                rows += batch.num_rows
            if decode == "columns" and not fetcher._columnar:
                raise RuntimeError("aligned read bench: the columnar path did not run")
    finally:
        pool.close_all()
    return rows


def measure(
    *,
    servers: str,
    plain_ends: dict[Any, int],
    marked_ends: dict[Any, int],
    entries: list[Any],
    rounds: int = 3,
) -> dict[str, Any]:
    """Records per CPU-second (and per wall-second) of each run, the best of ``rounds``."""
    from spark_chkpt.alignment.cut import plan_topic
    from spark_chkpt.kafka.source.intake import ReadSpec
    from spark_chkpt.offsets import OffsetRange

    marked_topic = next(iter(marked_ends)).topic
    cut = plan_topic(
        topic=marked_topic,
        mode="aligned",
        start={tp: 0 for tp in marked_ends},
        latest=marked_ends,
        entries=entries,
        max_records=None,
    )
    specs = {
        "plain": [ReadSpec(range=OffsetRange(tp, 0, end)) for tp, end in plain_ends.items()],
        "barriers": [
            ReadSpec(range=OffsetRange(tp, 0, cut.end[tp]), markers=True, filter=cut.filters[tp])
            for tp in sorted(marked_ends)
        ],
    }
    records = sum(plain_ends.values())
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for run in RUNS:
            wall, cpu = time.perf_counter(), time.process_time()
            got = _read(
                servers,
                specs["plain" if run == "plain" else "barriers"],
                "records" if run == "barriers-records" else "columns",
            )
            cpu = time.process_time() - cpu
            wall = time.perf_counter() - wall
            if got != records:
                raise RuntimeError(f"aligned read bench: {run} read {got} of {records} records")
            if run not in best or cpu < best[run][0]:
                best[run] = (cpu, wall)
    per_core = {run: round(records / cpu) for run, (cpu, _) in best.items()}
    return {
        "records": records,
        "barriers": cut.barriers,
        "per_cpu_second": per_core,
        "per_second": {run: round(records / wall) for run, (_, wall) in best.items()},
        "barriers/plain": round(per_core["barriers"] / per_core["plain"], 2),
        "barriers-records/plain": round(per_core["barriers-records"] / per_core["plain"], 2),
        "barriers/barriers-records": round(per_core["barriers"] / per_core["barriers-records"], 2),
    }


def run(*, servers: str, records: int, partitions: int, snapshot: int) -> dict[str, Any]:
    """Fill both topics on ``servers`` and measure."""
    topic = f"bench-aligned-{int(time.time())}"
    plain_ends, marked_ends, entries = fill(
        servers=servers, topic=topic, records=records, partitions=partitions, snapshot=snapshot
    )
    return measure(servers=servers, plain_ends=plain_ends, marked_ends=marked_ends, entries=entries)


def report_lines(aligned: dict[str, Any]) -> list[str]:
    if not aligned:
        return []
    rates = aligned["per_cpu_second"]
    return [
        f"aligned read of a barrier topic per core ({aligned['records']:,} records, "
        f"{aligned['barriers']} barriers, records per CPU-second): plain topic decode=columns "
        f"{rates['plain']:,}, barrier topic decode=columns {rates['barriers']:,}, "
        f"record by record {rates['barriers-records']:,}; barriers/plain = "
        f"{aligned['barriers/plain']} (target >= 0.8; record by record "
        f"{aligned['barriers-records/plain']})"
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.aligned_read", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--snapshot", type=int, default=10_000, help="records per upstream snapshot"
    )
    parser.add_argument("--bootstrap-servers", default=None)
    args = parser.parse_args(argv)
    with kafka_broker(args.bootstrap_servers) as servers:
        aligned = run(
            servers=servers,
            records=args.records,
            partitions=args.partitions,
            snapshot=args.snapshot,
        )
    print("\n".join(report_lines(aligned)), flush=True)
    print(f"records per wall-second: {aligned['per_second']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
