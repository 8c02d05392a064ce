"""The Quix Streams row alone: bench/quix.py run several times on one topic, each run's
start-up, steady rate and close apart (no Spark).

    make quix   # Quix Streams in .cache/quix, the version of setup.cfg's bench extra
    python -m bench.quix_row --quix-python .cache/quix/bin/python [--records 300000]
        [--runs 3] [--commit-intervals 1] [--partitions 4]
    python -m bench.quix_row --ours [--ours-per-trigger 25000] [--runs 3]   # Spark: spark-slot

On ``--bootstrap-servers`` or the real Kafka broker started for the row, the topic is
filled with the benchmark's page views. Each run is a new process with a new consumer
group and a new output topic (Quix creates it), ``processing_guarantee="exactly-once"``.
It prints each run's line and, per commit interval, the range of the steady rate and
its spread ((max - min) / min).

``--ours``: on the same topic, ours' steady rate to set beside Quix's
(:func:`bench.k2k_shapes.steady`): ``chkpt-kafka`` → ``chkpt-kafka`` exactly once with the
JSON step, a long-running query, the first batches left out; ``--runs`` queries in one
warm SparkSession. Without ``--quix-python`` only ours runs.

More: docs/performance/benchmarks.md (bench/quix_row.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def spread(values: Sequence[float]) -> float:
    """(max - min) / min: 0.15 means the fastest run is 1.15× the slowest."""
    return (max(values) - min(values)) / min(values)


def measure(
    *, python: str, servers: str, records: int, runs: int, commit_intervals: Sequence[float]
) -> list[dict[str, Any]]:
    from bench.cold import json_result

    script = Path(__file__).with_name("quix.py")
    out = []
    for interval in commit_intervals:
        for run in range(runs):
            line = json_result(
                [
                    python,
                    str(script),
                    "--servers",
                    servers,
                    "--topic",
                    "bench",
                    "--records",
                    str(records),
                    "--commit-interval",
                    str(interval),
                ],
                what="Quix Streams run",
            )
            line["run"] = run + 1
            print(f"[bench] quix {json.dumps(line)}", flush=True)
            out.append(line)
    return out


def report_lines(rows: Sequence[dict[str, Any]], records: int) -> list[str]:
    lines = [
        f"Quix Streams exactly-once, {records} page views: whole run and its parts (s)",
        f"{'commit_interval':>15}{'run':>4}{'whole':>8}{'start-up':>10}{'steady':>8}"
        f"{'close':>7}{'whole rec/s':>13}{'steady rec/s':>14}",
    ]
    for r in rows:
        lines.append(
            f"{r['commit_interval']:>15}{r['run']:>4}{r['seconds']:>8.2f}{r['startup_s']:>10.2f}"
            f"{r['steady_s']:>8.2f}{r['close_s']:>7.2f}{round(records / r['seconds']):>13,}"
            f"{round(r['steady_rps'] or 0):>14,}"
        )
    for interval in dict.fromkeys(r["commit_interval"] for r in rows):
        steady = [r["steady_rps"] for r in rows if r["commit_interval"] == interval]
        whole = [records / r["seconds"] for r in rows if r["commit_interval"] == interval]
        lines.append(
            f"commit_interval {interval}: steady {min(steady):,.0f}-{max(steady):,.0f} "
            f"(spread {spread(steady):.0%}), whole {min(whole):,.0f}-{max(whole):,.0f} "
            f"(spread {spread(whole):.0%})"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quix_row", description=__doc__)
    parser.add_argument("--quix-python", default=None)
    parser.add_argument("--ours", action="store_true", help="also ours' steady rate (Spark)")
    parser.add_argument("--ours-per-trigger", type=int, default=25_000)
    parser.add_argument("--ours-skip", type=int, default=2, help="ours' batches left out")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--commit-intervals", default="1", help="seconds, comma-separated")
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    from bench.batch_cost import fill
    from bench.broker import kafka_broker

    if not args.quix_python and not args.ours:
        parser.error("--quix-python, --ours or both")
    intervals = [float(v) for v in args.commit_intervals.split(",") if v.strip()]
    rows: list[dict[str, Any]] = []
    ours: list[dict[str, Any]] = []
    with kafka_broker(args.bootstrap_servers) as servers:
        fill(servers=servers, topic="bench", records=args.records, partitions=args.partitions)
        if args.quix_python:
            rows = measure(
                python=args.quix_python,
                servers=servers,
                records=args.records,
                runs=args.runs,
                commit_intervals=intervals,
            )
        if args.ours:
            ours = measure_ours(
                servers=servers,
                records=args.records,
                runs=args.runs,
                partitions=args.partitions,
                per_trigger=args.ours_per_trigger,
                skip=args.ours_skip,
            )
    if rows:
        print("\n".join(report_lines(rows, args.records)), flush=True)
    for row in ours:
        print(
            f"ours run {row['run']}: steady {row['steady_rps']:,} records/s "
            f"({row['steady_records']:,} records of batches {row['skipped_batches'] + 1}-"
            f"{row['batches']} in {row['steady_s']:.2f} s)",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"quix": rows, "ours": ours}, indent=2))
    return 0


def measure_ours(
    *, servers: str, records: int, runs: int, partitions: int, per_trigger: int, skip: int
) -> list[dict[str, Any]]:
    """Ours' steady rate, ``runs`` queries in one SparkSession on the filled topic."""
    import tempfile

    from bench import k2k_shapes
    from bench.query import bench_session
    from spark_chkpt.kafka.client.topics import create_topic

    workdir = Path(tempfile.mkdtemp(prefix="spark-chkpt-quix-ours-"))
    spark = bench_session(partitions=partitions)
    out = []
    try:
        for run in range(runs):
            target = f"bench-ours-{run}"
            create_topic(bootstrap_servers=servers, name=target, partitions=partitions)
            row = k2k_shapes.steady(
                spark=spark,
                servers=servers,
                topic="bench",
                out=target,
                records=records,
                per_trigger=per_trigger,
                json_step=True,
                checkpoint=workdir / f"chk-{target}",
                skip=skip,
            )
            row["run"] = run + 1
            print(f"[bench] ours steady {json.dumps(row)}", flush=True)
            out.append(row)
    finally:
        spark.stop()
    return out


if __name__ == "__main__":
    raise SystemExit(main())
