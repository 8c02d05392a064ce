"""Benchmark: chkpt-kafka → chkpt-delta against the raw client, in one run on one data set.

    make bench                     # or: spark-chkpt bench [--records N] [--partitions P]

On the embedded broker, with the same records (page-view JSON, about 200 bytes):

(a) a bare kafka-python consumer drains the topic (one thread, what the client costs);
(b) the Kafka → Delta job, exactly once, ``Trigger.AvailableNow``;
(c) the same with ``alignment=none`` and the snapshot store off (``retainedSnapshots=0``):
    what the snapshot machinery costs on top ((b) and (c) alternate ``--repeat`` times
    after a warm-up query; the fastest run of each counts);
(d) ``deltalake.write_deltalake`` of (b)'s rows alone (what delta-rs costs).

It prints records/s of each, the ratios (b)/(a) and (b)/(c), the driver's commit
latency p50/p99 per batch (from the snapshot records in the Delta commits), and the
peak resident memory of Spark's Python workers. Quote the ratios: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Result:
    records: int
    partitions: int
    per_trigger: int
    seconds: dict[str, float] = field(default_factory=dict)
    rate: dict[str, float] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    commit_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    worker_peak_rss_mb: float | None = None
    breakdown_ms: dict[str, dict[str, int]] = field(default_factory=dict)


def _drain_raw(servers: str, topic: str, ends: dict[Any, int]) -> int:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=servers, enable_auto_commit=False, group_id=None, max_poll_records=10_000
    )
    ktps = [KTP(tp.topic, tp.partition) for tp in ends]
    consumer.assign(ktps)
    for ktp in ktps:
        consumer.seek(ktp, 0)
    count = 0
    remaining = {KTP(tp.topic, tp.partition): end for tp, end in ends.items() if end > 0}
    while remaining:
        for ktp, records in consumer.poll(timeout_ms=1000).items():
            count += len(records)
            if ktp in remaining and consumer.position(ktp) >= remaining[ktp]:
                del remaining[ktp]
    consumer.close()
    return count


def _worker_peak_rss_mb() -> float | None:
    """Largest VmHWM (peak resident set) of Spark's Python worker processes."""
    peak = None
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"pyspark.daemon" not in cmdline and b"pyspark.worker" not in cmdline:
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    kb = int(line.split()[1])
                    peak = max(peak or 0.0, kb / 1024)
        except OSError:
            continue
    return peak


def _commit_latencies(table: Path) -> tuple[list[float], int]:
    from deltalake import DeltaTable

    from spark_chkpt.coordinator import SNAPSHOT_KEY

    latencies = []
    for entry in DeltaTable(str(table)).history():
        if SNAPSHOT_KEY in entry:
            latencies.append(float(json.loads(entry[SNAPSHOT_KEY])["commit_ms"]))
    return latencies, len(latencies)


def _pipeline(
    spark: Any,
    servers: str,
    topic: str,
    workdir: Path,
    name: str,
    per_trigger: int,
    extra: dict[str, str],
) -> tuple[float, dict[str, int]]:
    """Run one availableNow query; its wall time and Spark's per-phase totals (ms)."""
    from spark_chkpt.generator import PAGE_VIEW_SCHEMA_DDL
    from spark_chkpt.jobs.kafka_to_delta import start

    settings = {
        "source.kafka.bootstrap.servers": servers,
        "source.subscribe": topic,
        "source.startingOffsets": "earliest",
        "source.maxOffsetsPerTrigger": str(per_trigger),
        "sink.path": str(workdir / name),
        "sink.checkpointLocation": str(workdir / f"chk-{name}"),
        "job.schema": PAGE_VIEW_SCHEMA_DDL,
        "job.trigger": "availableNow",
        "job.queryName": f"bench_{name}",
        **extra,
    }
    started = time.monotonic()
    query = start(spark, settings)
    query.awaitTermination()
    elapsed = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"bench pipeline {name} failed: {query.exception()}")
    totals: dict[str, int] = {}
    for progress in query.recentProgress:
        for phase, ms in (progress["durationMs"] or {}).items():
            totals[phase] = totals.get(phase, 0) + int(ms)
    totals["outside_triggers"] = round(elapsed * 1000) - totals.get("triggerExecution", 0)
    return elapsed, totals


