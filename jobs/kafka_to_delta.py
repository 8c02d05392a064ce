"""Kafka → Delta, exactly once: JSON values parsed into columns, appended by chkpt-delta.

Run it any of these ways:

    spark-submit --properties-file conf/spark-defaults.conf \\
        jobs/kafka_to_delta.py --conf-file conf/kafka_to_delta.properties
    python -m spark_chkpt.jobs.kafka_to_delta --set source.subscribe=orders
    spark-chkpt-kafka-to-delta --bootstrap-servers host:9092 --topic orders \\
        --table /data/orders --checkpoint /chk/orders

Settings: built-in defaults, then ``--conf-file`` (default
``./conf/kafka_to_delta.properties`` when it exists, else the copy installed with the
package), then ``--set key=value`` and the shortcut flags. Keys are
``source.<chkpt-kafka option>``, ``sink.<chkpt-delta option>`` and ``job.<name>``, and
Flink's restart settings (``restart-strategy.*``,
``execution.checkpointing.tolerable-failed-checkpoints``; see
:mod:`spark_chkpt.restart`): unset, a failed query is not restarted and the job exits 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

    from spark_chkpt.metrics.restarts import RestartMetrics

log = logging.getLogger("spark_chkpt.jobs.kafka_to_delta")

DEFAULTS: dict[str, str] = {
    "source.startingOffsets": "earliest",
    "job.queryName": "kafka_to_delta",
    "job.trigger": "processingTime=10 seconds",
    "job.badRecords": "fail",
    "job.kafkaColumns": "true",
}
_SHORTCUTS = {
    "bootstrap_servers": "source.kafka.bootstrap.servers",
    "topic": "source.subscribe",
    "table": "sink.path",
    "checkpoint": "sink.checkpointLocation",
    "schema": "job.schema",
    "trigger": "job.trigger",
    "max_offsets_per_trigger": "source.maxOffsetsPerTrigger",
}


def settings_from(
    argv: Sequence[str] | None,
    *,
    prog: str = "kafka_to_delta",
    description: str | None = __doc__,
    defaults: Mapping[str, str] = DEFAULTS,
    conf_name: str = "kafka_to_delta.properties",
    extra: Callable[[argparse.ArgumentParser], Mapping[str, str]] | None = None,
) -> tuple[dict[str, str], argparse.Namespace]:
    """Settings of a Kafka → Delta job: ``defaults``, then the ``--conf-file`` (default
    ``./conf/<conf_name>`` or the installed copy), then ``--set`` and the flags.
    ``extra`` adds a job's own flags and returns their ``attribute -> setting key``."""
    from spark_chkpt.conf import settings_file
    from spark_chkpt.session import load_properties

    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shortcuts = dict(_SHORTCUTS)
    if extra is not None:
        shortcuts.update(extra(parser))
    parser.add_argument("--conf-file", type=Path, default=None)
    parser.add_argument(
        "--spark-conf",
        type=Path,
        default=None,
        help="spark-defaults.conf to apply when not under spark-submit (default: "
        "./conf/spark-defaults.conf, else the copy installed with the package)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--topic")
    parser.add_argument("--table")
    parser.add_argument("--checkpoint")
    parser.add_argument("--schema", help="Spark DDL of the JSON value")
    parser.add_argument("--trigger", help="availableNow, once, or processingTime=<interval>")
    parser.add_argument("--max-offsets-per-trigger")
    parser.add_argument("--master", default=None, help="default: spark-submit's, else local[*]")
    args = parser.parse_args(argv)
    settings = dict(defaults)
    conf_file = args.conf_file or settings_file(conf_name)
    if conf_file is not None:
        settings.update(load_properties(conf_file))
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        settings[key.strip()] = value.strip()
    for attr, key in shortcuts.items():
        value = getattr(args, attr)
        if value is not None:
            settings[key] = str(value)
    return settings, args


def _section(settings: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix) :]: v for k, v in settings.items() if k.startswith(prefix)}


