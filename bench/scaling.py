"""How cost grows: Kafka → Delta throughput and driver commit time against partitions and
executors. The state-size rows are in :mod:`bench.state_scaling`.

    python -m bench --scaling-only            # these rows and the state rows alone
    python -m bench --scaling                 # after the other rows, in the same run
    python -m bench.scaling partitions --counts 4,64 [--native | --native-only]
                                              # the partitions rows alone; Spark's own
                                              # kafka source beside them, or alone

* partitions: the same ``records`` over topics of 4, 16 and 64 partitions, each drained
  by the warm Kafka → Delta job (``chkpt-kafka`` → ``chkpt-delta``, exactly once,
  ``Trigger.AvailableNow``, ``maxOffsetsPerTrigger=per_trigger``) in one ``local[*]``
  session, after a warm-up query; the runs alternate ``repeat`` times, the fastest counts;
* executors: the same job on ``local-cluster[1,1,1024]`` and ``local-cluster[2,1,1024]``
  (one and two executor JVMs of one core each, with their own Python workers), each in a
  new process (the master is fixed when the JVM starts) with a warm-up query first.

Commit time is the driver's Delta commit of each batch as the snapshot records in the
Delta commits give it (``commit_ms``), p50 and p99 over the run's batches.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import batch_cost
from bench.broker import kafka_broker

PARTITIONS = (4, 16, 64)
MASTERS = ("local-cluster[1,1,1024]", "local-cluster[2,1,1024]")


def commit_latencies(table: Path) -> list[float]:
    """The driver commit time (ms) of every batch the snapshot records in ``table`` carry."""
    from deltalake import DeltaTable

    from spark_chkpt.snapshot.record import SNAPSHOT_KEY

    return [
        float(json.loads(entry[SNAPSHOT_KEY])["commit_ms"])
        for entry in DeltaTable(str(table)).history()
        if SNAPSHOT_KEY in entry
    ]


def row(*, label: str, records: int, seconds: float, commits: list[float]) -> dict[str, Any]:
    """One row of the table: records/s and the commit time p50/p99 over ``commits``."""
    from spark_chkpt.metrics.reporter import percentile

    return {
        "label": label,
        "records": records,
        "seconds": round(seconds, 2),
        "records_per_s": round(records / seconds) if seconds > 0 else None,
        "batches": len(commits),
        "commit_p50_ms": percentile(commits, 50),
        "commit_p99_ms": percentile(commits, 99),
    }


def table_lines(rows: Sequence[dict[str, Any]], *, title: str) -> list[str]:
    """A Markdown table of rows from :func:`row`, with each row's throughput against the
    first row's."""
    lines = [
        f"**{title}**",
        "",
        "| run | records | s | records/s | × first | batches | commit p50 ms | commit p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = rows[0]["records_per_s"] if rows else None
    for r in rows:
        rate = r["records_per_s"]
        versus = f"{rate / base:.2f}" if rate and base else "–"
        lines.append(
            f"| {r['label']} | {r['records']:,} | {r['seconds']:.2f} | "
            f"{_number(rate)} | {versus} | {r['batches']} | "
            f"{_number(r['commit_p50_ms'])} | {_number(r['commit_p99_ms'])} |"
        )
    return lines


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if value >= 100 else f"{value:g}"


def _settings(servers: str, topic: str, per_trigger: int, client: str) -> dict[str, str]:
    return {
        "source.kafka.bootstrap.servers": servers,
        "source.subscribe": topic,
        "source.startingOffsets": "earliest",
        "source.maxOffsetsPerTrigger": str(per_trigger),
        "source.kafka.client": client,
    }


def measure_partitions(
    *,
    spark: Any,
    servers: str,
    workdir: Path,
    records: int,
    per_trigger: int,
    client: str,
    repeat: int = 2,
    counts: Sequence[int] = PARTITIONS,
    native: bool = False,
    ours: bool = True,
) -> list[dict[str, Any]]:
    """The job on the same records over each partition count; the fastest of ``repeat``.
    ``native``: Spark's own ``kafka`` → ``delta`` on the same topics, turn by turn with
    the job (the session needs the connectors: ``bench_session(connectors=True)``);
    ``ours=False``: those rows alone. In one session, delta-spark's runs slow the job's
    that follow them (4 partitions 27,781 records/s beside them, 46,836 alone, idle, 2
    Dec), so ``make bench`` runs each side in a process of its own."""
    from bench.native import kafka_to_delta
    from bench.query import run_query

    topics = {p: f"scale-p{p}" for p in counts}
    for p, topic in topics.items():
        print(f"[bench] scaling: {records:,} records into {p} partitions", flush=True)
        batch_cost.fill(servers=servers, topic=topic, records=records, partitions=p)
    if ours:
        run_query(
            spark=spark,
            settings=_settings(servers, topics[counts[0]], per_trigger, client),
            workdir=workdir,
            name="scale-warmup",
        )
    best: dict[int, tuple[float, str]] = {}
    best_native: dict[int, tuple[float, int]] = {}
    for round_no in range(repeat):
        order = list(counts)[round_no % len(counts) :] + list(counts)[: round_no % len(counts)]
        for p in order:
            name = f"scale-p{p}-{round_no}"
            print(f"[bench] scaling round {round_no + 1}/{repeat}: {p} partitions", flush=True)
            if ours:
                seconds, _, _ = run_query(
                    spark=spark,
                    settings=_settings(servers, topics[p], per_trigger, client),
                    workdir=workdir,
                    name=name,
                )
                if p not in best or seconds < best[p][0]:
                    best[p] = (seconds, name)
            if native:
                seconds, batches = kafka_to_delta(
                    spark=spark,
                    kafka_settings=_settings(servers, topics[p], per_trigger, client),
                    records=records,
                    workdir=workdir,
                    name=f"native-{name}",
                )
                if p not in best_native or seconds < best_native[p][0]:
                    best_native[p] = (seconds, batches)
    rows = [
        row(
            label=f"{p} partitions",
            records=records,
            seconds=best[p][0],
            commits=commit_latencies(workdir / best[p][1]),
        )
        for p in (counts if ours else ())
    ]
    for p in counts if native else ():
        rows.append(
            {
                **row(
                    label=f"{p} partitions, Spark kafka → delta",
                    records=records,
                    seconds=best_native[p][0],
                    commits=[],
                ),
                "batches": best_native[p][1],
            }
        )
    return rows


def measure_executors(
    *,
    servers: str,
    workdir: Path,
    records: int,
    per_trigger: int,
    client: str,
    partitions: int,
    masters: Sequence[str] = MASTERS,
) -> list[dict[str, Any]]:
    """The job on each ``local-cluster`` master, each in a new process, on one topic."""
    from bench.cold import json_result

    topic = f"scale-exec-p{partitions}"
    batch_cost.fill(servers=servers, topic=topic, records=records, partitions=partitions)
    rows = []
    for index, master in enumerate(masters):
        print(f"[bench] scaling: {master}", flush=True)
        command = [
            sys.executable,
            "-m",
            "bench.scaling",
            "--master",
            master,
            "--workdir",
            str(workdir),
            "--name",
            f"scale-exec-{index}",
            "--partitions",
            str(partitions),
            "--records",
            str(records),
            "--settings",
            json.dumps(_settings(servers, topic, per_trigger, client)),
        ]
        rows.append(json_result(command, what=f"scaling run on {master}"))
    return rows


def _child(argv: Sequence[str] | None = None) -> int:
    """One executors row in this process: a warm-up query, then the measured one."""
    parser = argparse.ArgumentParser(prog="python -m bench.scaling")
    parser.add_argument("--master", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--settings", required=True, help="the query's settings as JSON")
    args = parser.parse_args(argv)
    from bench.query import SESSION_CONF, run_query
    from spark_chkpt.session import build_session

    spark = build_session(
        app_name="spark-chkpt-bench-scaling",
        master=args.master,
        conf={**SESSION_CONF, "spark.sql.shuffle.partitions": str(args.partitions)},
    )
    spark.sparkContext.setLogLevel("ERROR")
    settings = json.loads(args.settings)
    workdir = Path(args.workdir)
    run_query(spark=spark, settings=settings, workdir=workdir, name=f"{args.name}-warmup")
    seconds, _, _ = run_query(spark=spark, settings=settings, workdir=workdir, name=args.name)
    measured = row(
        label=args.master,
        records=args.records,
        seconds=seconds,
        commits=commit_latencies(workdir / args.name),
    )
    print(json.dumps(measured), flush=True)
    spark.stop()
    return 0


def _partitions(argv: Sequence[str]) -> int:
    """``python -m bench.scaling partitions``: the partitions rows alone (and Spark's
    own source on the same topics with ``--native``), on a broker of their own."""
    import tempfile

    from bench.query import bench_session

    parser = argparse.ArgumentParser(prog="python -m bench.scaling partitions")
    parser.add_argument("--counts", default=",".join(str(p) for p in PARTITIONS))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--client", default="kafka-python")
    parser.add_argument("--native", action="store_true")
    parser.add_argument(
        "--native-only", action="store_true", help="Spark's own kafka -> delta rows alone"
    )
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    with kafka_broker(args.bootstrap_servers) as servers:
        native = args.native or args.native_only
        spark = bench_session(partitions=4, connectors=native)
        rows = measure_partitions(
            spark=spark,
            servers=servers,
            workdir=Path(tempfile.mkdtemp(prefix="bench-scaling-")),
            records=args.records,
            per_trigger=max(1, args.records // 10),
            client=args.client,
            repeat=args.repeat,
            counts=[int(c) for c in args.counts.split(",") if c.strip()],
            native=native,
            ours=not args.native_only,
        )
        spark.stop()
    print("\n".join(table_lines(rows, title="Partitions")), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def run(
    *,
    servers: str,
    workdir: Path,
    records: int,
    per_trigger: int,
    client: str,
    executor_partitions: int = 4,
    repeat: int = 2,
    state_sizes: Sequence[int] | None = None,
    state_budget_s: float = 1_800,
) -> dict[str, Any]:
    """Every scaling row: partitions and state in one ``local[*]`` session, executors in
    their own processes, each table printed when measured. The figures as a dict
    (``--json`` writes it under ``scaling``)."""
    from bench import state_scaling
    from bench.query import bench_session

    spark = bench_session(partitions=4)
    partitions: list[dict[str, Any]] = []
    executors: list[dict[str, Any]] = []
    if records > 0:  # 0: the state rows alone
        partitions = measure_partitions(
            spark=spark,
            servers=servers,
            workdir=workdir,
            records=records,
            per_trigger=per_trigger,
            client=client,
            repeat=repeat,
        )
        print("\n".join(table_lines(partitions, title="Partitions")), flush=True)
        executors = measure_executors(
            servers=servers,
            workdir=workdir,
            records=records,
            per_trigger=per_trigger,
            client=client,
            partitions=executor_partitions,
        )
        print("\n".join(table_lines(executors, title="Executors")), flush=True)
    # The longest rows last: what was measured before them is printed already.
    state = state_scaling.measure(
        spark=spark,
        workdir=workdir,
        sizes=state_scaling.SIZES if state_sizes is None else state_sizes,
        budget_s=state_budget_s,
    )
    spark.stop()
    return {"partitions": partitions, "executors": executors, "state": state}


def report_lines(scaling: dict[str, Any]) -> list[str]:
    """The scaling tables, Markdown, as the performance page quotes them."""
    from bench.state_scaling import table_lines as state_lines

    lines = table_lines(scaling["partitions"], title="Partitions (Kafka → Delta, warm, local[*])")
    lines += [""]
    lines += table_lines(scaling["executors"], title="Executors (Kafka → Delta, warm)")
    lines += [""]
    return lines + state_lines(scaling["state"])


if __name__ == "__main__":
    if sys.argv[1:2] == ["partitions"]:
        sys.exit(_partitions(sys.argv[2:]))
    sys.exit(_child())
