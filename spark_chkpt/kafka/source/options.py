"""Options of the ``chkpt-kafka`` source, parsed once, frozen, validated together.

:meth:`SourceConfig.from_options` turns Spark's Kafka option names into one frozen
object and raises one :class:`~spark_chkpt.errors.ConfigError` naming the option, the
value given and what is allowed. ``kafka.*`` options go through
:mod:`spark_chkpt.kafka.client.settings`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_chkpt.alignment.cut import ALIGNMENT_MODES, AlignmentMode
from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client.consumer import ClientKind, ConsumerSettings
from spark_chkpt.kafka.client.settings import (
    check_librdkafka,
    kafka_client_settings,
    librdkafka_settings,
    parse_client,
)
from spark_chkpt.options import (
    check_option_names,
    lowercase,
    parse_bool,
    parse_duration_ms,
    parse_positive_int,
)
from spark_chkpt.runtime.spark_version import require_admission_control

EARLIEST = -2
LATEST = -1

SubscriptionKind = Literal["subscribe", "subscribePattern", "assign"]


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends.

    ``kind`` is ``earliest``/``latest`` (all partitions), ``offsets`` (per-partition,
    with -2/-1 meaning earliest/latest), ``timestamp`` (one time for every partition)
    or ``timestamps`` (per-partition times, ms since the epoch).
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    timestamp_ms: int | None = None

    def describe(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp_ms}"
        return json.dumps({t: {str(p): o for p, o in ps.items()} for t, ps in self.offsets.items()})


def _parse_partition_json(option: str, raw: str, *, what: str) -> dict[str, dict[int, int]]:
    allowed = f'JSON such as {{"topicA":{{"0":23,"1":-1}}}} where each value is {what}'
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(option, raw, f"not valid JSON ({e.msg}); expected {allowed}") from e
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(option, raw, f"expected {allowed}")
    result: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise ConfigError(option, raw, f"topic {topic!r} must map to an object; {allowed}")
        result[topic] = {}
        for part, value in parts.items():
            try:
                pid = int(part)
            except ValueError as e:
                raise ConfigError(option, raw, f"partition {part!r} is not a number") from e
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(option, raw, f"{topic}-{part}: {value!r} is not {what}")
            result[topic][pid] = value
    return result


def _parse_offset_spec(
    options: Mapping[str, str],
    *,
    prefix: str,
    default: Literal["earliest", "latest"],
    batch_end: bool,
) -> OffsetSpec:
    ts_opt, by_ts_opt, off_opt = (
        f"{prefix}Timestamp",
        f"{prefix}OffsetsByTimestamp",
        f"{prefix}Offsets",
    )
    raw_ts = options.get(ts_opt.lower())
    if raw_ts is not None:
        try:
            ts = int(raw_ts)
        except ValueError as e:
            raise ConfigError(ts_opt, raw_ts, "must be milliseconds since the epoch") from e
        if ts < 0:
            raise ConfigError(ts_opt, raw_ts, "must be milliseconds since the epoch (>= 0)")
        return OffsetSpec(kind="timestamp", timestamp_ms=ts)
    raw_by_ts = options.get(by_ts_opt.lower())
    if raw_by_ts is not None:
        parsed = _parse_partition_json(by_ts_opt, raw_by_ts, what="a timestamp in ms")
        return OffsetSpec(kind="timestamps", offsets=parsed)
    raw = options.get(off_opt.lower())
    if raw is None:
        return OffsetSpec(kind=default)
    word = raw.strip().lower()
    forbidden = (
        "earliest"
        if batch_end
        else ("latest" if prefix == "starting" and default == "earliest" else None)
    )
    if word in ("earliest", "latest"):
        if word == forbidden:
            raise ConfigError(off_opt, raw, f"'{word}' is not allowed here for a batch query")
        return OffsetSpec(kind="earliest" if word == "earliest" else "latest")
    parsed = _parse_partition_json(off_opt, raw, what="an offset, -2 (earliest) or -1 (latest)")
    for topic, parts in parsed.items():
        for pid, value in parts.items():
            if value < EARLIEST:
                raise ConfigError(off_opt, raw, f"{topic}-{pid}: offset {value} is below -2")
            if batch_end and value == EARLIEST:
                raise ConfigError(off_opt, raw, f"{topic}-{pid}: -2 (earliest) cannot end a batch")
            if forbidden == "latest" and value == LATEST:
                raise ConfigError(off_opt, raw, f"{topic}-{pid}: -1 (latest) cannot start a batch")
    return OffsetSpec(kind="offsets", offsets=parsed)


@dataclass(frozen=True)
class Subscription:
    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + json.dumps({t: list(p) for t, p in self.assigned.items()})


def _parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k.lower())]
    if len(given) != 1:
        shown = ", ".join(given) if given else "none"
        seen = ", ".join(sorted(options)) or "none"
        raise ConfigError(
            "subscribe",
            shown,
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set "
            f"(the options given: {seen})",
        )
    kind = given[0]
    raw = options[kind.lower()]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise ConfigError(kind, raw, "a comma-separated list of topic names")
        return Subscription(kind="subscribe", topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as e:
            raise ConfigError(kind, raw, f"not a valid regular expression ({e})") from e
        return Subscription(kind="subscribePattern", pattern=raw)
    try:
        doc = json.loads(raw)
        assigned = {str(t): tuple(sorted(int(p) for p in ps)) for t, ps in doc.items()}
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as e:
        raise ConfigError(kind, raw, 'JSON such as {"topicA":[0,1],"topicB":[2,4]}') from e
    if not assigned or not all(assigned.values()):
        raise ConfigError(kind, raw, "at least one partition per topic")
    return Subscription(kind="assign", assigned=assigned)


# Every option of the source as documented (``check_option_names`` refuses a name close
# to one of these); the two ``kafka.*`` names are here so that a misspelled prefix
# (``kakfa.bootstrap.servers``) is named too.
_KNOWN_SOURCE_OPTIONS = (
    "kafka.bootstrap.servers",
    "kafka.group.id",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "failOnMissingTopic",
    "includeHeaders",
    "minPartitions",
    "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "maxRecordsPerArrowBatch",
    "path",
    "alignment",
    "alignmentTimeout",
    "upstreamApps",
    "controlTopic",
    "partitionsPerTask",
    "recordsPerTask",
    "prefetchRecords",
    "decode",
)


# recordsPerTask's default: a batch of fewer records is read by one task. A second task
# costs its launch, a Python worker and a Parquet file of the sink's (tens of ms on a
# busy 2-core machine, docs/performance): batches of 1,000-1,700 records were faster
# as one task; 20,000-record batches still take two task slots.
RECORDS_PER_TASK = 5_000


def read_task_count(*, records: int, task_slots: int, records_per_task: int) -> int:
    """Read tasks for a batch of ``records`` records: one per ``records_per_task``
    (rounded up), at least one, at most ``task_slots`` (one wave of tasks a batch)."""
    return max(1, min(task_slots, -(-records // records_per_task)))


@dataclass(frozen=True)
class SourceConfig:
    """Validated options of the ``chkpt-kafka`` source (streaming and batch)."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: Literal["error", "latest"]
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    group_id: str | None
    group_id_prefix: str
    poll_timeout_ms: int
    max_records_per_arrow_batch: int
    client_settings: Mapping[str, Any]
    alignment: AlignmentMode = "aligned"
    alignment_timeout_ms: int | None = None
    control_topic: str | None = None
    # The app ids (txnAppId) of the upstream chkpt-kafka sinks that write the topics read
    # (fan-in): cut per app from the first batch, before every app has a snapshot.
    upstream_apps: tuple[str, ...] = ()
    # None: as many as keep the read tasks within ``task_slots`` (one wave per batch)
    # and give each about ``records_per_task`` records or more
    partitions_per_task: int | None = None
    # Without partitionsPerTask and minPartitions: one read task per this many records of
    # the batch (rounded up), at most one per task slot
    records_per_task: int = RECORDS_PER_TASK
    # The session's task slots (``spark.default.parallelism`` when the formats were
    # registered); None when not known: one partition per task.
    task_slots: int | None = None
    client: ClientKind = "kafka-python"
    prefetch_records: int = 10_000
    # kafka-python reads of plain topics: record batches straight into columns, or
    # kafka-python's record objects (the path before columns, kept as a fallback)
    decode: Literal["columns", "records"] = "columns"
    # failOnMissingTopic: a subscribed or assigned topic that does not exist when a query
    # plans its start is refused (MissingTopicError); false: wait for it, as Spark does
    fail_on_missing_topic: bool = True

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, str],
        *,
        streaming: bool | None = True,
        task_slots: int | None = None,
    ) -> SourceConfig:
        """Parse Spark's string options. Raises :class:`ConfigError` naming the bad option.

        ``streaming``: True for readStream, False for read, None when not known yet.
        ``task_slots``: the session's task slots, which size the read tasks when neither
        ``partitionsPerTask`` nor ``minPartitions`` is set.
        """
        # First: a misspelled name must be named as such, not as the option it missed.
        check_option_names(
            options,
            known=_KNOWN_SOURCE_OPTIONS,
            connector="chkpt-kafka",
            prefixes=("kafka.", "chkpt."),
        )
        opts = lowercase(options)
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
        subscription = _parse_subscription(opts)
        # streaming=None: validate what both query kinds share (DataSource.schema() runs
        # before Spark says which kind it is); the mode-specific checks follow later.
        starting = _parse_offset_spec(
            opts,
            prefix="starting",
            default="earliest" if streaming is False else "latest",
            batch_end=False,
        )
        ending = OffsetSpec(kind="latest")
        if streaming:
            for opt in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
                if opt.lower() in opts:
                    raise ConfigError(
                        opt,
                        opts[opt.lower()],
                        "only for batch queries (spark.read); a stream has no end",
                    )
        if streaming is not True:
            ending = _parse_offset_spec(opts, prefix="ending", default="latest", batch_end=True)
        if streaming is False:
            for opt in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
                if opt.lower() in opts:
                    raise ConfigError(opt, opts[opt.lower()], "only for streaming queries")
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise ConfigError(
                "startingOffsetsByTimestampStrategy", strategy, "one of 'error', 'latest'"
            )
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
        group_id = opts.get("kafka.group.id")
        prefix = opts.get("groupidprefix", "spark-chkpt-kafka-source")
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
        max_records = (
            parse_positive_int(
                "maxRecordsPerArrowBatch", opts.get("maxrecordsperarrowbatch"), default=10_000
            )
            or 10_000
        )
        return cls(
            bootstrap_servers=servers,
            subscription=subscription,
            starting=starting,
            ending=ending,
            timestamp_strategy="latest" if strategy == "latest" else "error",
            max_offsets_per_trigger=max_per,
            min_offsets_per_trigger=min_per,
            max_trigger_delay_ms=delay,
            fail_on_data_loss=parse_bool(
                "failOnDataLoss", opts.get("failondataloss"), default=True
            ),
            include_headers=parse_bool("includeHeaders", opts.get("includeheaders"), default=False),
            fail_on_missing_topic=parse_bool(
                "failOnMissingTopic", opts.get("failonmissingtopic"), default=True
            ),
            min_partitions=parse_positive_int("minPartitions", opts.get("minpartitions")),
            group_id=group_id,
            group_id_prefix=prefix,
            poll_timeout_ms=parse_positive_int(
                "kafkaConsumer.pollTimeoutMs",
                opts.get("kafkaconsumer.polltimeoutms"),
                default=120_000,
            )
            or 120_000,
            max_records_per_arrow_batch=max_records,
            client_settings=settings,
            alignment=alignment,
            alignment_timeout_ms=None
            if timeout is None
            else parse_duration_ms("alignmentTimeout", timeout, default_ms=0),
            control_topic=opts.get("controltopic") or None,
            upstream_apps=upstream_apps,
            partitions_per_task=parse_positive_int(
                "partitionsPerTask", opts.get("partitionspertask")
            ),
            records_per_task=parse_positive_int(
                "recordsPerTask", opts.get("recordspertask"), default=RECORDS_PER_TASK
            )
            or RECORDS_PER_TASK,
            task_slots=task_slots,
            client=client,
            decode="records" if decode == "records" else "columns",
            prefetch_records=parse_positive_int(
                "prefetchRecords",
                opts.get("prefetchrecords"),
                default=max_records,
                allow_zero=True,
            )
            or 0,
        )

    def per_task(self, pieces: int, *, records: int) -> int:
        """Ranges one read task reads, of a batch of ``pieces`` ranges holding ``records``
        records: ``partitionsPerTask`` if set; one each with ``minPartitions`` (its pieces
        are tasks, as in Spark) or when the task slots are not known; else the ranges
        shared out over :func:`read_task_count` tasks."""
        if self.partitions_per_task is not None:
            return self.partitions_per_task
        if self.min_partitions is not None or not self.task_slots:
            return 1
        tasks = read_task_count(
            records=records, task_slots=self.task_slots, records_per_task=self.records_per_task
        )
        return max(1, -(-pieces // tasks))

    def consumer_settings(self, *, client_id: str) -> dict[str, Any]:
        """kafka-python ``KafkaConsumer`` keyword arguments for a group-less, assign-only reader."""
        settings: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "client_id": client_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "none",
            "group_id": None,
        }
        settings.update(self.client_settings)
        return settings

    def fetch_settings(self, *, client_id: str) -> ConsumerSettings:
        """The executor consumer's client and settings for this source's read tasks."""
        if self.client == "confluent":
            config: dict[str, Any] = {
                "bootstrap.servers": self.bootstrap_servers,
                "client.id": client_id,
                # librdkafka prefetches up to 100k records per partition by default; a
                # read task needs at most one Arrow batch ahead of what it converts.
                "queued.min.messages": self.max_records_per_arrow_batch,
                "queued.max.messages.kbytes": 32 * 1024,
            }
            config.update(librdkafka_settings(self.client_settings))
            return ConsumerSettings(client="confluent", settings=config)
        settings = self.consumer_settings(client_id=client_id)
        settings.setdefault("max_poll_records", min(self.max_records_per_arrow_batch, 10_000))
        return ConsumerSettings(client="kafka-python", settings=settings)
