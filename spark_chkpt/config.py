"""Options parsed once, frozen, validated together.

Spark hands every option as a string. :meth:`SourceConfig.from_options` turns the
``chkpt-kafka`` source options (Spark's own Kafka option names) into one frozen
object, and raises one :class:`~spark_chkpt.errors.ConfigError` naming the option,
the value given and what is allowed. ``kafka.*`` options are mapped onto the
kafka-python setting of the same meaning; an unknown one is rejected.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_chkpt.errors import ConfigError
from spark_chkpt.fs import qualify
from spark_chkpt.kafka.consumer import CLIENTS, ClientKind, ConsumerSettings

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1

SubscriptionKind = Literal["subscribe", "subscribePattern", "assign"]
ClientRole = Literal["consumer", "producer"]

# kafka.* settings that make no sense for this source, with the reason (Spark rejects the same).
_SOURCE_REJECTED = {
    "auto.offset.reset": "set 'startingOffsets' instead",
    "enable.auto.commit": "offsets are committed by the source after each batch",
    "key.deserializer": "keys are always returned as binary; use CAST or a UDF",
    "value.deserializer": "values are always returned as binary; use CAST or from_json",
    "interceptor.classes": "interceptors are not supported",
    "group.instance.id": "the source assigns partitions itself and joins no group",
}
_PRODUCER_REJECTED = {
    "key.serializer": "keys are written as given (string or binary column)",
    "value.serializer": "values are written as given (string or binary column)",
    "transactional.id": "the sink commits through barrier markers, not Kafka transactions",
}
# kafka-python settings that take Python objects, not strings.
_OBJECT_SETTINGS = {
    "key_deserializer",
    "value_deserializer",
    "key_serializer",
    "value_serializer",
    "default_offset_commit_callback",
    "partition_assignment_strategy",
    "selector",
    "kafka_client",
    "ssl_context",
    "metric_reporters",
    "socket_options",
    "sasl_oauth_token_provider",
    "partitioner",
}
# Settings the project owns; a user may not override them through kafka.*.
_OWNED_SETTINGS = {"bootstrap_servers", "group_id", "enable_auto_commit", "auto_offset_reset"}
# Java client names whose kafka-python name differs beyond '.' -> '_'.
_JAVA_ALIASES = {
    "max.poll.records": "max_poll_records",
    "ssl.endpoint.identification.algorithm": "ssl_check_hostname",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "client.dns.lookup": "client_dns_lookup",
    "compression.type": "compression_type",
}
_JAVA_ONLY = {
    "ssl.truststore.location": "kafka-python reads PEM files: use kafka.ssl.cafile",
    "ssl.truststore.password": "kafka-python reads PEM files: use kafka.ssl.cafile",
    "ssl.keystore.location": "use kafka.ssl.certfile and kafka.ssl.keyfile (PEM)",
    "ssl.keystore.password": "use kafka.ssl.password",
    "ssl.key.password": "use kafka.ssl.password",
    "sasl.login.callback.handler.class": "Java login callbacks are not supported",
}
_INT_WHEN_NONE = {"receive_buffer_bytes", "send_buffer_bytes"}
_JAAS = re.compile(r"""(\w+)\s*=\s*"((?:[^"\\]|\\.)*)\"""")


def _client_defaults(role: ClientRole) -> dict[str, Any]:
    if role == "consumer":
        from kafka import KafkaConsumer

        return dict(KafkaConsumer.DEFAULT_CONFIG)
    from kafka import KafkaProducer

    return dict(KafkaProducer.DEFAULT_CONFIG)


def _convert(option: str, name: str, raw: str, default: Any) -> Any:
    try:
        if name == "ssl_check_hostname" and option.endswith("identification.algorithm"):
            return raw.strip().lower() == "https"
        if isinstance(default, bool):
            return parse_bool(option, raw)
        if name == "acks":
            return "all" if raw.strip().lower() == "all" else int(raw)
        if name == "api_version":
            return tuple(int(part) for part in raw.split("."))
        if isinstance(default, int) or name in _INT_WHEN_NONE:
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError as e:
        kind = "a number" if not isinstance(default, bool) else "true or false"
        raise ConfigError(option, raw, f"must be {kind}") from e
    return raw


def _parse_jaas(option: str, raw: str) -> dict[str, Any]:
    """Map Spark's ``kafka.sasl.jaas.config`` (PLAIN / SCRAM login modules) to kafka-python."""
    fields = dict(_JAAS.findall(raw))
    if "username" not in fields or "password" not in fields:
        raise ConfigError(
            option,
            "<redacted>",
            'expected a login module with username="..." password="..." '
            "(PlainLoginModule or ScramLoginModule)",
        )
    return {"sasl_plain_username": fields["username"], "sasl_plain_password": fields["password"]}


