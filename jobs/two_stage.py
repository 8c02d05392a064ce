"""Kafka → Spark → Kafka → Spark → Delta, exactly once across both queries.

Stage A reads the input topic, enriches each JSON event and writes it to the middle
topic with ``chkpt-kafka`` (barrier markers at every snapshot). Stage B reads the middle
topic aligned on those barriers and appends to Delta with ``chkpt-delta``. Each stage
is its own query with its own checkpoint; run them as two jobs:

    spark-submit jobs/two_stage.py --stage a --bootstrap-servers host:9092 \\
        --input page-views --middle page-views-enriched --checkpoint /chk/stage-a
    spark-submit jobs/two_stage.py --stage b --bootstrap-servers host:9092 \\
        --middle page-views-enriched --table /data/page_views --checkpoint /chk/stage-b

(or ``python -m spark_chkpt.jobs.two_stage ...``). ``--stage m`` relays ``--input``
(aligned) to ``--middle`` unchanged, for a longer chain: ``a`` (raw → t1), ``m`` (t1 →
t2), ``b`` (t2 → Delta). Each stage runs under the restart
supervisor (:mod:`spark_chkpt.restart`): ``--restart restart-strategy.type=fixed-delay
--restart restart-strategy.fixed-delay.attempts=3`` restarts a failed query from its
checkpoint, as in Flink; without ``--restart`` a failure exits 1. A consumer other than chkpt-kafka
reading the middle topic sees the records of failed stage-A attempts too; see the
README for the header it can filter on.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

log = logging.getLogger("spark_chkpt.jobs.two_stage")


def _trigger(writer: DataStreamWriter, trigger: str) -> DataStreamWriter:
    if trigger == "availableNow":
        return writer.trigger(availableNow=True)
    if trigger.startswith("processingTime="):
        return writer.trigger(processingTime=trigger.split("=", 1)[1])
    raise SystemExit(f"--trigger {trigger!r}: availableNow or processingTime=<interval>")


def stage_a(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    """input topic → parse, enrich (session bucket, slow-view flag) → middle topic."""
    from pyspark.sql import functions as F

    from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL

    reader = (
        spark.readStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    for item in args.source_option:
        key, _, value = item.partition("=")
        reader = reader.option(key.strip(), value.strip())
    events = reader.load().select(
        "key", F.from_json(F.col("value").cast("string"), PAGE_VIEW_SCHEMA_DDL).alias("e")
    )
    enriched = events.select(
        "key",
        F.to_json(
            F.struct(
                "e.*",
                (F.col("e.duration_ms") > 10_000).alias("slow_view"),
                F.date_trunc("hour", F.col("e.ts")).alias("hour"),
            )
        ).alias("value"),
    )
    return _kafka_writer(enriched, args, "stage_a").start()


def _kafka_writer(frame: DataFrame, args: argparse.Namespace, name: str) -> DataStreamWriter:
    """``frame`` into ``--middle`` through ``chkpt-kafka``, with ``--sink-option``s and
    the trigger: the sink of stages a and m."""
    writer = (
        frame.writeStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("topic", args.middle)
        .option("checkpointLocation", args.checkpoint)
        .queryName(name)
    )
    for item in args.sink_option:
        key, _, value = item.partition("=")
        writer = writer.option(key.strip(), value.strip())
    return _trigger(writer, args.trigger)


def _aligned_reader(spark: SparkSession, args: argparse.Namespace, topic: str) -> DataFrame:
    """``topic`` through ``chkpt-kafka`` from the earliest offsets, with ``--alignment``,
    ``--alignment-timeout`` and ``--source-option``s: the source of stages m and b."""
    reader = (
        spark.readStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("alignment", args.alignment)
    )
    if args.alignment_timeout:
        reader = reader.option("alignmentTimeout", args.alignment_timeout)
    for item in args.source_option:
        key, _, value = item.partition("=")
        reader = reader.option(key.strip(), value.strip())
    return reader.load()


def stage_m(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    """input topic (aligned on its upstream's barriers) → middle topic, each record as it
    is: the middle job of a longer chain (raw → a → t1 → m → t2 → b → Delta)."""
    rows = _aligned_reader(spark, args, args.input).select("key", "value")
    return _kafka_writer(rows, args, "stage_m").start()


def stage_b(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    """middle topic (aligned on stage A's barriers) → Delta."""
    from pyspark.sql import functions as F

    from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL

    schema = f"{PAGE_VIEW_SCHEMA_DDL}, slow_view boolean, hour timestamp"
    rows = _aligned_reader(spark, args, args.middle).select(
        F.from_json(F.col("value").cast("string"), schema).alias("e"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
    )
    writer = (
        rows.select("e.*", "kafka_partition", "kafka_offset")
        .writeStream.format("chkpt-delta")
        .option("path", args.table)
        .option("checkpointLocation", args.checkpoint)
        .option("partitionBy", "app")
        .queryName("stage_b")
    )
    return _trigger(writer, args.trigger).start()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="two_stage", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", choices=("a", "m", "b"), required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--input", default="page-views")
    parser.add_argument("--middle", default="page-views-enriched")
    parser.add_argument("--table", help="stage b: the Delta table")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--trigger", default="processingTime=5 seconds")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument(
        "--alignment", default="aligned", choices=("aligned", "unaligned", "at-least-once", "none")
    )
    parser.add_argument("--alignment-timeout", default=None)
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the stage's chkpt-kafka source, e.g. partitionsPerTask=3",
    )
    parser.add_argument(
        "--sink-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="stages a and m: an option of their chkpt-kafka sink, e.g. "
        "kafka.delivery.timeout.ms=5000",
    )
    parser.add_argument(
        "--restart",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a restart-strategy.* setting by Flink's name, e.g. "
        "restart-strategy.type=fixed-delay (default: none, a failure exits 1)",
    )
    parser.add_argument("--master", default=None)
    args = parser.parse_args(argv)
    restart = dict(kv.split("=", 1) for kv in args.restart if "=" in kv)
    if len(restart) != len(args.restart):
        parser.error("--restart takes KEY=VALUE, e.g. restart-strategy.type=fixed-delay")
    if args.stage == "b" and not args.table:
        parser.error("--stage b needs --table")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from spark_chkpt.metrics.reporter import SnapshotReporter
    from spark_chkpt.session import build_session

    spark = build_session(
        app_name=f"two_stage_{args.stage}",
        master=args.master,
        conf={"spark.sql.shuffle.partitions": "4"},
    )
    from spark_chkpt.restart import RestartConfig, run_supervised

    config = RestartConfig.from_options(restart)  # a bad setting fails here, naming it
    reporter = SnapshotReporter.attach(spark)

    def start_query() -> StreamingQuery:  # again at each restart, on the same checkpoint
        stage = {"a": stage_a, "m": stage_m, "b": stage_b}[args.stage]
        query = stage(spark, args)
        reporter.track(query, checkpoint_location=args.checkpoint)
        return query

    return int(
        run_supervised(
            start=start_query,
            strategy=config,
            metrics=reporter.restarts,
            checkpoint_location=args.checkpoint,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
