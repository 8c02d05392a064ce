"""Benchmark: chkpt-kafka → chkpt-delta against the raw client and against the ceiling of
Spark's Python DataSource path, in one run on one data set.

    make bench                     # or: spark-chkpt bench [--records N] [--partitions P]

More: docs/performance/benchmarks.md (bench/pipeline.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.broker import kafka_broker
from bench.result import Result

TOPIC = "bench"


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

    from spark_chkpt.snapshot.record import SNAPSHOT_KEY

    latencies = []
    for entry in DeltaTable(str(table)).history():
        if SNAPSHOT_KEY in entry:
            latencies.append(float(json.loads(entry[SNAPSHOT_KEY])["commit_ms"]))
    return latencies, len(latencies)


def _sink_clients() -> list[str]:
    """The sink clients this installation has: kafka-python, and confluent when installed."""
    import importlib.util

    clients = ["kafka-python"]
    if importlib.util.find_spec("confluent_kafka") is not None:
        clients.append("confluent")
    return clients


def _prepare(
    *, servers: str, records: int, partitions: int, client: str, result: Result
) -> dict[Any, int]:
    """Create and fill the topic, then drain it with the raw client(s): (a) and (a')."""
    from bench import batch_cost
    from spark_chkpt.kafka.source.offset_reader import OffsetReader
    from spark_chkpt.kafka.source.options import SourceConfig

    batch_cost.fill(servers=servers, topic=TOPIC, records=records, partitions=partitions)
    reader = OffsetReader(
        config=SourceConfig.from_options({"kafka.bootstrap.servers": servers, "subscribe": TOPIC}),
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
        drained = _drain_raw(servers, TOPIC, ends, raw_client)
        result.seconds[key] = time.monotonic() - started
        if drained != records:
            raise RuntimeError(f"raw {raw_client} consumer read {drained} of {records}")
    return dict(ends)


def _quix_python(chosen: str | None) -> str | None:
    """The interpreter that runs bench/quix.py: ``--quix-python``, else this one if it
    has quixstreams, else none (the comparison is skipped)."""
    import importlib.util

    if chosen:
        return chosen
    return sys.executable if importlib.util.find_spec("quixstreams") is not None else None


def _run_quix(python: str, servers: str, records: int) -> dict[str, Any]:
    from bench.cold import json_result

    script = Path(__file__).with_name("quix.py")
    return json_result(
        [
            python,
            str(script),
            "--servers",
            servers,
            "--topic",
            TOPIC,
            "--records",
            str(records),
            # 1 s: with Quix's default 5 s a run holds one commit or none (bench/quix_row.py)
            "--commit-interval",
            "1",
        ],
        what="Quix Streams run",
    )


def run(
    *,
    records: int,
    partitions: int,
    per_trigger: int,
    workdir: Path,
    repeat: int = 3,
    client: str = "kafka-python",
    latency_rates: Sequence[int] = (5_000, 20_000),
    latency_seconds: float = 20.0,
    k2k_latency_rates: Sequence[int] = (5_000,),
    cold: bool = True,
    quix_python: str | None = None,
    native: bool = True,
    bootstrap_servers: str | None = None,
    min_pause: str | None = None,
    decode: str = "columns",
) -> Result:
    from deltalake import DeltaTable, write_deltalake

    from bench import aligned_read, batch_cost, kafka_to_kafka, latency
    from bench import cold as cold_runs
    from bench import decode as decode_runs
    from bench import min_pause as pause_runs
    from bench import native as native_runs
    from bench.query import bench_session, run_query
    from bench.synthetic import FORMAT, write_partitions

    result = Result(records=records, partitions=partitions, per_trigger=per_trigger, client=client)
    synthetic = workdir / "synthetic"
    with kafka_broker(bootstrap_servers) as servers:
        ends = _prepare(
            servers=servers, records=records, partitions=partitions, client=client, result=result
        )
        print("[bench] read path per core: raw kafka-python, decode=records, decode=columns")
        result.decode = decode_runs.measure(servers=servers, topic=TOPIC, ends=ends)
        print("[bench] aligned read per core: barrier topic against a plain topic")
        result.aligned_read = aligned_read.run(
            servers=servers, records=records, partitions=partitions, snapshot=per_trigger
        )
        write_partitions(folder=synthetic, topic=TOPIC, records=records, partitions=partitions)
        kafka_settings = {
            "source.kafka.bootstrap.servers": servers,
            "source.subscribe": TOPIC,
            "source.startingOffsets": "earliest",
            "source.maxOffsetsPerTrigger": str(per_trigger),
            "source.kafka.client": client,
            "source.decode": decode,
        }
        ceiling_settings = {
            "source.path": str(synthetic),
            "source.maxOffsetsPerTrigger": str(per_trigger),
        }
        if cold:
            # Each in a new process, before this one starts a JVM: nothing is warm.
            for key, source_format, settings in (
                ("b_exactly_once", "chkpt-kafka", kafka_settings),
                ("f_ceiling_delta", FORMAT, ceiling_settings),
            ):
                print(f"[bench] cold {key}", flush=True)
                result.cold[key] = cold_runs.measure(
                    source_format=source_format,
                    settings=settings,
                    workdir=workdir,
                    name=f"cold-{key[0]}",
                    partitions=partitions,
                )

        spark = bench_session(partitions=partitions, connectors=native)
        # Warm-up on the same data: JVM start, the JIT (the C2 compiler alone took about 5
        # CPU-seconds during a cold 300k run), Python workers and imports, so that no
        # measured run pays for them and the figures are a long-running job's.
        run_query(spark=spark, settings=kafka_settings, workdir=workdir, name="warmup")
        run_query(
            spark=spark,
            settings=ceiling_settings,
            workdir=workdir,
            name="warmup-f",
            source_format=FORMAT,
        )
        variants: dict[str, tuple[str, dict[str, str], str, str]] = {
            "c_no_snapshots": (
                "c",
                {
                    **kafka_settings,
                    "source.alignment": "none",
                    "sink.retainedSnapshots": "0",
                },
                "chkpt-kafka",
                "chkpt-delta",
            ),
            "e_no_prefetch": (
                "e",
                {**kafka_settings, "source.prefetchRecords": "0"},
                "chkpt-kafka",
                "chkpt-delta",
            ),
            "f_ceiling_delta": ("f", ceiling_settings, FORMAT, "chkpt-delta"),
            "g_ceiling_noop": ("g", ceiling_settings, FORMAT, "noop"),
            "b_exactly_once": ("b", kafka_settings, "chkpt-kafka", "chkpt-delta"),
        }
        keys = list(variants)
        for round_no in range(repeat):
            # Rotate the order each round, so no variant always runs first.
            shift = round_no % len(keys)
            for key in keys[shift:] + keys[:shift]:
                name, settings, source_format, sink_format = variants[key]
                print(f"[bench] round {round_no + 1}/{repeat}: {key}", flush=True)
                seconds, phases, _ = run_query(
                    spark=spark,
                    settings=settings,
                    workdir=workdir,
                    name=name if round_no == 0 else f"{name}{round_no}",
                    source_format=source_format,
                    sink_format=sink_format,
                )
                if key not in result.seconds or seconds < result.seconds[key]:
                    result.seconds[key] = seconds
                    result.breakdown_ms[key] = phases
        result.worker_peak_rss_mb = _worker_peak_rss_mb()
        for delivery, prefix in (
            ("barriers", "k2k"),
            ("exactly-once-transactions", "k2k-transactions"),
        ):
            for sink_client in _sink_clients():
                print(f"[bench] Kafka -> Kafka, {delivery}, sink {sink_client}", flush=True)
                k2k = kafka_to_kafka.run(
                    spark=spark,
                    servers=servers,
                    topic=TOPIC,
                    records=records,
                    partitions=partitions,
                    per_trigger=per_trigger,
                    workdir=workdir,
                    name=f"{prefix}-{sink_client}",
                    source_client=client,
                    sink_client=sink_client,
                    delivery=delivery,
                )
                result.kafka_to_kafka.append(asdict(k2k))
        if native:
            print("[bench] Spark's own connectors: Kafka -> Delta, Kafka -> Kafka", flush=True)
            result.native = asdict(
                native_runs.measure(
                    spark=spark,
                    servers=servers,
                    topic=TOPIC,
                    kafka_settings=kafka_settings,
                    records=records,
                    partitions=partitions,
                    per_trigger=per_trigger,
                    workdir=workdir,
                )
            )
        print("[bench] per-batch fixed cost: 20 batches of 1,000 records", flush=True)
        result.batch_cost = batch_cost.measure(
            spark=spark, servers=servers, workdir=workdir, partitions=partitions, client=client
        )
        if min_pause:
            print(f"[bench] minPauseBetweenSnapshots {min_pause}, and none", flush=True)
            result.min_pause = pause_runs.measure(
                spark=spark,
                servers=servers,
                workdir=workdir,
                partitions=partitions,
                client=client,
                pause=min_pause,
            )
        quix = _quix_python(quix_python)
        if quix is not None:
            print(f"[bench] Quix Streams exactly-once ({quix})", flush=True)
            result.quix = _run_quix(quix, servers, records)
        runs = [("Kafka -> Delta", latency.measure, rate) for rate in latency_rates] + [
            ("Kafka -> Kafka", latency.measure_kafka_to_kafka, rate) for rate in k2k_latency_rates
        ]
        for label, measure, rate in runs:
            print(
                f"[bench] {label} latency at {rate} records/s for {latency_seconds} s", flush=True
            )
            measured = measure(
                spark=spark,
                servers=servers,
                workdir=workdir,
                rate=rate,
                seconds=latency_seconds,
                partitions=partitions,
                client=client,
            )
            result.latency.append(asdict(measured))
        spark.stop()

    rows = DeltaTable(str(workdir / "b")).to_pyarrow_table()
    if rows.num_rows != records:
        raise RuntimeError(f"pipeline (b) wrote {rows.num_rows} of {records} rows")
    started = time.monotonic()
    write_deltalake(str(workdir / "d"), rows)
    result.seconds["d_write_deltalake"] = time.monotonic() - started
    _derive(result, workdir)
    return result


def _ratio(result: Result, numerator: str, denominator: str) -> float:
    """How fast ``numerator`` ran against ``denominator`` (records/s over records/s)."""
    return round(result.seconds[denominator] / result.seconds[numerator], 3)


def _derive(result: Result, workdir: Path) -> None:
    from spark_chkpt.metrics.reporter import percentile

    for name, seconds in result.seconds.items():
        result.rate[name] = round(result.records / seconds)
    result.ratios["b/a"] = _ratio(result, "b_exactly_once", "a_raw_consumer")
    if "a_raw_kafka_python" in result.seconds:
        result.ratios["b/a_kafka_python"] = _ratio(result, "b_exactly_once", "a_raw_kafka_python")
    result.ratios["b/c"] = _ratio(result, "b_exactly_once", "c_no_snapshots")
    result.ratios["snapshot_overhead"] = round(1 - result.ratios["b/c"], 3)
    result.ratios["b/e"] = _ratio(result, "b_exactly_once", "e_no_prefetch")
    result.ratios["b/f"] = _ratio(result, "b_exactly_once", "f_ceiling_delta")
    result.ratios["f/g"] = _ratio(result, "f_ceiling_delta", "g_ceiling_noop")
    if "b_exactly_once" in result.cold and "f_ceiling_delta" in result.cold:
        result.ratios["cold b/f"] = round(
            result.cold["f_ceiling_delta"]["seconds"] / result.cold["b_exactly_once"]["seconds"],
            3,
        )
    if result.quix and result.kafka_to_kafka:
        fastest = min(
            k2k["upstream_s"]
            for k2k in result.kafka_to_kafka
            if k2k.get("delivery", "barriers") == "barriers"
        )
        result.ratios["k2k/quix"] = round(result.quix["seconds"] / fastest, 3)
    seconds_of = {
        (k2k["sink_client"], k2k.get("delivery", "barriers")): k2k["upstream_s"]
        for k2k in result.kafka_to_kafka
    }
    for sink_client, suffix in (("confluent", ""), ("kafka-python", " kafka-python")):
        # The same client: what the transactions cost (the target is on the default,
        # librdkafka; the kafka-python pair is kept for comparison with earlier rounds).
        barriers_s = seconds_of.get((sink_client, "barriers"))
        transactions_s = seconds_of.get((sink_client, "exactly-once-transactions"))
        if barriers_s and transactions_s:
            ratio = round(barriers_s / transactions_s, 3)
            result.ratios[f"k2k transactions/barriers{suffix}"] = ratio
        if result.quix and transactions_s:  # both through Kafka transactions
            ratio = round(result.quix["seconds"] / transactions_s, 3)
            result.ratios[f"k2k transactions/quix{suffix}"] = ratio
    from bench.native import ratios as native_ratios

    native_ratios(result)
    for name in ("b", "c"):
        latencies, batches = _commit_latencies(workdir / name)
        result.batches[name] = batches
        result.commit_ms[name] = {
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
        }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
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
        help="runs of (b), (c), (e), (f) and (g), alternating; the fastest of each counts",
    )
    parser.add_argument(
        "--latency-rates",
        default="5000,20000",
        help="input rates (records/s) of the latency runs, comma-separated; empty: none",
    )
    parser.add_argument(
        "--k2k-latency-rates",
        default="5000",
        help="input rates of the Kafka -> Kafka latency runs (to the aligned downstream "
        "read's commit), comma-separated; empty: none",
    )
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument(
        "--quix-python",
        default=None,
        help="a Python with quixstreams for the Quix Streams comparison "
        "(default: this one, if it has quixstreams; else the comparison is skipped)",
    )
    parser.add_argument(
        "--no-cold", action="store_true", help="skip the cold runs (two fresh processes)"
    )
    parser.add_argument(
        "--client",
        choices=("kafka-python", "confluent"),
        default="kafka-python",
        help="the source's kafka.client, and the raw consumer (a) it is compared with",
    )
    parser.add_argument(
        "--no-native",
        action="store_true",
        help="skip Spark's own Kafka connector and delta-spark rows (n) and (nk)",
    )
    parser.add_argument(
        "--bootstrap-servers",
        default=None,
        help="run on this broker instead of an embedded one (it must not have a 'bench' "
        "topic yet); Spark's own connector needs a Kafka broker, not the embedded Tansu",
    )
    parser.add_argument(
        "--min-pause",
        default=None,
        metavar="DURATION",
        help="also measure the sink's minPauseBetweenSnapshots at this value (e.g. 500ms) "
        "against none: a backlog drain and a steady 5,000 records/s run",
    )
    parser.add_argument(
        "--min-pause-only",
        action="store_true",
        help="run only the --min-pause rows (default pause 500ms)",
    )
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="also measure how cost grows (bench/scaling.py): partitions 4/16/64, "
        "local-cluster with 1 and 2 executors, state of 10k/1M/10M keys",
    )
    parser.add_argument("--scaling-only", action="store_true", help="run only the --scaling rows")
    parser.add_argument(
        "--scaling-records",
        type=int,
        default=200_000,
        help="records of each partitions and executors row (maxOffsetsPerTrigger: a tenth); "
        "0: the state rows alone",
    )
    parser.add_argument(
        "--state-keys",
        default="10000,1000000,10000000",
        help="state sizes (distinct keys) of the scaling rows, comma-separated",
    )
    parser.add_argument(
        "--batch-cost-only",
        action="store_true",
        help="run only the per-batch fixed cost and its Spark/ours table (bench/batch_anatomy.py)",
    )
    parser.add_argument(
        "--aligned-read-only",
        action="store_true",
        help="run only the aligned read of a barrier topic against a plain topic, per core "
        "(bench/aligned_read.py; no Spark): --records records, --partitions partitions, a "
        "barrier every --per-trigger records",
    )
    parser.add_argument(
        "--decode",
        choices=("columns", "records"),
        default="columns",
        help="the source's decode option in every chkpt-kafka row: records is the read "
        "path before columns (for a before/after figure in one checkout)",
    )
    parser.add_argument(
        "--aged-table-only",
        action="store_true",
        help="run only the aged table row (bench/aged_table.py): a batch's cost into a "
        "fresh Delta table and into tables of --aged-versions versions and files",
    )
    parser.add_argument(
        "--aged-versions",
        default="1000,10000",
        help="versions (one file each) of the aged tables, comma-separated",
    )
    parser.add_argument(
        "--aged-rewritten",
        type=int,
        default=0,
        help="with --aged-table-only: one more row, a table of this many versions that "
        "another job OPTIMIZEs and VACUUMs while the query runs (0: none)",
    )
    parser.add_argument(
        "--k2k-shapes-only",
        action="store_true",
        help="run only Kafka -> Kafka by record shape (bench/k2k_shapes.py): chkpt "
        "exactly once (librdkafka, transactions) / Spark's kafka -> kafka, copy and JSON",
    )
    parser.add_argument(
        "--k2k-shapes",
        default="bench,100,1000,10000",
        help="the shapes of --k2k-shapes-only: bench (page views) and value sizes in bytes",
    )
    parser.add_argument(
        "--kafka-age-only",
        action="store_true",
        help="run only the Kafka side's age row (bench/kafka_age.py; no Spark): a restarted "
        "reader's first batch on topics of --snapshots snapshots against a young one",
    )
    parser.add_argument(
        "--snapshots",
        default="1000,100000",
        help="old snapshots of the aged barrier topics, comma-separated (--kafka-age-only)",
    )
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="run only the Kafka -> Delta latency rows (--latency-rates, --latency-seconds, "
        "--repeat rounds) after one warm-up query, with each batch's breakdown",
    )
    parser.add_argument(
        "--latency-spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --latency-only: a Spark setting of the session (repeatable)",
    )
    parser.add_argument(
        "--latency-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --latency-only: a job setting of the measured query, e.g. "
        "job.trigger=... or sink.<option>=... (repeatable)",
    )
    parser.add_argument(
        "--latency-variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="with --latency-only: a named set of settings to alternate with the others "
        "(job settings, or spark.sql.* runtime settings), e.g. "
        "'one-task:source.partitionsPerTask=4' (repeatable; none: the defaults)",
    )
    parser.add_argument(
        "--core",
        action="store_true",
        help="only the main rows (about 8 minutes): leave out the rows of how cost grows "
        "with age, partitions and shape that follow them (bench/growth.py, about 20 more)",
    )
    parser.add_argument(
        "--growth-only",
        action="store_true",
        help="run only the rows of how cost grows (bench/growth.py), each a process with "
        "a Kafka broker of its own",
    )
    parser.add_argument(
        "--soak-only",
        action="store_true",
        help="run only the soak (bench/soak.py): the Kafka -> Delta job at 5,000 records/s "
        "for --soak-minutes, the RSS of each of its processes every 15 s",
    )
    parser.add_argument("--soak-minutes", type=float, default=12.0)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=None, help="also write the result to this file")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spark-chkpt-bench-"))
    if args.soak_only:
        from bench import soak

        soak_argv = ["--minutes", str(args.soak_minutes), "--workdir", str(workdir / "soak")]
        if args.bootstrap_servers:
            soak_argv += ["--bootstrap-servers", args.bootstrap_servers]
        return soak.main(soak_argv + (["--json", args.json] if args.json else []))
    if args.growth_only:
        return _growth(args, workdir, result=None)
    if args.min_pause_only:
        return _min_pause_only(args, workdir)
    if args.latency_only:
        return _latency_only(args, workdir)
    if args.scaling_only:
        return _scaling(args, workdir, result=None)
    if args.batch_cost_only:
        return _batch_cost_only(args, workdir)
    if args.aged_table_only:
        return _aged_table_only(args, workdir)
    if args.k2k_shapes_only:
        return _k2k_shapes_only(args, workdir)
    if args.aligned_read_only:
        return _aligned_read_only(args)
    if args.kafka_age_only:
        from bench import kafka_age

        age_argv = ["--snapshots", args.snapshots, "--repeat", str(args.repeat)]
        if args.bootstrap_servers:
            age_argv += ["--bootstrap-servers", args.bootstrap_servers]
        return kafka_age.main(age_argv)
    result = run(
        records=args.records,
        partitions=args.partitions,
        per_trigger=args.per_trigger,
        workdir=workdir,
        repeat=args.repeat,
        client=args.client,
        latency_rates=[int(r) for r in args.latency_rates.split(",") if r.strip()],
        latency_seconds=args.latency_seconds,
        k2k_latency_rates=[int(r) for r in args.k2k_latency_rates.split(",") if r.strip()],
        cold=not args.no_cold,
        quix_python=args.quix_python,
        native=not args.no_native,
        bootstrap_servers=args.bootstrap_servers,
        min_pause=args.min_pause,
        decode=args.decode,
    )
    from bench.report import report

    print(report(result), flush=True)
    if args.json:  # the main rows' figures now, whatever the later rows do
        Path(args.json).write_text(json.dumps(asdict(result), indent=2))
    if args.scaling:
        code = _scaling(args, workdir, result=asdict(result))
        if code or args.core:
            return code
    if args.core:
        return 0
    merged = json.loads(Path(args.json).read_text()) if args.json else asdict(result)
    return _growth(args, workdir, result=merged)


