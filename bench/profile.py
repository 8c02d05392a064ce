"""One bench row under py-spy: where its time goes, as shares of the sampled stacks.

    python -m bench.profile k2k-latency --out /tmp/prof            # two jobs, aligned
    python -m bench.profile k2k-latency --sink-client kafka-python --out /tmp/prof
    python -m bench.profile latency --rate 5000 --out /tmp/prof     # Kafka -> Delta
    python -m bench.profile k2k --records 100000 --out /tmp/prof    # Kafka -> Kafka
    python -m bench.profile k2d --records 100000 --out /tmp/prof    # Kafka -> Delta
    python -m bench.profile k2k-shape --shape 1000 --json-step --out /tmp/prof  # by shape
    python -m bench.profile --summarize /tmp/prof/k2k-latency.txt   # the shares again

More: docs/performance/benchmarks.md (bench/profile.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.spy import gc_totals, log_gc, sampling, summarize, summary_lines

ROWS = ("k2k-latency", "latency", "k2k", "k2d", "k2k-shape")


@contextlib.contextmanager
def _broker(kind: str, servers: str | None = None) -> Iterator[str]:
    if servers:  # a broker already running (topics get names the row has not used)
        yield servers
        return
    if kind == "tansu":
        from spark_chkpt.testing.embedded_broker import EmbeddedBroker

        with EmbeddedBroker() as tansu:
            yield tansu.bootstrap_servers
        return
    from spark_chkpt.testing.kafka_broker import EmbeddedKafka

    with EmbeddedKafka() as kafka:
        yield kafka.bootstrap_servers


def hop_split(table: Path) -> dict[str, float | None]:
    """For the two-job row: each record's latency split at the middle topic, p50 and p99
    (ms) of origin → middle-topic produce (the upstream's part) and middle-topic produce
    → downstream commit (the barrier wait and the downstream's batch)."""
    import pyarrow.parquet as pq

    from bench.latency import _actions
    from spark_chkpt.metrics.reporter import percentile

    upstream: list[float] = []
    downstream: list[float] = []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        visible_ms = os.stat(entry).st_mtime_ns / 1e6
        for action in _actions(entry):
            if "add" not in action:
                continue
            rows = pq.read_table(
                table / action["add"]["path"], columns=["kafka_timestamp", "hop_timestamp"]
            )
            origin = rows.column(0).cast("int64").to_pylist()
            hop = rows.column(1).cast("int64").to_pylist()
            for o, h in zip(origin, hop, strict=True):
                upstream.append((h - o) / 1000)
                downstream.append(visible_ms - h / 1000)
    return {
        "upstream_p50_ms": percentile(upstream, 50),
        "upstream_p99_ms": percentile(upstream, 99),
        "downstream_p50_ms": percentile(downstream, 50),
        "downstream_p99_ms": percentile(downstream, 99),
    }


def batches(progress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each progress event's batch id, rows and phase durations (ms), in order."""
    return [
        {
            "batch": p["batchId"],
            "at": p["timestamp"],
            "rows": p["numInputRows"],
            **{k: v for k, v in (p.get("durationMs") or {}).items()},
        }
        for p in progress
    ]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench import k2k_shapes, kafka_to_kafka, latency
    from bench.batch_cost import fill
    from bench.query import bench_session, run_query
    from spark_chkpt.kafka.client.topics import create_topic

    out_dir = Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    tag = args.tag or args.row
    raw = out_dir / f"{tag}.txt" if out_dir and not args.no_py_spy else None
    workdir = Path(tempfile.mkdtemp(prefix="spark-chkpt-profile-"))
    figures: dict[str, Any] = {"row": args.row, "argv": sys.argv[1:]}
    gc_log = Path(args.gc_log) if args.gc_log else None
    if gc_log is not None:
        log_gc(gc_log, freeze=args.gc_freeze)
    with _broker(args.broker, args.bootstrap_servers) as servers:
        spark = bench_session(partitions=args.partitions, connectors=args.spark_own)
        warm = "profile-warm"
        fill(servers=servers, topic=warm, records=20_000, partitions=args.partitions)
        settings = {
            "source.kafka.bootstrap.servers": servers,
            "source.subscribe": warm,
            "source.startingOffsets": "earliest",
            "source.maxOffsetsPerTrigger": "5000",
            "source.kafka.client": args.client,
        }
        run_query(spark=spark, settings=settings, workdir=workdir, name="warmup")
        if args.row in ("k2k", "k2d"):
            fill(servers=servers, topic="bench", records=args.records, partitions=args.partitions)
        if args.row == "k2k-shape":
            k2k_shapes.fill(
                servers=servers,
                topic="shape",
                shape=args.shape,
                records=args.records,
                partitions=args.partitions,
            )
        progress: dict[str, list[dict[str, Any]]] = {}
        if gc_log is not None:  # the row's collections only
            for old in gc_log.iterdir():
                old.unlink()
        print(f"[profile] {tag}: sampling {'to ' + str(raw) if raw else 'off'}", flush=True)
        started = time.monotonic()
        with sampling(raw, rate=args.rate_hz, idle=args.idle):
            steady = {  # the two latency rows' common arguments
                "spark": spark,
                "servers": servers,
                "workdir": workdir,
                "rate": args.rate,
                "seconds": args.seconds,
                "partitions": args.partitions,
                "client": args.client,
            }
            if args.row == "k2k-latency":
                measured: Any = latency.measure_kafka_to_kafka(
                    **steady, sink_client=args.sink_client, progress=progress
                )
            elif args.row == "latency":
                measured = latency.measure(**steady)
            elif args.row == "k2k-shape":  # bench/k2k_shapes.py's row, ours or Spark's
                create_topic(
                    bootstrap_servers=servers, name="shape-out", partitions=args.partitions
                )
                seconds = k2k_shapes.copy(
                    spark=spark,
                    fmt="kafka" if args.spark_own else "chkpt-kafka",
                    servers=servers,
                    topic="shape",
                    out="shape-out",
                    per_trigger=args.per_trigger,
                    json_step=args.json_step,
                    checkpoint=workdir / "chk-shape",
                    source_client=args.client,
                    progress=progress.setdefault("k2k-shape", []),
                )
                measured = {"seconds": round(seconds, 2), "rps": round(args.records / seconds)}
                measured["batches_ms"] = sum(
                    int((p.get("durationMs") or {}).get("triggerExecution", 0))
                    for p in progress["k2k-shape"]
                )
            elif args.row == "k2d":  # make bench's (b): Kafka -> Delta, AvailableNow
                seconds, phases, _ = run_query(
                    spark=spark,
                    settings={**settings, "source.subscribe": "bench"}
                    | {"source.maxOffsetsPerTrigger": str(args.per_trigger)},
                    workdir=workdir,
                    name="b",
                )
                measured = {"seconds": round(seconds, 2), "phases_ms": phases}
            else:
                measured = kafka_to_kafka.run(
                    spark=spark,
                    servers=servers,
                    topic="bench",
                    records=args.records,
                    partitions=args.partitions,
                    per_trigger=args.per_trigger,
                    workdir=workdir,
                    name="k2k",
                    source_client=args.client,
                    sink_client=args.sink_client or "confluent",  # the sink's default
                )
        figures["row_s"] = round(time.monotonic() - started, 2)
        figures["result"] = measured if isinstance(measured, dict) else asdict(measured)
        if args.row == "k2k-latency":
            figures["hop_split"] = hop_split(workdir / f"k2k-latency{args.rate}")
        if progress:
            figures["batches"] = {k: batches(v) for k, v in progress.items()}
        spark.stop()
    if gc_log is not None:
        figures["gc"] = gc_totals(gc_log)
    figures["load_average"] = os.getloadavg()
    if raw is not None and raw.exists():
        figures["profile"] = summarize(raw)
    if out_dir:
        (out_dir / f"{tag}.json").write_text(json.dumps(figures, indent=2))
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("row", nargs="?", choices=ROWS)
    parser.add_argument("--out", default=None, help="folder of ROW.txt (py-spy) and ROW.json")
    parser.add_argument("--tag", default=None, help="file name instead of ROW")
    parser.add_argument("--no-py-spy", action="store_true", help="the row's figures alone")
    parser.add_argument("--summarize", default=None, metavar="RAW", help="print RAW's shares")
    parser.add_argument("--rate", type=int, default=5_000, help="records/s of the latency rows")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--records", type=int, default=100_000, help="records of the k2k row")
    parser.add_argument("--per-trigger", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--client", choices=("kafka-python", "confluent"), default="kafka-python")
    parser.add_argument(
        "--sink-client",
        choices=("kafka-python", "confluent"),
        default=None,
        help="the Kafka sink's client in k2k rows (default: the sink's own, librdkafka)",
    )
    parser.add_argument("--shape", default="bench", help="the k2k-shape row's shape")
    parser.add_argument("--json-step", action="store_true", help="k2k-shape: with the JSON step")
    parser.add_argument(
        "--spark-own", action="store_true", help="k2k-shape: Spark's kafka -> kafka instead"
    )
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    parser.add_argument(
        "--bootstrap-servers",
        default=None,
        help="a running broker (without the row's topics) instead of --broker's",
    )
    parser.add_argument("--rate-hz", type=int, default=50, help="py-spy samples per second")
    parser.add_argument("--idle", action="store_true", help="also sample waiting threads")
    parser.add_argument(
        "--gc-log",
        default=None,
        metavar="DIR",
        help="log every full garbage collection of Spark's Python processes in DIR",
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="with --gc-log: each process freezes what survives each full collection "
        "(an experiment)",
    )
    args = parser.parse_args(argv)
    if args.summarize:
        print("\n".join(summary_lines(summarize(Path(args.summarize)))))
        return 0
    if args.row is None:
        parser.error("a row, or --summarize")
    figures = run(args)
    shown = {k: v for k, v in figures.items() if k not in ("batches", "profile")}
    print(json.dumps(shown, indent=2), flush=True)
    for name, rows in figures.get("batches", {}).items():
        print(f"[profile] {name} batches: rows, then each phase (ms)")
        for b in rows:
            phases = ", ".join(f"{k} {v}" for k, v in b.items() if k not in ("batch", "at"))
            print(f"  {b['batch']} at {b['at']}: {phases}")
    if "profile" in figures:
        print("\n".join(summary_lines(figures["profile"])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