def kafka_client_settings(options: Mapping[str, str], *, role: ClientRole) -> dict[str, Any]:
    """Translate every ``kafka.*`` option except the bootstrap servers and group id.

    Raises :class:`ConfigError` for an unknown setting, naming the closest known ones.
    """
    defaults = _client_defaults(role)
    rejected = _SOURCE_REJECTED if role == "consumer" else _PRODUCER_REJECTED
    settings: dict[str, Any] = {}
    for key, raw in options.items():
        option = key.lower()
        if not option.startswith("kafka."):
            continue
        java = option[len("kafka.") :]
        if java in ("bootstrap.servers", "group.id"):
            continue
        if java == "client":
            if role == "consumer":
                continue  # the source's choice of client, parsed by SourceConfig
            raise ConfigError(
                key,
                raw,
                "only the chkpt-kafka source has a choice of client; sinks use kafka-python",
            )
        if java in rejected:
            raise ConfigError(key, raw, f"not supported: {rejected[java]}")
        if java in _JAVA_ONLY:
            raise ConfigError(key, raw, f"a Java-client setting: {_JAVA_ONLY[java]}")
        if java == "sasl.jaas.config":
            settings.update(_parse_jaas(key, raw))
            continue
        name = _JAVA_ALIASES.get(java, java.replace(".", "_"))
        if name not in defaults or name in _OBJECT_SETTINGS or name in _OWNED_SETTINGS:
            known = sorted(
                "kafka." + k.replace("_", ".")
                for k in defaults
                if k not in _OBJECT_SETTINGS and k not in _OWNED_SETTINGS
            )
            close = difflib.get_close_matches(option, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(key, raw, f"unknown or unsupported kafka-python {role} setting{hint}")
        settings[name] = _convert(key, name, raw, defaults[name])
    return settings


# kafka-python consumer settings and the librdkafka property of the same meaning.
_LIBRDKAFKA_NAMES = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "sasl_kerberos_service_name": "sasl.kerberos.service.name",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "ssl_crlfile": "ssl.crl.location",
    "ssl_ciphers": "ssl.cipher.suites",
    "fetch_min_bytes": "fetch.min.bytes",
    "fetch_max_wait_ms": "fetch.wait.max.ms",
    "fetch_max_bytes": "fetch.max.bytes",
    "max_partition_fetch_bytes": "max.partition.fetch.bytes",
    "isolation_level": "isolation.level",
    "request_timeout_ms": "socket.timeout.ms",
    "receive_buffer_bytes": "socket.receive.buffer.bytes",
    "send_buffer_bytes": "socket.send.buffer.bytes",
    "reconnect_backoff_ms": "reconnect.backoff.ms",
    "reconnect_backoff_max_ms": "reconnect.backoff.max.ms",
    "retry_backoff_ms": "retry.backoff.ms",
    "connections_max_idle_ms": "connections.max.idle.ms",
    "metadata_max_age_ms": "metadata.max.age.ms",
    "check_crcs": "check.crcs",
    "client_dns_lookup": "client.dns.lookup",
    "max_poll_records": None,  # each poll's size is maxRecordsPerArrowBatch
}