def _aligned_read_only(args: argparse.Namespace) -> int:
    """``--aligned-read-only``: the aligned read of a barrier topic per core, alone."""
    from bench import aligned_read

    with kafka_broker(args.bootstrap_servers) as servers:
        rows = aligned_read.run(
            servers=servers,
            records=args.records,
            partitions=args.partitions,
            snapshot=args.per_trigger,
        )
    print("\n".join(aligned_read.report_lines(rows)), flush=True)
    print(f"records per wall-second: {rows['per_second']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def _pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` arguments as a dict."""
    pairs: dict[str, str] = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key:
            raise SystemExit(f"spark-chkpt: {flag} {value!r}: expected KEY=VALUE")
        pairs[key.strip()] = setting.strip()
    return pairs


def _variants(values: Sequence[str]) -> dict[str, dict[str, str]]:
    """``--latency-variant NAME:KEY=VALUE,KEY=VALUE`` arguments by name; none: one
    variant, ``default``, with no settings."""
    variants: dict[str, dict[str, str]] = {}
    for value in values:
        name, sep, pairs = value.partition(":")
        if not sep or not name.strip():
            raise SystemExit(
                f"spark-chkpt: --latency-variant {value!r}: expected NAME:KEY=VALUE,..."
            )
        variants[name.strip()] = _pairs(
            [p for p in pairs.split(",") if p.strip()], "--latency-variant"
        )
    return variants or {"default": {}}


def _warm_up(spark: Any, *, servers: str, args: argparse.Namespace, workdir: Path) -> None:
    """One Kafka -> Delta query of 20,000 records before a session's measured rows (the
    JVM's and the Python workers' first-use costs out of them)."""
    from bench import batch_cost
    from bench.query import run_query

    warm = "bench-warm"
    batch_cost.fill(servers=servers, topic=warm, records=20_000, partitions=args.partitions)
    run_query(
        spark=spark,
        settings={
            "source.kafka.bootstrap.servers": servers,
            "source.subscribe": warm,
            "source.startingOffsets": "earliest",
            "source.maxOffsetsPerTrigger": "1000",
            "source.kafka.client": args.client,
        },
        workdir=workdir,
        name="warmup",
    )


def _latency_only(args: argparse.Namespace, workdir: Path) -> int:
    """``--latency-only``: the Kafka -> Delta latency rows alone, after one warm-up query:
    ``--repeat`` rounds, each of every ``--latency-variant`` in turn (alternated, so the
    variants see the same load) at each of ``--latency-rates``; each row with its
    batches' breakdown and its records' latency split. A variant's ``spark.*`` keys are
    set on the session for its row only (runtime SQL settings), its other keys are job
    settings."""
    from bench.query import bench_session

    conf = {
        "spark.sql.streaming.numRecentProgressUpdates": "1000",  # every batch of a row
        **_pairs(args.latency_spark_conf, "--latency-spark-conf"),
    }
    settings = _pairs(args.latency_set, "--latency-set")
    variants = _variants(args.latency_variant)
    rates = [int(r) for r in args.latency_rates.split(",") if r.strip()]
    rows: list[dict[str, Any]] = []
    with kafka_broker(args.bootstrap_servers) as servers:
        spark = bench_session(partitions=args.partitions, conf=conf)
        _warm_up(spark, servers=servers, args=args, workdir=workdir)
        for round_ in range(args.repeat):
            for index, (variant, extra) in enumerate(variants.items()):
                for rate in rates:
                    rows.append(
                        _latency_row(
                            spark=spark,
                            servers=servers,
                            workdir=workdir / f"round{round_ + 1}-{index}",
                            args=args,
                            rate=rate,
                            variant=variant,
                            settings={**settings, **extra},
                            round_=round_ + 1,
                        )
                    )
        spark.stop()
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"spark_conf": conf, "settings": settings, "variants": variants, "rows": rows},
                indent=2,
            )
        )
    return 0


