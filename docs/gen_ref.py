"""Where the docs' generated reference finds the code: the one place to repoint when
modules move.

``docs/hooks.py`` (an mkdocs hook) imports what is named here and renders the option
tables, the DeltaUpsert arguments, the command-line reference and the API pages. Each
name is ``"module:attribute"``. The descriptions live in ``docs/reference/options.yml``;
the hook fails the build when an option the code accepts has no description there, or a
description names an option the code no longer accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OptionsRef:
    """One format's options: its frozen config dataclass and the option names it accepts."""

    key: str  # the section of docs/reference/options.yml
    title: str
    config: str  # the dataclass with ``from_options``
    known: str  # the set of accepted option names (lowercase)
    required: dict[str, str]  # the least options ``from_options`` accepts (for defaults)
    parse_kwargs: dict[str, object] = field(default_factory=dict)
    prefixes: tuple[str, ...] = ()  # option families passed through (``kafka.*``)
    # option name -> dataclass field, where it is not the option in snake_case; None:
    # accepted but kept in no field of its own
    fields: dict[str, str | None] = field(default_factory=dict)


OPTIONS: tuple[OptionsRef, ...] = (
    OptionsRef(
        key="chkpt-kafka source",
        title="`chkpt-kafka` source",
        config="spark_chkpt.kafka.source.options:SourceConfig",
        known="spark_chkpt.kafka.source.options:_KNOWN_SOURCE_OPTIONS",
        required={"kafka.bootstrap.servers": "localhost:9092", "subscribe": "events"},
        parse_kwargs={"streaming": True},
        prefixes=("kafka.",),
        fields={
            "subscribe": "subscription",
            "subscribePattern": "subscription",
            "assign": "subscription",
            "startingOffsets": "starting",
            "startingTimestamp": "starting",
            "startingOffsetsByTimestamp": "starting",
            "startingOffsetsByTimestampStrategy": "timestamp_strategy",
            "endingOffsets": "ending",
            "endingTimestamp": "ending",
            "endingOffsetsByTimestamp": "ending",
            "maxTriggerDelay": "max_trigger_delay_ms",
            "kafkaConsumer.pollTimeoutMs": "poll_timeout_ms",
            "alignmentTimeout": "alignment_timeout_ms",
            "fetchOffset.numRetries": None,
            "fetchOffset.retryIntervalMs": None,
            "path": None,
            "kafka.bootstrap.servers": "bootstrap_servers",
            "kafka.group.id": "group_id",
            "kafka.client": "client",
            "kafka.*": "client_settings",
        },
    ),
    OptionsRef(
        key="chkpt-kafka sink",
        title="`chkpt-kafka` sink",
        config="spark_chkpt.kafka.sink.options:KafkaSinkConfig",
        known="spark_chkpt.kafka.sink.options:_KNOWN_KAFKA_SINK_OPTIONS",
        required={"kafka.bootstrap.servers": "localhost:9092", "checkpointLocation": "/chk"},
        prefixes=("kafka.",),
        fields={
            "path": None,
            "snapshotTimeout": "timing.timeout_ms",
            "minPauseBetweenSnapshots": "timing.min_pause_ms",
            "kafka.bootstrap.servers": "bootstrap_servers",
            "kafka.client": "client",
            "kafka.*": "producer_settings",
            "maxBatchDuration": "max_batch_duration_ms",
            "maxRestartTime": "max_restart_time_ms",
            "controlTopic.replication.factor": "control_replication_factor",
            "controlTopic.min.insync.replicas": "control_min_insync_replicas",
        },
    ),
    OptionsRef(
        key="chkpt-delta sink",
        title="`chkpt-delta` sink",
        config="spark_chkpt.delta.sink.options:DeltaSinkConfig",
        known="spark_chkpt.delta.sink.options:_KNOWN_DELTA_OPTIONS",
        required={"path": "/data/events", "checkpointLocation": "/chk/events"},
        prefixes=("storage.", "delta."),
        fields={
            "targetFileSize": "target_file_bytes",
            "autoCompactMinNumFiles": "auto_compact_min_files",
            "autoCompactMaxFileSize": "auto_compact_max_file_bytes",
            "orphanRetention": "orphan_retention_ms",
            "snapshotTimeout": "timing.timeout_ms",
            "minPauseBetweenSnapshots": "timing.min_pause_ms",
            "storage.*": "storage_options",
            "delta.*": "table_properties",
            "table": None,
            "tableLocation": None,
            "deadLetterTable": None,
            "deadLetterTableLocation": None,
        },
    ),
)

# Keyword arguments rendered as a table (name, type, default from the signature).
ARGUMENTS: dict[str, str] = {"DeltaUpsert": "spark_chkpt.delta.upsert.front:DeltaUpsert"}

# Command-line programs: name -> the ``main(argv)`` that builds its argparse parser.
CLI: dict[str, str] = {
    "spark-chkpt": "spark_chkpt.cli:main",
    "spark-chkpt-kafka-to-delta": "spark_chkpt.jobs.kafka_to_delta:main",
    "spark-chkpt-page-views": "spark_chkpt.jobs.page_views:main",
    "spark-chkpt-two-stage": "spark_chkpt.jobs.two_stage:main",
}

# The programs ``spark-chkpt`` dispatches to (its subcommands demo, bench): a function
# returning name -> entry point.
PROGRAMS = "spark_chkpt.cli.programs:programs"
PROGRAM_LOADER = "spark_chkpt.cli.programs:load"

# The Python API pages: mkdocstrings renders each object (``::: path``).
API: dict[str, tuple[str, ...]] = {
    "Registering the formats": ("spark_chkpt.register",),
    "Sessions": (
        "spark_chkpt.session.build_session",
        "spark_chkpt.session.connector_settings",
    ),
    "Upserts from foreachBatch": ("spark_chkpt.delta.upsert.front.DeltaUpsert",),
    "Watching snapshots": (
        "spark_chkpt.metrics.reporter.SnapshotReporter",
        "spark_chkpt.snapshot.record.SnapshotRecord",
    ),
    "Restarting a failed query": (
        "spark_chkpt.restart.supervisor.run_supervised",
        "spark_chkpt.restart.supervisor.ExitCode",
        "spark_chkpt.restart.options.RestartConfig",
        "spark_chkpt.metrics.restarts.RestartMetrics",
    ),
    "Keyed state": ("spark_chkpt.state.reader.read_state",),
    "Savepoints": (
        "spark_chkpt.savepoint.manifest.create_savepoint",
        "spark_chkpt.savepoint.manifest.list_savepoints",
        "spark_chkpt.savepoint.manifest.load_savepoint",
        "spark_chkpt.savepoint.restore.restore_savepoint",
        "spark_chkpt.savepoint.stop.stop_with_savepoint",
        "spark_chkpt.savepoint.stop.StopRequests",
        "spark_chkpt.savepoint.plan.load_job",
        "spark_chkpt.savepoint.check.check_savepoint",
        "spark_chkpt.savepoint.check.CheckReport",
        "spark_chkpt.diff.tables.diff_tables",
        "spark_chkpt.diff.tables.TableDiff",
        "spark_chkpt.savepoint.pipeline.create.create_pipeline_savepoint",
        "spark_chkpt.savepoint.pipeline.manifest.list_pipelines",
        "spark_chkpt.savepoint.pipeline.manifest.load_pipeline",
        "spark_chkpt.savepoint.pipeline.restore.restore_pipeline",
    ),
    "Errors": ("spark_chkpt.errors",),
}
