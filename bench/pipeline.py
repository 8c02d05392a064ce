"""Benchmark: chkpt-kafka → chkpt-delta against the raw client, in one run on one data set.

    make bench                     # or: spark-chkpt bench [--records N] [--partitions P]

On the embedded broker, with the same records (page-view JSON, about 200 bytes):

(a) a bare consumer of the client the pipeline reads with (``--client``: kafka-python,
    the default, or confluent) drains the topic: one thread, what the client costs;
(b) the Kafka → Delta job, exactly once, ``Trigger.AvailableNow``;
(c) the same with ``alignment=none`` and the snapshot store off (``retainedSnapshots=0``):
    what the snapshot machinery costs on top;
(e) (b) with the executor prefetch buffer off (``prefetchRecords=0``): what it saves;
(d) ``deltalake.write_deltalake`` of (b)'s rows alone (what delta-rs costs).

(b), (c) and (e) alternate ``--repeat`` times (default 3, the order rotating each round)
after a warm-up query on the same data; the fastest run of each counts. It prints
records/s of each, the ratios (b)/(a), (b)/(c) and (b)/(e), the driver's commit latency
p50/p99 per batch (from the snapshot records in the Delta commits), and the peak
resident memory of Spark's Python workers. Quote the ratios: the machine is shared.
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
    client: str = "kafka-python"
    seconds: dict[str, float] = field(default_factory=dict)
    rate: dict[str, float] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    commit_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    worker_peak_rss_mb: float | None = None
    breakdown_ms: dict[str, dict[str, int]] = field(default_factory=dict)


def _drain_raw(servers: str, topic: str, ends: dict[Any, int], client: str) -> int:
    if client == "confluent":
        return _drain_raw_confluent(servers, topic, ends)
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


def _drain_raw_confluent(servers: str, topic: str, ends: dict[Any, int]) -> int:
    import confluent_kafka as ck

    consumer = ck.Consumer(
        {"bootstrap.servers": servers, "group.id": "bench-raw", "enable.auto.commit": False}
    )
    consumer.assign([ck.TopicPartition(tp.topic, tp.partition, 0) for tp in ends])
    remaining = {tp.partition: end for tp, end in ends.items() if end > 0}
    count = 0
    while remaining:
        messages = consumer.consume(num_messages=10_000, timeout=0.1)
        count += len(messages)
        for position in consumer.position([ck.TopicPartition(topic, p) for p in list(remaining)]):
            if position.offset >= remaining[position.partition]:
                del remaining[position.partition]
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

    from spark_chkpt.snapshot.delta_coordinator import SNAPSHOT_KEY

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
    from spark_chkpt.jobs.kafka_to_delta import start
    from spark_chkpt.local.generator import PAGE_VIEW_SCHEMA_DDL

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
    *,
    records: int,
    partitions: int,
    per_trigger: int,
    workdir: Path,
    repeat: int = 3,
    client: str = "kafka-python",
) -> Result:
    from deltalake import DeltaTable, write_deltalake

    from spark_chkpt.kafka.offset_reader import OffsetReader
    from spark_chkpt.kafka.source_options import SourceConfig
    from spark_chkpt.kafka.topics import create_topic
    from spark_chkpt.local.broker import EmbeddedBroker
    from spark_chkpt.local.generator import produce_page_views
    from spark_chkpt.session import build_session
    from spark_chkpt.snapshot.metrics import percentile

    result = Result(records=records, partitions=partitions, per_trigger=per_trigger, client=client)
    with EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers
        create_topic(bootstrap_servers=servers, name="bench", partitions=partitions)
        produce_page_views(
            bootstrap_servers=servers, topic="bench", first=0, count=records, spread_over=partitions
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

        raw = {"a_raw_consumer": client}
        if client != "kafka-python":
            raw["a_raw_kafka_python"] = "kafka-python"
        for key, raw_client in raw.items():
            started = time.monotonic()
            drained = _drain_raw(servers, "bench", ends, raw_client)
            result.seconds[key] = time.monotonic() - started
            if drained != records:
                raise RuntimeError(f"raw {raw_client} consumer read {drained} of {records}")

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
        # Warm-up on the same data: JVM start, the JIT (the C2 compiler alone took about 5
        # CPU-seconds during a cold 300k run), Python workers and imports, so that no
        # measured run pays for them and the figures are a long-running job's.
        chosen = {"source.kafka.client": client}
        _pipeline(spark, servers, "bench", workdir, "warmup", per_trigger, chosen)
        # (c), (e) and (b) alternate, each `repeat` times on fresh tables; the fastest counts.
        variants = {
            "c_no_snapshots": (
                "c",
                {**chosen, "source.alignment": "none", "sink.retainedSnapshots": "0"},
            ),
            "e_no_prefetch": ("e", {**chosen, "source.prefetchRecords": "0"}),
            "b_exactly_once": ("b", chosen),
        }
        keys = list(variants)
        for round_no in range(repeat):
            # Rotate the order each round: with --repeat 3 each variant runs once in each
            # position, so no variant always runs first after the previous round.
            shift = round_no % len(keys)
            for key in keys[shift:] + keys[:shift]:
                name, extra = variants[key]
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
    if "a_raw_kafka_python" in result.seconds:
        result.ratios["b/a_kafka_python"] = round(
            result.seconds["a_raw_kafka_python"] / result.seconds["b_exactly_once"], 3
        )
    result.ratios["b/c"] = round(
        result.seconds["c_no_snapshots"] / result.seconds["b_exactly_once"], 3
    )
    result.ratios["snapshot_overhead"] = round(1 - result.ratios["b/c"], 3)
    result.ratios["b/e"] = round(
        result.seconds["e_no_prefetch"] / result.seconds["b_exactly_once"], 3
    )
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
        "a_raw_consumer": f"(a) raw {result.client} consumer",
        "b_exactly_once": "(b) chkpt-kafka -> chkpt-delta, exactly once",
        "c_no_snapshots": "(c) same, alignment=none, no snapshot store",
        "e_no_prefetch": "(e) (b) with prefetchRecords=0",
        "d_write_deltalake": "(d) write_deltalake of the same rows",
    }
    lines = [f"{'run':<48}{'seconds':>9}{'records/s':>12}"]
    if "a_raw_kafka_python" in result.seconds:
        names = {"a_raw_kafka_python": "(a') raw kafka-python consumer", **names}
    for key, label in names.items():
        lines.append(f"{label:<48}{result.seconds[key]:>9.2f}{result.rate[key]:>12,}")
    lines.append(
        f"ratio (b)/(a) = {result.ratios['b/a']:.2f}   "
        f"ratio (b)/(c) = {result.ratios['b/c']:.2f}   "
        f"snapshot overhead 1-(b)/(c) = {result.ratios['snapshot_overhead']:.1%}   "
        f"prefetch gain (b)/(e) = {result.ratios['b/e']:.2f}"
    )
    if "b/a_kafka_python" in result.ratios:
        lines.append(f"ratio (b)/(a') = {result.ratios['b/a_kafka_python']:.2f}")
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
        default=3,
        help="runs of (b) and (c), alternating; the fastest of each counts",
    )
    parser.add_argument(
        "--client",
        choices=("kafka-python", "confluent"),
        default="kafka-python",
        help="the source's kafka.client, and the raw consumer (a) it is compared with",
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
        repeat=args.repeat,
        client=args.client,
    )
    print(report(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2))
    return 0