def _latency_row(
    *,
    spark: Any,
    servers: str,
    workdir: Path,
    args: argparse.Namespace,
    rate: int,
    variant: str,
    settings: dict[str, str],
    round_: int,
) -> dict[str, Any]:
    """One latency row of ``--latency-only``, printed; with its progress events."""
    from bench import latency

    print(f"[bench] Kafka -> Delta latency at {rate} records/s, {variant}, round {round_}")
    runtime = {k: v for k, v in settings.items() if k.startswith("spark.")}
    job = {k: v for k, v in settings.items() if not k.startswith("spark.")}
    before = {k: spark.conf.get(k, None) for k in runtime}
    for key, value in runtime.items():
        spark.conf.set(key, value)
    workdir.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    progress: list[dict[str, Any]] = []
    try:
        measured = latency.measure(
            spark=spark,
            servers=servers,
            workdir=workdir,
            rate=rate,
            seconds=args.latency_seconds,
            partitions=args.partitions,
            client=args.client,
            progress=progress,
            settings=job,
            tag=f"-{workdir.name}",
        )
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    table = workdir / f"latency{rate}-{workdir.name}"
    row = {
        **asdict(measured),
        "variant": variant,
        "settings": settings,
        "round": round_,
        "load_start": round(load, 1),
        "load_end": round(os.getloadavg()[0], 1),
        "breakdown": latency.breakdown(progress, table),
        "split": latency.latency_split(progress, table),
    }
    print(json.dumps(row), flush=True)
    return {**row, "progress": progress}


