"""Spark's own connectors on the benchmark's topic, in the same run as the chkpt formats.

More: docs/performance/benchmarks.md (bench/native.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TANSU_NOTE = (
    "the embedded Tansu broker serves Spark's Java consumer only the first record of each "
    "record batch: run the benchmark on a Kafka broker (--bootstrap-servers)"
)


@dataclass
class NativeRuns:
    kafka_to_delta_s: float
    kafka_to_delta_batches: int
    kafka_to_kafka_s: float
    kafka_to_kafka_rows: int  # what the copy holds: >= records (at least once)
    jvm_path_s: float | None = None  # (nj); None in runs from before it existed
    jvm_path_rows: int | None = None


def _native_settings(kafka_settings: dict[str, str]) -> dict[str, str]:
    """The chkpt-kafka source settings without the options only chkpt-kafka knows."""
    return {k: v for k, v in kafka_settings.items() if k != "source.kafka.client"}


def kafka_to_delta(
    *, spark: Any, kafka_settings: dict[str, str], records: int, workdir: Path, name: str
) -> tuple[float, int]:
    """(n): seconds and micro-batches; raises unless the table holds ``records`` rows."""
    from bench.query import run_query

    seconds, phases, _ = run_query(
        spark=spark,
        settings=_native_settings(kafka_settings),
        workdir=workdir,
        name=name,
        source_format="kafka",
        sink_format="delta",
    )
    rows = spark.read.format("delta").load(str(workdir / name)).count()
    if rows != records:
        raise RuntimeError(
            f"native Kafka -> Delta ({name}) wrote {rows} of {records} rows"
            + (f"; {TANSU_NOTE}" if rows < records else "")
        )
    return seconds, int(phases["batches"])


def kafka_to_kafka(
    *,
    spark: Any,
    servers: str,
    topic: str,
    records: int,
    partitions: int,
    per_trigger: int,
    workdir: Path,
    name: str,
) -> tuple[float, int]:
    """(nk): seconds and the rows the copy holds; raises if it holds fewer than
    ``records``."""
    from spark_chkpt.kafka.client.topics import create_topic

    out = f"bench-{name}-out"
    create_topic(bootstrap_servers=servers, name=out, partitions=partitions)
    rows = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load()
        .select("key", "value")
    )
    return _into_kafka_sink(
        spark=spark,
        rows=rows,
        servers=servers,
        out=out,
        workdir=workdir,
        name=name,
        records=records,
        what="native Kafka -> Kafka",
        short=TANSU_NOTE,
    )


def _into_kafka_sink(
    *,
    spark: Any,
    rows: Any,
    servers: str,
    out: str,
    workdir: Path,
    name: str,
    records: int,
    what: str,
    short: str,
) -> tuple[float, int]:
    """Write the streaming ``rows`` into topic ``out`` with Spark's ``kafka`` sink
    (``Trigger.AvailableNow``): the seconds, and the records ``out`` then holds; raises
    if it holds fewer than ``records`` (``short``: the likely cause)."""
    query = (
        rows.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", out)
        .option("checkpointLocation", str(workdir / f"chk-{name}"))
        .queryName(f"bench_{name}")
        .trigger(availableNow=True)
    )
    started = time.monotonic()
    running = query.start()
    running.awaitTermination()
    seconds = time.monotonic() - started
    if running.exception() is not None:
        raise RuntimeError(f"{what} ({name}) failed: {running.exception()}")
    copied = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", out)
        .load()
        .count()
    )
    if copied < records:
        raise RuntimeError(f"{what} ({name}) copied {copied} of {records} records; {short}")
    return seconds, copied


def jvm_path(
    *,
    spark: Any,
    servers: str,
    topic: str,
    records: int,
    partitions: int,
    per_trigger: int,
    workdir: Path,
    name: str,
    source_client: str,
) -> tuple[float, int]:
    """(nj): seconds and the rows the copy holds; raises if it holds fewer than
    ``records``."""
    from pyspark.sql import functions as F

    from bench.attempt_tag import attempt_tag
    from spark_chkpt.alignment.barrier import ATTEMPT_HEADER
    from spark_chkpt.kafka.client.topics import create_topic

    tag = F.pandas_udf(attempt_tag, "binary")  # type: ignore[call-overload]
    out = f"bench-{name}-out"
    create_topic(bootstrap_servers=servers, name=out, partitions=partitions)
    header = F.struct(F.lit(ATTEMPT_HEADER).alias("key"), tag(F.lit(1)).alias("value"))
    rows = (
        spark.readStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .option("kafka.client", source_client)
        .load()
        .select("key", "value", F.array(header).alias("headers"))
    )
    return _into_kafka_sink(
        spark=spark,
        rows=rows,
        servers=servers,
        out=out,
        workdir=workdir,
        name=name,
        records=records,
        what="JVM path bound",
        short="the chkpt-kafka source read fewer",
    )


def measure(
    *,
    spark: Any,
    servers: str,
    topic: str,
    kafka_settings: dict[str, str],
    records: int,
    partitions: int,
    per_trigger: int,
    workdir: Path,
) -> NativeRuns:
    """(n) after a warm-up of Spark's Kafka source and delta-spark's sink on the same
    data (the chkpt rows had theirs), then (nk)."""
    kafka_to_delta(
        spark=spark,
        kafka_settings=kafka_settings,
        records=records,
        workdir=workdir,
        name="native-warmup",
    )
    delta_s, batches = kafka_to_delta(
        spark=spark, kafka_settings=kafka_settings, records=records, workdir=workdir, name="n"
    )
    k2k_s, rows = kafka_to_kafka(
        spark=spark,
        servers=servers,
        topic=topic,
        records=records,
        partitions=partitions,
        per_trigger=per_trigger,
        workdir=workdir,
        name="nk",
    )
    copy = {
        "spark": spark,
        "servers": servers,
        "topic": topic,
        "records": records,
        "partitions": partitions,
        "per_trigger": per_trigger,
        "workdir": workdir,
        "source_client": kafka_settings.get("source.kafka.client", "kafka-python"),
    }
    jvm_path(**copy, name="nj-warmup")  # the pandas UDF's worker and imports
    jvm_s, jvm_rows = jvm_path(**copy, name="nj")
    return NativeRuns(
        kafka_to_delta_s=delta_s,
        kafka_to_delta_batches=batches,
        kafka_to_kafka_s=k2k_s,
        kafka_to_kafka_rows=rows,
        jvm_path_s=jvm_s,
        jvm_path_rows=jvm_rows,
    )


def ratios(result: Any) -> None:
    """(b)/(n) and chkpt k2k/(nk), records/s over records/s (above 1: chkpt is faster)."""
    native = result.native
    if not native:
        return
    result.ratios["b/n"] = round(native["kafka_to_delta_s"] / result.seconds["b_exactly_once"], 3)
    if result.kafka_to_kafka:
        fastest = min(k2k["upstream_s"] for k2k in result.kafka_to_kafka)
        result.ratios["k2k/nk"] = round(native["kafka_to_kafka_s"] / fastest, 3)
        if native.get("jvm_path_s"):
            result.ratios["k2k/nj"] = round(native["jvm_path_s"] / fastest, 3)
    if native.get("jvm_path_s"):
        result.ratios["nj/nk"] = round(native["kafka_to_kafka_s"] / native["jvm_path_s"], 3)


def report_lines(result: Any) -> list[str]:
    native = result.native
    if not native:
        return []
    n, nk = native["kafka_to_delta_s"], native["kafka_to_kafka_s"]
    return [
        f"{'(n) native kafka -> delta-spark sink, exactly once':<50}{n:>9.2f}"
        f"{round(result.records / n):>12,}",
        f"{'(nk) native kafka -> kafka sink, at least once':<50}{nk:>9.2f}"
        f"{round(result.records / nk):>12,}",
        f"against Spark's own connectors: (b)/(n) = {result.ratios['b/n']:.2f}"
        + (
            f"   chkpt k2k (fastest sink client)/(nk) = {result.ratios['k2k/nk']:.2f}"
            if "k2k/nk" in result.ratios
            else ""
        )
        + f"   (n) {native['kafka_to_delta_batches']} batches, (nk) copied "
        f"{native['kafka_to_kafka_rows']:,} rows",
        *_jvm_path_lines(result),
    ]


def _jvm_path_lines(result: Any) -> list[str]:
    nj = result.native.get("jvm_path_s")
    if not nj:
        return []
    return [
        f"{'(nj) chkpt source -> Spark kafka sink, tagged':<50}{nj:>9.2f}"
        f"{round(result.records / nj):>12,}",
        f"the JVM write path's bound: (nj)/(nk) = {result.ratios['nj/nk']:.2f}"
        + (
            f"   chkpt k2k / (nj) = {result.ratios['k2k/nj']:.2f}"
            if "k2k/nj" in result.ratios
            else ""
        ),
    ]