def _parse_client(opts: Mapping[str, str]) -> ClientKind:
    """``kafka.client``: which library the read tasks fetch with (default kafka-python).

    ``SPARK_CHKPT_KAFKA_CLIENT`` in the environment sets the default for a deployment.
    """
    raw = opts.get("kafka.client") or os.environ.get("SPARK_CHKPT_KAFKA_CLIENT") or CLIENTS[0]
    client = raw.strip().lower()
    if client not in CLIENTS:
        raise ConfigError("kafka.client", raw, "one of 'kafka-python' (the default), 'confluent'")
    if client == "confluent" and importlib.util.find_spec("confluent_kafka") is None:
        raise ConfigError(
            "kafka.client",
            raw,
            "needs the confluent-kafka package: pip install 'spark-chkpt[confluent]'",
        )
    return "confluent" if client == "confluent" else "kafka-python"


def _check_librdkafka(config: Mapping[str, Any], servers: str) -> None:
    """Let librdkafka judge the values here, on the driver, not in every read task.

    Building a consumer validates its configuration without connecting (about 7 ms).
    """
    import confluent_kafka

    try:
        consumer = confluent_kafka.Consumer(
            {**config, "bootstrap.servers": servers, "group.id": "spark-chkpt-check"}
        )
    except confluent_kafka.KafkaException as e:
        raise ConfigError(
            "kafka.client", "confluent", f"librdkafka rejects the kafka.* settings: {e.args[0]}"
        ) from e
    consumer.close()