def _batch_cost_only(args: argparse.Namespace, workdir: Path) -> int:
    """``--batch-cost-only``: the per-batch fixed cost alone, after one warm-up query."""
    from bench import batch_cost
    from bench.batch_anatomy import table_lines
    from bench.query import bench_session

    with kafka_broker(args.bootstrap_servers) as servers:
        spark = bench_session(partitions=args.partitions)
        _warm_up(spark, servers=servers, args=args, workdir=workdir)
        cost = batch_cost.measure(
            spark=spark,
            servers=servers,
            workdir=workdir,
            partitions=args.partitions,
            client=args.client,
        )
        spark.stop()
    print(json.dumps(cost["median_ms"]), flush=True)
    total = cost["spark_ms"].get("triggerExecution", 0.0)
    print("\n".join(table_lines([tuple(r) for r in cost["anatomy"]], total=total)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(cost, indent=2))
    return 0


def _k2k_shapes_only(args: argparse.Namespace, workdir: Path) -> int:
    """``--k2k-shapes-only``: Kafka -> Kafka by shape alone (bench/k2k_shapes.py), in one
    warm session with Spark's connectors."""
    from bench import k2k_shapes
    from bench.query import bench_session

    shapes = [s.strip() for s in args.k2k_shapes.split(",") if s.strip()]
    unknown = sorted(set(shapes) - set(k2k_shapes.SHAPES))
    if unknown:
        raise SystemExit(
            f"spark-chkpt: --k2k-shapes: unknown shape(s) {unknown}; one of {k2k_shapes.SHAPES}"
        )
    with kafka_broker(args.bootstrap_servers) as servers:
        spark = bench_session(partitions=args.partitions, connectors=True)
        rows = k2k_shapes.measure(
            spark=spark,
            servers=servers,
            workdir=workdir,
            partitions=args.partitions,
            shapes=shapes,
            repeat=args.repeat,
        )
        spark.stop()
    print("\n".join(k2k_shapes.report_lines(rows)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def _aged_table_only(args: argparse.Namespace, workdir: Path) -> int:
    """``--aged-table-only``: the aged table row alone, in one warm session."""
    from bench import aged_table
    from bench.query import bench_session

    with kafka_broker(args.bootstrap_servers) as servers:
        spark = bench_session(partitions=args.partitions)
        rows = aged_table.measure(
            spark=spark,
            servers=servers,
            workdir=workdir,
            partitions=args.partitions,
            client=args.client,
            versions=[int(n) for n in args.aged_versions.split(",") if n.strip()],
            rewritten=args.aged_rewritten or None,
        )
        spark.stop()
    print("\n".join(aged_table.report_lines(rows)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def _scaling(args: argparse.Namespace, workdir: Path, *, result: dict[str, Any] | None) -> int:
    """The ``--scaling`` rows (bench/scaling.py) on the broker of ``--bootstrap-servers``
    or a real Kafka broker started for them; with ``--json``, under ``scaling``."""
    from bench import scaling

    with kafka_broker(args.bootstrap_servers) as servers:
        rows = scaling.run(
            servers=servers,
            workdir=workdir,
            records=args.scaling_records,
            per_trigger=max(1, args.scaling_records // 10),
            client=args.client,
            state_sizes=[int(k) for k in args.state_keys.split(",") if k.strip()],
        )
    print("\n".join(scaling.report_lines(rows)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({**(result or {}), "scaling": rows}, indent=2))
    return 0


def _growth(args: argparse.Namespace, workdir: Path, *, result: dict[str, Any] | None) -> int:
    """The rows of how cost grows (bench/growth.py), each on a broker of its own (not
    ``--bootstrap-servers``: the Quix row fills a ``bench`` topic of its own); with
    ``--json``, under ``growth``. Non-zero when a row failed."""
    from bench import growth

    rows = growth.plan(client=args.client, quix_python=args.quix_python, repeat=min(args.repeat, 2))
    figures = growth.run(rows=rows, workdir=workdir / "growth")
    print("\n".join(growth.summary_lines(figures)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({**(result or {}), "growth": figures}, indent=2))
    return 1 if figures["failed"] else 0


def _min_pause_only(args: argparse.Namespace, workdir: Path) -> int:
    """``--min-pause-only``: the min pause rows alone, on the broker of ``--bootstrap-servers``
    or a real Kafka broker started for the run."""
    from bench import min_pause
    from bench.query import bench_session

    pause = args.min_pause or "500ms"
    with kafka_broker(args.bootstrap_servers) as servers:
        spark = bench_session(partitions=args.partitions)
        rows = min_pause.measure(
            spark=spark,
            servers=servers,
            workdir=workdir,
            partitions=args.partitions,
            client=args.client,
            pause=pause,
        )
        spark.stop()
    print("\n".join(min_pause.report_lines(rows)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0
