"""The seeds' stateful example: page views from Kafka → per-app counts → Delta, exactly once.

Seed 002's figure: the source snapshots its offsets, the counting operator its keyed
state ``(app1, 1000), (app2, 5000)``, the sink completes the snapshot. Here batch N is
snapshot N: Spark's ``offsets/N``, the state store's version N+1 and the Delta commit
carrying ``txn(appId, N)`` cover the same records.

More: docs/concepts/runtime.md (jobs/page_views.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spark_chkpt.jobs import kafka_to_delta

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("spark_chkpt.jobs.page_views")

# What --help prints after the module's summary: the modes and how to run the job.
USAGE = """Three ways to write the counts (``--mode``):

* ``complete`` — ``groupBy("app").count()`` in ``outputMode("complete")`` into
  ``chkpt-delta``: each snapshot's commit replaces the table with the whole result;
* ``upsert`` — the same aggregate in ``outputMode("update")`` through ``foreachBatch``
  with :class:`spark_chkpt.DeltaUpsert`: each snapshot is one MERGE of the changed apps;
* ``windowed`` — per app per tumbling window (``job.window``, default 1 minute) with a
  watermark (``job.watermark``, default 10 seconds) in ``outputMode("append")`` into
  ``chkpt-delta``: each window is appended once, when the watermark closes it.

Run it any of these ways:

    spark-submit --properties-file conf/spark-defaults.conf \\
        jobs/page_views.py --conf-file conf/page_views.properties --mode upsert
    python -m spark_chkpt.jobs.page_views --bootstrap-servers host:9092 --mode complete
    spark-chkpt-page-views --topic page-views --table /data/pv --checkpoint /chk/pv

Settings as for kafka_to_delta (``source.*``, ``sink.*``, ``job.*``; ``--set``), from
``conf/page_views.properties``. The JSON value needs ``app`` (string) and, for
``windowed``, ``ts`` (timestamp); malformed JSON fails the query naming its offset.
"""

MODES = ("complete", "upsert", "windowed")

DEFAULTS: dict[str, str] = {
    "source.startingOffsets": "earliest",
    "job.queryName": "page_view_counts",
    "job.trigger": "processingTime=10 seconds",
    "job.badRecords": "fail",
    "job.kafkaColumns": "false",
    "job.mode": "complete",
    "job.window": "1 minute",
    "job.watermark": "10 seconds",
    "job.schema": "app string, ts timestamp",
    # The page views carry more fields than the counts read: not schema drift.
    "job.countUnknownFields": "false",
}


def _flags(parser: argparse.ArgumentParser) -> Mapping[str, str]:
    parser.add_argument("--mode", choices=MODES, help="how the counts reach the table")
    return {"mode": "job.mode"}


def settings_from(argv: Sequence[str] | None) -> tuple[dict[str, str], argparse.Namespace]:
    return kafka_to_delta.settings_from(
        argv,
        prog="page_views",
        description=(__doc__ or "").replace(
            "More: docs/concepts/runtime.md (jobs/page_views.py).\n", ""
        )
        + "\n"
        + USAGE,
        defaults=DEFAULTS,
        conf_name="page_views.properties",
        extra=_flags,
    )


def counts(spark: SparkSession, settings: Mapping[str, str]) -> DataFrame:
    """The per-app counts of ``job.mode`` (windowed: per app and window)."""
    from pyspark.sql import functions as F

    from spark_chkpt.errors import ConfigError

    mode = settings.get("job.mode", "complete")
    if mode not in MODES:
        raise ConfigError("job.mode", mode, f"one of {', '.join(MODES)}")
    if settings.get("job.badRecords", "fail").lower() != "fail":
        raise ConfigError(
            "job.badRecords",
            settings["job.badRecords"],
            "the page-view counts take 'fail' only: a malformed record stops the query "
            "naming its offset (run kafka_to_delta with deadLetter to sort them out first)",
        )
    views = kafka_to_delta.build_query_input(spark, {**settings, "job.kafkaColumns": "false"})
    if mode != "windowed":
        return views.groupBy("app").count()
    return (
        views.withWatermark("ts", settings.get("job.watermark", "10 seconds"))
        .groupBy("app", F.window("ts", settings.get("job.window", "1 minute")))
        .count()
        .select(
            "app",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "count",
        )
    )


def start(spark: SparkSession, settings: Mapping[str, str]) -> StreamingQuery:
    from spark_chkpt.errors import ConfigError

    mode = settings.get("job.mode", "complete")
    sink = {k[len("sink.") :]: v for k, v in settings.items() if k.startswith("sink.")}
    for required in ("path", "checkpointLocation"):
        if not sink.get(required):
            raise ConfigError(f"sink.{required}", None, "required")
    result = counts(spark, settings)
    name = settings.get("job.queryName", "page_view_counts")
    if mode == "upsert":
        from spark_chkpt import DeltaUpsert

        upsert = DeltaUpsert(
            path=sink["path"],
            keys=["app"],
            checkpoint_location=sink["checkpointLocation"],
            query_name=name,
        )

        def write(batch: DataFrame, batch_id: int) -> None:
            upsert(batch, batch_id)

        writer = (
            result.writeStream.outputMode("update")
            .foreachBatch(write)
            .option("checkpointLocation", sink["checkpointLocation"])
        )
    else:
        writer = result.writeStream.format("chkpt-delta").outputMode(
            "complete" if mode == "complete" else "append"
        )
        for key, value in sink.items():
            writer = writer.option(key, value)
    return kafka_to_delta.with_trigger(writer.queryName(name), settings).start()


def main(argv: Sequence[str] | None = None) -> int:
    settings, args = settings_from(argv)
    spark = kafka_to_delta.job_session(settings, args)
    from spark_chkpt.metrics.reporter import SnapshotReporter

    reporter = SnapshotReporter.attach(spark)

    def start_query() -> StreamingQuery:  # again at each restart, on the same checkpoint
        query = start(spark, settings)
        reporter.track(query, checkpoint_location=settings["sink.checkpointLocation"])
        log.info(
            "query %s started (%s): %s -> %s (checkpoint %s)",
            query.name,
            settings.get("job.mode"),
            settings.get("source.subscribe") or settings.get("source.subscribePattern"),
            settings.get("sink.path"),
            settings.get("sink.checkpointLocation"),
        )
        return query

    return kafka_to_delta.run_until_done(start_query, settings, metrics=reporter.restarts)


if __name__ == "__main__":
    sys.exit(main())