def librdkafka_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Translate validated kafka-python consumer settings into librdkafka properties.

    Raises :class:`ConfigError` naming the ``kafka.*`` option that has no equivalent.
    """
    config: dict[str, Any] = {"isolation.level": "read_uncommitted"}  # Spark's default
    for name, value in settings.items():
        if name == "ssl_check_hostname":
            config["ssl.endpoint.identification.algorithm"] = "https" if value else "none"
            continue
        if name not in _LIBRDKAFKA_NAMES:
            raise ConfigError(
                "kafka." + name.replace("_", "."),
                str(value),
                "has no librdkafka equivalent here; remove it or use kafka.client=kafka-python",
            )
        target = _LIBRDKAFKA_NAMES[name]
        if target is not None:
            config[target] = value
    return config


def parse_bool(option: str, raw: str | None, *, default: bool | None = None) -> bool:
    if raw is None:
        if default is None:
            raise ConfigError(option, raw, "required: true or false")
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ConfigError(option, raw, "must be true or false")


def parse_positive_int(
    option: str, raw: str | None, *, default: int | None = None, allow_zero: bool = False
) -> int | None:
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError as e:
        raise ConfigError(option, raw, "must be a whole number") from e
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(option, raw, "must be greater than 0")
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(option: str, raw: str | None, *, default_ms: int) -> int:
    """Spark-style durations: ``100ms``, ``30s``, ``15m``, ``1h``; a bare number is ms."""
    if raw is None:
        return default_ms
    match = _DURATION.match(raw)
    if not match:
        raise ConfigError(option, raw, "must be a duration such as 500ms, 30s, 15m or 1h")
    amount, unit = match.groups()
    return int(amount) * _UNIT_MS[(unit or "ms").lower()]


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
        raise ConfigError(
            "subscribe",
            shown,
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set",
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


_KNOWN_SOURCE_OPTIONS = {
    k.lower()
    for k in (
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
        "controlTopic",
        "partitionsPerTask",
        "prefetchRecords",
    )
}


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
    alignment: Literal["aligned", "unaligned", "none"] = "aligned"
    alignment_timeout_ms: int | None = None
    control_topic: str | None = None
    partitions_per_task: int = 1
    client: ClientKind = "kafka-python"
    prefetch_records: int = 10_000

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], *, streaming: bool | None = True
    ) -> SourceConfig:
        """Parse Spark's string options. Raises :class:`ConfigError` naming the bad option.

        ``streaming``: True for readStream, False for read, None when not known yet.
        """
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
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
        delay = parse_duration_ms(
            "maxTriggerDelay", opts.get("maxtriggerdelay"), default_ms=15 * 60_000
        )
        alignment = opts.get("alignment", "aligned").strip().lower()
        if alignment not in ("aligned", "unaligned", "none"):
            raise ConfigError(
                "alignment",
                alignment,
                "one of 'aligned' (exactly-once across barriers, the default), 'unaligned', 'none'",
            )
        timeout = opts.get("alignmenttimeout")
        group_id = opts.get("kafka.group.id")
        prefix = opts.get("groupidprefix", "spark-chkpt-kafka-source")
        unknown = sorted(
            k
            for k in opts
            if not k.startswith("kafka.")
            and k not in _KNOWN_SOURCE_OPTIONS
            and not k.startswith("chkpt.")
        )
        if unknown:
            log.warning("chkpt-kafka ignores unknown option(s): %s", ", ".join(unknown))
        client = _parse_client(opts)
        settings = kafka_client_settings(opts, role="consumer")
        if client == "confluent":
            _check_librdkafka(librdkafka_settings(settings), servers)
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
            alignment=alignment,  # type: ignore[arg-type]
            alignment_timeout_ms=None
            if timeout is None
            else parse_duration_ms("alignmentTimeout", timeout, default_ms=0),
            control_topic=opts.get("controltopic") or None,
            partitions_per_task=parse_positive_int(
                "partitionsPerTask", opts.get("partitionspertask"), default=1
            )
            or 1,
            client=client,
            prefetch_records=parse_positive_int(
                "prefetchRecords",
                opts.get("prefetchrecords"),
                default=max_records,
                allow_zero=True,
            )
            or 0,
        )

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


_KNOWN_DELTA_OPTIONS = {
    k.lower()
    for k in (
        "path",
        "partitionBy",
        "mergeSchema",
        "txnAppId",
        "checkpointLocation",
        "queryName",
        "retainedSnapshots",
        "maxRecordsPerFile",
        "targetFileSize",
        "orphanRetention",
    )
}


def _parse_size(option: str, raw: str | None, *, default: int) -> int:
    if raw is None:
        return default
    match = re.match(r"^\s*(\d+)\s*([kmg]?)b?\s*$", raw, re.IGNORECASE)
    if not match:
        raise ConfigError(option, raw, "a size such as 134217728, 128m or 1g")
    amount, unit = match.groups()
    size = int(amount) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit.lower()]
    if size <= 0:
        raise ConfigError(option, raw, "must be greater than 0")
    return size


@dataclass(frozen=True)
class DeltaSinkConfig:
    """Validated options of the ``chkpt-delta`` sink."""

    path: str
    checkpoint_location: str
    query_name: str | None
    partition_by: tuple[str, ...]
    merge_schema: bool
    txn_app_id: str | None
    retained_snapshots: int
    max_records_per_file: int
    target_file_bytes: int
    orphan_retention_ms: int
    storage_options: Mapping[str, str]

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> DeltaSinkConfig:
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        path = opts.get("path", "").strip()
        if not path:
            raise ConfigError(
                "path",
                None,
                "required: the Delta table's location (.option('path', ...) or .start(path))",
            )
        checkpoint = opts.get("checkpointlocation", "").strip()
        if not checkpoint:
            raise ConfigError(
                "checkpointLocation",
                None,
                "required: exactly-once needs Spark's checkpoint (its offset log "
                "is the snapshot plan)",
            )
        partition_by = tuple(c.strip() for c in opts.get("partitionby", "").split(",") if c.strip())
        unknown = sorted(
            k for k in opts if k not in _KNOWN_DELTA_OPTIONS and not k.startswith("storage.")
        )
        if unknown:
            log.warning("chkpt-delta ignores unknown option(s): %s", ", ".join(unknown))
        return cls(
            path=qualify(path),  # on the driver: executors have another working folder
            checkpoint_location=qualify(checkpoint),
            query_name=opts.get("queryname"),
            partition_by=partition_by,
            merge_schema=parse_bool("mergeSchema", opts.get("mergeschema"), default=False),
            txn_app_id=opts.get("txnappid") or None,
            retained_snapshots=parse_positive_int(
                "retainedSnapshots", opts.get("retainedsnapshots"), default=10, allow_zero=True
            )
            or 0,
            max_records_per_file=parse_positive_int(
                "maxRecordsPerFile", opts.get("maxrecordsperfile"), default=1_000_000
            )
            or 1_000_000,
            target_file_bytes=_parse_size(
                "targetFileSize", opts.get("targetfilesize"), default=128 * 1024**2
            ),
            orphan_retention_ms=parse_duration_ms(
                "orphanRetention", opts.get("orphanretention"), default_ms=60 * 60_000
            ),
            storage_options={
                k[len("storage.") :]: v for k, v in opts.items() if k.startswith("storage.")
            },
        )

    def check_columns(self, columns: Sequence[str]) -> None:
        """partitionBy names columns of the query's output."""
        missing = [c for c in self.partition_by if c not in columns]
        if missing:
            raise ConfigError(
                "partitionBy",
                ",".join(self.partition_by),
                f"column(s) {', '.join(missing)} are not in the query's output "
                f"({', '.join(columns)})",
            )
        if self.partition_by and len(self.partition_by) == len(columns):
            raise ConfigError(
                "partitionBy",
                ",".join(self.partition_by),
                "at least one column must stay out of the partition columns",
            )


