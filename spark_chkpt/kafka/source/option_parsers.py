"""The ``chkpt-kafka`` source's options parsed group by group, for
:meth:`~spark_chkpt.kafka.source.options.SourceConfig.from_options`: the brokers, a
trigger's limits, the alignment at barriers, the client and its decoding, and the read's
own settings. Each raises one :class:`~spark_chkpt.errors.ConfigError` naming the
option, the value given and what is allowed; the options arrive lower-cased."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from spark_chkpt.alignment.cut import ALIGNMENT_MODES, AlignmentMode
from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client.consumer import ClientKind
from spark_chkpt.kafka.client.settings import (
    check_librdkafka,
    kafka_client_settings,
    librdkafka_settings,
    parse_client,
)
from spark_chkpt.options import parse_bool, parse_duration_ms, parse_positive_int
from spark_chkpt.runtime.spark_version import require_admission_control

# recordsPerTask's default: a batch of fewer records is read by one task. A second task
# costs its launch, a Python worker and a Parquet file of the sink's (tens of ms on a
# busy 2-core machine, docs/performance): batches of 1,000-1,700 records were faster
# as one task; 20,000-record batches still take two task slots.
RECORDS_PER_TASK = 5_000


def parse_bootstrap_servers(opts: Mapping[str, str]) -> str:
    """``kafka.bootstrap.servers``: required, each entry ``host:port``."""
    servers = opts.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise ConfigError(
            "kafka.bootstrap.servers", None, "required: a comma-separated list of host:port"
        )
    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(
                "kafka.bootstrap.servers", servers, f"'{server.strip()}' is not host:port"
            )
    return servers


def parse_timestamp_strategy(opts: Mapping[str, str]) -> Literal["error", "latest"]:
    """``startingOffsetsByTimestampStrategy``: ``error`` (the default) or ``latest``."""
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(
            "startingOffsetsByTimestampStrategy", strategy, "one of 'error', 'latest'"
        )
    return "latest" if strategy == "latest" else "error"


def parse_trigger_limits(opts: Mapping[str, str]) -> tuple[int | None, int | None, int]:
    """``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` (not above the max) and
    ``maxTriggerDelay`` in ms (15 minutes by default)."""
    max_per = parse_positive_int("maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger"))
    min_per = parse_positive_int("minOffsetsPerTrigger", opts.get("minoffsetspertrigger"))
    if max_per is not None and min_per is not None and min_per > max_per:
        raise ConfigError(
            "minOffsetsPerTrigger",
            str(min_per),
            f"must not exceed maxOffsetsPerTrigger ({max_per})",
        )
    require_admission_control("minOffsetsPerTrigger", min_per)
    delay = parse_duration_ms(
        "maxTriggerDelay", opts.get("maxtriggerdelay"), default_ms=15 * 60_000
    )
    return max_per, min_per, delay


def parse_alignment(
    opts: Mapping[str, str],
) -> tuple[AlignmentMode, str | None, tuple[str, ...]]:
    """``alignment``, ``alignmentTimeout`` as given (parsed with the read's settings) and
    ``upstreamApps`` (only with ``alignment=aligned`` and no timeout)."""
    alignment = opts.get("alignment", "aligned").strip().lower()
    if alignment not in ALIGNMENT_MODES:
        raise ConfigError(
            "alignment",
            alignment,
            "one of 'aligned' (exactly-once, a consistent cut: the default), 'unaligned' "
            "(exactly-once, each partition up to its own newest barrier), 'at-least-once' "
            "(also reads records after the last barrier), 'none' (plain reads)",
        )
    timeout = opts.get("alignmenttimeout")
    upstream_apps = tuple(
        sorted({a.strip() for a in opts.get("upstreamapps", "").split(",") if a.strip()})
    )
    if upstream_apps and (alignment != "aligned" or timeout is not None):
        raise ConfigError(
            "upstreamApps",
            ",".join(upstream_apps),
            f"only with alignment=aligned (not {alignment}) and without "
            "alignmentTimeout: a topic several upstream queries write is cut per query "
            "only when aligned, and has no unaligned fallback",
        )
    return alignment, timeout, upstream_apps


def parse_read_client(
    opts: Mapping[str, str], *, servers: str
) -> tuple[ClientKind, Mapping[str, Any], Literal["columns", "records"]]:
    """``kafka.client`` and the ``kafka.*`` consumer settings (checked against librdkafka
    when it reads), and ``decode``: ``columns`` (the default) or ``records``."""
    client = parse_client(opts, role="consumer").kind
    settings = kafka_client_settings(opts, role="consumer")
    if client == "confluent":
        check_librdkafka(librdkafka_settings(settings), servers)
    decode = opts.get("decode", "columns").strip().lower()
    if decode not in ("columns", "records"):
        raise ConfigError(
            "decode",
            decode,
            "one of 'columns' (the default: record batches decoded straight into Arrow "
            "columns) or 'records' (kafka-python's record objects, then columns)",
        )
    return client, settings, "records" if decode == "records" else "columns"


class ReadSettings(TypedDict):
    """The read's own settings, as the fields of ``SourceConfig`` of the same names."""

    fail_on_data_loss: bool
    include_headers: bool
    fail_on_missing_topic: bool
    min_partitions: int | None
    poll_timeout_ms: int
    alignment_timeout_ms: int | None
    partitions_per_task: int | None
    records_per_task: int
    prefetch_records: int


def parse_read_settings(
    opts: Mapping[str, str], *, alignment_timeout: str | None, max_records: int
) -> ReadSettings:
    """The flags and sizes of the read tasks (``prefetchRecords`` defaults to
    ``max_records``, ``maxRecordsPerArrowBatch``) and ``alignment_timeout`` in ms."""
    return ReadSettings(
        fail_on_data_loss=parse_bool("failOnDataLoss", opts.get("failondataloss"), default=True),
        include_headers=parse_bool("includeHeaders", opts.get("includeheaders"), default=False),
        fail_on_missing_topic=parse_bool(
            "failOnMissingTopic", opts.get("failonmissingtopic"), default=True
        ),
        min_partitions=parse_positive_int("minPartitions", opts.get("minpartitions")),
        poll_timeout_ms=parse_positive_int(
            "kafkaConsumer.pollTimeoutMs",
            opts.get("kafkaconsumer.polltimeoutms"),
            default=120_000,
        )
        or 120_000,
        alignment_timeout_ms=None
        if alignment_timeout is None
        else parse_duration_ms("alignmentTimeout", alignment_timeout, default_ms=0),
        partitions_per_task=parse_positive_int("partitionsPerTask", opts.get("partitionspertask")),
        records_per_task=parse_positive_int(
            "recordsPerTask", opts.get("recordspertask"), default=RECORDS_PER_TASK
        )
        or RECORDS_PER_TASK,
        prefetch_records=parse_positive_int(
            "prefetchRecords", opts.get("prefetchrecords"), default=max_records, allow_zero=True
        )
        or 0,
    )