def build_query_input(
    spark: SparkSession, settings: Mapping[str, str], *, source_format: str = "chkpt-kafka"
) -> DataFrame:
    """The chkpt-kafka stream with the JSON value parsed into the schema's columns.

    ``source_format``: another source of the same schema (the benchmark's ceiling)."""
    from pyspark.sql import functions as F

    from spark_chkpt.errors import ConfigError

    job = _section(settings, "job.")
    schema = job.get("schema")
    if not schema and job.get("schemaFile"):
        schema = Path(job["schemaFile"]).read_text().strip()
    if not schema:
        raise ConfigError("job.schema", None, "required: the JSON value's columns as Spark DDL")
    bad = job.get("badRecords", "fail").lower()
    if bad not in ("fail", "keep", "deadletter"):
        raise ConfigError("job.badRecords", bad, "one of 'fail', 'keep', 'deadLetter'")
    if bad == "deadletter" and not settings.get("sink.deadLetterPath"):
        raise ConfigError(
            "sink.deadLetterPath",
            None,
            "required with job.badRecords=deadLetter: the Delta table malformed records go to",
        )
    reader = spark.readStream.format(source_format)
    for key, value in _section(settings, "source.").items():
        reader = reader.option(key, value)
    raw = reader.load()
    parsed = raw.select(
        F.from_json(
            F.col("value").cast("string"),
            f"{schema}, _corrupt_record string",
            {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
        ).alias("v"),
        "value",  # cast to text only for a malformed record (its error or _malformed)
        "key",
        "topic",
        "partition",
        "offset",
        "timestamp",
    )
    malformed = F.col("v._corrupt_record").isNotNull()
    if bad == "fail":
        # The check is part of the parsed value, so the optimizer can neither prune it nor
        # push it below the parse: as a filter it was pushed below the projection and every
        # record's JSON was parsed twice (once for the filter, once for the columns).
        failure = F.raise_error(
            F.concat(
                F.lit("malformed JSON value at "),
                F.col("topic"),
                F.lit("-"),
                F.col("partition").cast("string"),
                F.lit(" offset "),
                F.col("offset").cast("string"),
                F.lit(" (job.badRecords=fail; set keep to write it to _malformed): "),
                F.substring(F.col("value").cast("string"), 1, 200),
            )
        )
        parsed = parsed.select(
            F.when(malformed, failure).otherwise(F.col("v")).alias("v"),
            "value",
            "key",
            "topic",
            "partition",
            "offset",
            "timestamp",
        )
    names = spark.createDataFrame([], schema).columns
    if job.get("countUnknownFields", "true").lower() == "true":
        # Producers may add fields the declared schema lacks: they are ignored, and
        # counted per batch in the query's progress (observedMetrics["schema_drift"]).
        keys = F.json_object_keys(F.col("value").cast("string"))
        unknown = F.size(F.array_except(keys, F.array(*[F.lit(n) for n in names]))) > 0
        parsed = parsed.observe(
            "schema_drift",
            F.sum(F.when(unknown, 1).otherwise(0)).alias("records_with_unknown_fields"),
            F.count(F.lit(1)).alias("records"),
        )
    columns = [F.col(f"v.{name}") for name in names]
    if bad == "keep":
        columns.append(F.when(malformed, F.col("value").cast("string")).alias("_malformed"))
    if bad == "deadletter":
        # The sink (deadLetterPath) commits these rows to the dead-letter table, exactly
        # once with the batch, and the table gets only the good rows.
        error = F.when(
            F.expr("try_parse_json(CAST(value AS STRING))").isNull(), F.lit("not valid JSON")
        ).otherwise(F.lit(f"JSON that does not fit the schema: {schema}"))
        letter = F.struct(
            F.col("topic"),
            F.col("partition"),
            F.col("offset"),
            F.col("timestamp"),
            F.col("key"),
            F.col("value"),
            error.alias("error"),
        )
        columns.append(F.when(malformed, letter).alias("_dead_letter"))
    if job.get("kafkaColumns", "true").lower() == "true":
        columns += [
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
            F.col("timestamp").alias("kafka_timestamp"),
        ]
    return parsed.select(*columns)


def with_trigger(writer: DataStreamWriter, settings: Mapping[str, str]) -> DataStreamWriter:
    """``job.trigger``: availableNow, once, or processingTime=<interval>."""
    from spark_chkpt.errors import ConfigError

    trigger = settings.get("job.trigger", "availableNow").strip()
    if trigger == "availableNow":
        return writer.trigger(availableNow=True)
    if trigger == "once":
        return writer.trigger(once=True)
    if trigger.startswith("processingTime="):
        return writer.trigger(processingTime=trigger.split("=", 1)[1])
    raise ConfigError(
        "job.trigger",
        trigger,
        "availableNow, once, or processingTime=<interval> such as 10 seconds",
    )


def start(
    spark: SparkSession,
    settings: Mapping[str, str],
    *,
    source_format: str = "chkpt-kafka",
    sink_format: str = "chkpt-delta",
) -> StreamingQuery:
    """Start the job's query. The benchmark swaps in another source of the same schema
    (``source_format``) or sink (``sink_format``, for example ``noop``)."""
    job = _section(settings, "job.")
    query_input = build_query_input(spark, settings, source_format=source_format)
    writer = query_input.writeStream.format(sink_format)
    for key, value in _section(settings, "sink.").items():
        writer = writer.option(key, value)
    writer = writer.queryName(job.get("queryName", "kafka_to_delta"))
    return with_trigger(writer, settings).start()


def job_session(settings: Mapping[str, str], args: argparse.Namespace) -> SparkSession:
    """Logging, then the session: ``--spark-conf`` (default ./conf/spark-defaults.conf or
    the installed copy) unless spark-submit already applied a properties file."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from spark_chkpt.conf import settings_file
    from spark_chkpt.session import build_session, load_properties

    spark_conf: dict[str, str] = {}
    conf_path = args.spark_conf or settings_file("spark-defaults.conf")
    if conf_path is not None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not spark-submit
        spark_conf = load_properties(conf_path)
    return build_session(
        app_name=settings.get("job.queryName", "kafka_to_delta"),
        master=args.master,
        conf=spark_conf,
    )


def run_until_done(
    start_query: Callable[[], StreamingQuery],
    settings: Mapping[str, str],
    *,
    metrics: RestartMetrics | None = None,
) -> int:
    """Start the query and wait for it, restarting it per the ``restart-strategy.*``
    settings (default ``none``: a failure is logged and the exit code is 1, as before
    there was a supervisor). Each start gets a watcher, so ``spark-chkpt savepoint stop``
    can stop it with a savepoint. Returns the exit code of
    :class:`spark_chkpt.restart.ExitCode`."""
    from spark_chkpt.restart import ExitCode, RestartConfig, run_supervised

    config = RestartConfig.from_options(settings)
    checkpoint_location = settings.get("sink.checkpointLocation")
    watchers = []
    queries: list[StreamingQuery] = []

    def start_watched() -> StreamingQuery:
        query = start_query()
        queries.append(query)
        if checkpoint_location:
            from spark_chkpt.savepoint.stop import StopRequests

            watchers.append(
                StopRequests(
                    query, checkpoint_location=checkpoint_location, table=settings.get("sink.path")
                ).start()
            )
        return query

    code = run_supervised(
        start=start_watched,
        strategy=config,
        metrics=metrics,
        checkpoint_location=settings.get("sink.checkpointLocation"),
    )
    for watcher in watchers:
        watcher.join()
    if code == ExitCode.OK and queries:
        for progress in queries[-1].recentProgress[-3:]:
            log.info("batch %s: %s rows", progress["batchId"], progress["numInputRows"])
    return int(code)


def main(argv: Sequence[str] | None = None) -> int:
    settings, args = settings_from(argv)
    spark = job_session(settings, args)
    from spark_chkpt.metrics.reporter import SnapshotReporter

    reporter = SnapshotReporter.attach(spark)

    def start_query() -> StreamingQuery:  # again at each restart, on the same checkpoint
        query = start(spark, settings)
        reporter.track(query, checkpoint_location=settings["sink.checkpointLocation"])
        log.info(
            "query %s started: %s -> %s (checkpoint %s)",
            query.name,
            settings.get("source.subscribe") or settings.get("source.subscribePattern"),
            settings.get("sink.path"),
            settings.get("sink.checkpointLocation"),
        )
        return query

    return run_until_done(start_query, settings, metrics=reporter.restarts)


if __name__ == "__main__":
    sys.exit(main())