_KNOWN_KAFKA_SINK_OPTIONS = {
    k.lower()
    for k in (
        "topic",
        "controlTopic",
        "checkpointLocation",
        "queryName",
        "txnAppId",
        "retainedSnapshots",
        "path",
    )
}


@dataclass(frozen=True)
class KafkaSinkConfig:
    """Validated options of the ``chkpt-kafka`` sink (Spark's Kafka sink names)."""

    bootstrap_servers: str
    topic: str | None
    control_topic: str | None
    checkpoint_location: str
    query_name: str | None
    txn_app_id: str | None
    retained_snapshots: int
    producer_settings: Mapping[str, Any]

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSinkConfig:
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        servers = opts.get("kafka.bootstrap.servers", "").strip()
        if not servers:
            raise ConfigError(
                "kafka.bootstrap.servers", None, "required: a comma-separated list of host:port"
            )
        checkpoint = opts.get("checkpointlocation", "").strip()
        if not checkpoint:
            raise ConfigError(
                "checkpointLocation", None, "required: barriers are numbered by Spark's batch ids"
            )
        unknown = sorted(
            k for k in opts if not k.startswith("kafka.") and k not in _KNOWN_KAFKA_SINK_OPTIONS
        )
        if unknown:
            log.warning("chkpt-kafka sink ignores unknown option(s): %s", ", ".join(unknown))
        settings: dict[str, Any] = {
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 10,
            "batch_size": 512 * 1024,
        }
        settings.update(kafka_client_settings(opts, role="producer"))
        return cls(
            bootstrap_servers=servers,
            topic=opts.get("topic") or None,
            control_topic=opts.get("controltopic") or None,
            checkpoint_location=qualify(checkpoint),
            query_name=opts.get("queryname"),
            txn_app_id=opts.get("txnappid") or None,
            retained_snapshots=parse_positive_int(
                "retainedSnapshots", opts.get("retainedsnapshots"), default=10, allow_zero=True
            )
            or 0,
            producer_settings=settings,
        )

    def producer_kwargs(self, *, client_id: str) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "client_id": client_id,
            **self.producer_settings,
        }