def run(
    *, records: int, partitions: int, per_trigger: int, workdir: Path, repeat: int = 2
) -> Result:
    from deltalake import DeltaTable, write_deltalake

    from spark_chkpt.broker import EmbeddedBroker
    from spark_chkpt.config import SourceConfig
    from spark_chkpt.generator import produce_page_views
    from spark_chkpt.metrics import percentile
    from spark_chkpt.offset_reader import OffsetReader
    from spark_chkpt.session import build_session
    from spark_chkpt.topics import create_topic

    result = Result(records=records, partitions=partitions, per_trigger=per_trigger)
    with EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers
        for topic, count in (("warmup", 2_000), ("bench", records)):
            create_topic(bootstrap_servers=servers, name=topic, partitions=partitions)
            produce_page_views(
                bootstrap_servers=servers, topic=topic, first=0, count=count, spread_over=partitions
            )
        reader = OffsetReader(
            config=SourceConfig.from_options(
                {"kafka.bootstrap.servers": servers, "subscribe": "bench"}
            ),
            client_id="bench",
        )
        ends = reader.latest(reader.partitions())
        reader.close()
        print(f"[bench] {records} records over {partitions} partitions on {servers}", flush=True)

        started = time.monotonic()
        drained = _drain_raw(servers, "bench", ends)
        result.seconds["a_raw_consumer"] = time.monotonic() - started
        if drained != records:
            raise RuntimeError(f"raw consumer read {drained} of {records} records")

        spark = build_session(
            app_name="spark-chkpt-bench",
            master="local[*]",
            conf={
                "spark.sql.shuffle.partitions": str(partitions),
                "spark.ui.showConsoleProgress": "false",
                "spark.python.worker.reuse": "true",
            },
        )
        spark.sparkContext.setLogLevel("ERROR")
        # Warm-up: JVM, Python workers, imports, so neither measured run pays for them.
        _pipeline(spark, servers, "warmup", workdir, "warmup", per_trigger, {})
        # (c) and (b) alternate, each `repeat` times on fresh tables; the fastest counts.
        variants = {
            "c_no_snapshots": ("c", {"source.alignment": "none", "sink.retainedSnapshots": "0"}),
            "b_exactly_once": ("b", {}),
        }
        for round_no in range(repeat):
            for key, (name, extra) in variants.items():
                table = name if round_no == 0 else f"{name}{round_no}"
                seconds, phases = _pipeline(
                    spark, servers, "bench", workdir, table, per_trigger, extra
                )
                if key not in result.seconds or seconds < result.seconds[key]:
                    result.seconds[key] = seconds
                    result.breakdown_ms[key] = phases
        result.worker_peak_rss_mb = _worker_peak_rss_mb()
        spark.stop()

    rows = DeltaTable(str(workdir / "b")).to_pyarrow_table()
    if rows.num_rows != records:
        raise RuntimeError(f"pipeline (b) wrote {rows.num_rows} of {records} rows")
    started = time.monotonic()
    write_deltalake(str(workdir / "d"), rows)
    result.seconds["d_write_deltalake"] = time.monotonic() - started

    for name, seconds in result.seconds.items():
        result.rate[name] = round(records / seconds)
    result.ratios["b/a"] = round(
        result.seconds["a_raw_consumer"] / result.seconds["b_exactly_once"], 3
    )
    result.ratios["b/c"] = round(
        result.seconds["c_no_snapshots"] / result.seconds["b_exactly_once"], 3
    )
    result.ratios["snapshot_overhead"] = round(1 - result.ratios["b/c"], 3)
    for name in ("b", "c"):
        latencies, batches = _commit_latencies(workdir / name)
        result.batches[name] = batches
        result.commit_ms[name] = {
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
        }
    return result


def report(result: Result) -> str:
    names = {
        "a_raw_consumer": "(a) raw kafka-python consumer",
        "b_exactly_once": "(b) chkpt-kafka -> chkpt-delta, exactly once",
        "c_no_snapshots": "(c) same, alignment=none, no snapshot store",
        "d_write_deltalake": "(d) write_deltalake of the same rows",
    }
    lines = [f"{'run':<48}{'seconds':>9}{'records/s':>12}"]
    for key, label in names.items():
        lines.append(f"{label:<48}{result.seconds[key]:>9.2f}{result.rate[key]:>12,}")
    lines.append(
        f"ratio (b)/(a) = {result.ratios['b/a']:.2f}   "
        f"ratio (b)/(c) = {result.ratios['b/c']:.2f}   "
        f"snapshot overhead 1-(b)/(c) = {result.ratios['snapshot_overhead']:.1%}"
    )
    for name in ("b", "c"):
        ms = result.commit_ms[name]
        lines.append(
            f"driver commit latency ({name}, {result.batches[name]} batches): "
            f"p50 {ms['p50']} ms, p99 {ms['p99']} ms"
        )
    for key in ("b_exactly_once", "c_no_snapshots"):
        phases = result.breakdown_ms.get(key, {})
        shown = ", ".join(
            f"{k} {v}"
            for k, v in sorted(phases.items())
            if k in ("latestOffset", "addBatch", "walCommit", "commitOffsets", "outside_triggers")
        )
        lines.append(f"Spark phases of ({key[0]}), ms over all batches: {shown}")
    lines.append(
        f"peak RSS of a Python worker: {result.worker_peak_rss_mb:.0f} MB"
        if result.worker_peak_rss_mb
        else "peak RSS of Python workers: not found"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="spark-chkpt bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--per-trigger", type=int, default=100_000, help="maxOffsetsPerTrigger of (b) and (c)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="runs of (b) and (c), alternating; the fastest of each counts",
    )
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=None, help="also write the result to this file")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spark-chkpt-bench-"))
    result = run(
        records=args.records,
        partitions=args.partitions,
        per_trigger=args.per_trigger,
        workdir=workdir,
    )
    print(report(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2))
    return 0
