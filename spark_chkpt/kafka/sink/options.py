"""Options of the ``chkpt-kafka`` sink (Spark's Kafka sink names), parsed on the driver.

The sink's producers run with ``acks=all`` and the idempotent producer; a ``kafka.*``
option that would weaken either (``kafka.acks=1``, ``kafka.enable.idempotence=false``,
``kafka.retries=0``, more than 5 requests in flight) is rejected here, at load time, for
either client (``kafka.client``: confluent, that is librdkafka, by default, or
kafka-python). With confluent, the settings are translated into librdkafka properties
and librdkafka judges them here too; a job that left ``kafka.client`` unset and whose
settings or mode librdkafka cannot serve produces with kafka-python, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client.consumer import ClientKind
from spark_chkpt.kafka.client.settings import (
    CONFLUENT_MISSING,
    check_librdkafka,
    kafka_client_settings,
    librdkafka_producer_settings,
    parse_client,
)
from spark_chkpt.options import (
    SnapshotTiming,
    check_option_names,
    lowercase,
    parse_bool,
    parse_duration_ms,
)
from spark_chkpt.snapshot.settings import (
    SNAPSHOT_OPTIONS,
    SnapshotConfig,
    snapshot_options,
)

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

# Every option of the sink as documented (check_option_names refuses a name close to one).
_KNOWN_KAFKA_SINK_OPTIONS = (
    "kafka.bootstrap.servers",
    "topic",
    "controlTopic",
    "controlTopic.replication.factor",
    "controlTopic.min.insync.replicas",
    *SNAPSHOT_OPTIONS,
    "path",
    "delivery",
    "barriers",
    "maxBatchDuration",
    "maxRestartTime",
)

Delivery = Literal["barriers", "exactly-once-transactions"]
DELIVERIES: tuple[Delivery, ...] = ("barriers", "exactly-once-transactions")
# Kafka's transaction.max.timeout.ms default: a longer transaction.timeout.ms is refused by
# the broker at InitProducerId unless the broker allows more.
_BROKER_MAX_TIMEOUT_MS = 900_000


# Why each kafka.* producer setting the sink's exactly-once needs may not be weakened.
_ACKS_WHY = (
    "must be all (or -1): with fewer acknowledgements a record the leader acknowledged "
    "can vanish in a leader failover after a barrier confirmed it, which breaks "
    "exactly-once"
)
_IDEMPOTENCE_WHY = (
    "must be true: without the idempotent producer a retried send can write a record "
    "twice under the same attempt tag, which no barrier can tell apart; exactly-once "
    "needs it"
)
_RETRIES_WHY = (
    "must be greater than 0: the idempotent producer that exactly-once needs requires "
    "retries (leave it unset for kafka-python's default)"
)
_IN_FLIGHT_WHY = (
    "must be at most 5: the idempotent producer that exactly-once needs keeps order "
    "only with at most 5 requests in flight per connection"
)


def _parse_delivery(
    opts: Mapping[str, str], settings: dict[str, Any]
) -> tuple[Delivery, bool, int, int]:
    """``delivery``, ``barriers``, ``maxBatchDuration``, ``maxRestartTime``, and the
    transaction timeout rule: ``kafka.transaction.timeout.ms >= maxBatchDuration +
    maxRestartTime``. A transaction opens when a write task starts; the driver commits
    it after every task of the batch finished; if the driver dies in between, the restart
    commits it. The broker aborts it when ``transaction.timeout.ms`` runs out first,
    and then the batch's recorded output is lost, so the timeout must cover the longest
    batch (trigger interval plus processing) plus the longest restart."""
    raw = (opts.get("delivery") or "barriers").strip().lower()
    if raw not in DELIVERIES:
        raise ConfigError(
            "delivery", opts.get("delivery"), f"must be one of {', '.join(DELIVERIES)}"
        )
    delivery: Delivery = "exactly-once-transactions" if raw != "barriers" else "barriers"
    transactional = delivery == "exactly-once-transactions"
    barriers = parse_bool("barriers", opts.get("barriers"), default=not transactional)
    if not transactional and not barriers:
        raise ConfigError(
            "barriers", opts.get("barriers"), "with delivery=barriers the barriers are the commit"
        )
    batch_ms = parse_duration_ms(
        "maxBatchDuration", opts.get("maxbatchduration"), default_ms=300_000
    )
    restart_ms = parse_duration_ms("maxRestartTime", opts.get("maxrestarttime"), default_ms=600_000)
    if not transactional:
        return delivery, barriers, batch_ms, restart_ms
    if not opts.get("topic"):
        raise ConfigError(
            "topic",
            None,
            "delivery=exactly-once-transactions needs option 'topic': the restart commits a "
            "recorded transaction before any task runs, so it must know the topic at start",
        )
    settings.setdefault("transaction_timeout_ms", _BROKER_MAX_TIMEOUT_MS)
    timeout = int(settings["transaction_timeout_ms"])
    if timeout < batch_ms + restart_ms:
        raise ConfigError(
            "kafka.transaction.timeout.ms",
            str(timeout),
            f"must be at least maxBatchDuration + maxRestartTime ({batch_ms} + {restart_ms} "
            f"= {batch_ms + restart_ms} ms): the broker aborts a transaction that is open "
            "longer, and a batch whose driver died after recording its transactions would "
            "lose them. Raise kafka.transaction.timeout.ms (and the broker's "
            "transaction.max.timeout.ms), or lower maxBatchDuration / maxRestartTime to "
            "what the trigger interval and the restart really take",
        )
    return delivery, barriers, batch_ms, restart_ms


def _parse_control_replication(opts: Mapping[str, str]) -> tuple[int, int | None]:
    """``controlTopic.replication.factor`` (-1, the default: the broker's
    ``default.replication.factor``) and ``controlTopic.min.insync.replicas`` (default:
    the broker's), applied when the sink creates a control topic."""
    option = "controlTopic.replication.factor"
    raw = opts.get(option.lower())
    factor = -1
    if raw is not None:
        try:
            factor = int(raw.strip())
        except ValueError:
            factor = 0
        if factor < 1 and factor != -1:
            raise ConfigError(
                option,
                raw,
                "must be a whole number of replicas (1 or more), or -1 for the broker's "
                "default.replication.factor",
            )
    option = "controlTopic.min.insync.replicas"
    raw = opts.get(option.lower())
    if raw is None:
        return factor, None
    try:
        replicas = int(raw.strip())
    except ValueError:
        replicas = 0
    if replicas < 1 or (factor != -1 and replicas > factor):
        most = "" if factor == -1 else f" and at most controlTopic.replication.factor ({factor})"
        raise ConfigError(option, raw, f"must be a whole number of replicas, 1 or more{most}")
    return factor, replicas


def _choose_producer(
    opts: Mapping[str, str],
    settings: Mapping[str, Any],
    *,
    servers: str,
) -> tuple[ClientKind, dict[str, Any] | None]:
    """The write tasks' client and, for librdkafka, its checked settings.

    librdkafka is the sink's default. A job that does not choose its client (neither
    ``kafka.client`` nor the environment) keeps working where librdkafka cannot serve
    it: its ``kafka.*`` settings have no librdkafka equivalent or are out of librdkafka's
    range, or confluent-kafka is not installed. Then it produces with kafka-python, as
    before librdkafka was the default, and one warning names why. A job that chose
    confluent fails with the reason instead.
    """
    choice = parse_client(opts, role="producer")
    if choice.kind == "kafka-python":
        return "kafka-python", None
    if not choice.installed:  # chosen: parse_client raised already
        _warn_kafka_python("kafka.client", None, f"librdkafka {CONFLUENT_MISSING}")
        return "kafka-python", None
    try:
        librdkafka = librdkafka_producer_settings(settings)
        checked = dict(librdkafka)
        if "transaction.timeout.ms" in checked:  # its rules apply to a transactional one
            checked["transactional.id"] = "spark-chkpt-check"
        check_librdkafka(checked, servers, role="producer")
    except ConfigError as e:
        if choice.chosen:
            raise
        option = e.option if e.option != "kafka.client" else _rejected_option(opts, servers)
        _warn_kafka_python(option, opts.get(option), e.allowed)
        return "kafka-python", None
    return "confluent", librdkafka


def _rejected_option(opts: Mapping[str, str], servers: str) -> str:
    """The first ``kafka.*`` option librdkafka rejects on its own (its message names its
    own property, often under another name: ``linger.ms`` is ``queue.buffering.max.ms``)."""
    for key in sorted(opts):
        if not key.startswith("kafka.") or key in ("kafka.bootstrap.servers", "kafka.client"):
            continue
        alone = kafka_client_settings({key: opts[key]}, role="producer")
        try:
            check_librdkafka(librdkafka_producer_settings(alone), servers, role="producer")
        except ConfigError:
            return key
    return "kafka.*"


def _warn_kafka_python(option: str, value: str | None, why: str) -> None:
    shown = "" if value is None else f" = {value!r}"
    log.warning(
        "chkpt-kafka sink: producing with kafka-python, not librdkafka (the sink's default "
        "client), because of option '%s'%s: %s. Set kafka.client=kafka-python to silence "
        "this warning",
        option,
        shown,
        " ".join(why.split()).rstrip("."),  # one line: librdkafka's messages end in \n"}
    )


def _check_delivery(opts: Mapping[str, str], settings: Mapping[str, Any]) -> None:
    """Reject ``kafka.*`` overrides of the producer settings exactly-once rests on
    (``acks=all``, the idempotent producer), naming the option, its value and why."""
    if settings["acks"] not in ("all", -1):
        raise ConfigError("kafka.acks", opts.get("kafka.acks"), _ACKS_WHY)
    if settings["enable_idempotence"] is not True:
        raise ConfigError(
            "kafka.enable.idempotence", opts.get("kafka.enable.idempotence"), _IDEMPOTENCE_WHY
        )
    if "retries" in settings and settings["retries"] <= 0:
        raise ConfigError("kafka.retries", opts.get("kafka.retries"), _RETRIES_WHY)
    in_flight = settings.get("max_in_flight_requests_per_connection")
    if in_flight is not None and in_flight > 5:
        raise ConfigError(
            "kafka.max.in.flight.requests.per.connection",
            opts.get("kafka.max.in.flight.requests.per.connection"),
            _IN_FLIGHT_WHY,
        )


@dataclass(frozen=True)
class KafkaSinkConfig(SnapshotConfig):
    """Validated options of the ``chkpt-kafka`` sink (Spark's Kafka sink names): the
    snapshot protocol's (:func:`~spark_chkpt.snapshot.settings.snapshot_options`) and the
    sink's own."""

    bootstrap_servers: str
    topic: str | None
    control_topic: str | None
    checkpoint_location: str
    query_name: str | None
    txn_app_id: str | None
    retained_snapshots: int
    producer_settings: Mapping[str, Any]  # kafka-python's (also the driver's barrier writes)
    client: ClientKind = "kafka-python"  # the write tasks' producer
    librdkafka_settings: Mapping[str, Any] | None = None  # with client "confluent"
    # snapshotTimeout, minPauseBetweenSnapshots
    timing: SnapshotTiming = field(default_factory=SnapshotTiming)
    delivery: Delivery = "barriers"  # or Kafka transactions (read_committed consumers)
    barriers: bool = True  # barrier records (chkpt-kafka readers); off: transactions only
    max_batch_duration_ms: int = 300_000  # the transaction timeout rule's terms
    max_restart_time_ms: int = 600_000
    # The control topics this sink creates: replicas (-1: the broker's default) and
    # min.insync.replicas (None: the broker's).
    control_replication_factor: int = -1
    control_min_insync_replicas: int | None = None

    @property
    def transactional(self) -> bool:
        return self.delivery == "exactly-once-transactions"

    @property
    def transaction_timeout_ms(self) -> int:
        return int(self.producer_settings.get("transaction_timeout_ms", _BROKER_MAX_TIMEOUT_MS))

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSinkConfig:
        # First: a misspelled name must be named as such, not as the option it missed.
        check_option_names(
            options,
            known=_KNOWN_KAFKA_SINK_OPTIONS,
            connector="chkpt-kafka sink",
            prefixes=("kafka.",),
        )
        opts = lowercase(options)
        servers = opts.get("kafka.bootstrap.servers", "").strip()
        if not servers:
            raise ConfigError(
                "kafka.bootstrap.servers", None, "required: a comma-separated list of host:port"
            )
        snapshot = snapshot_options(
            opts, checkpoint_needed="barriers are numbered by Spark's batch ids"
        )
        settings: dict[str, Any] = {
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 10,
            "batch_size": 512 * 1024,
        }
        settings.update(kafka_client_settings(opts, role="producer"))
        _check_delivery(opts, settings)
        delivery, barriers, batch_ms, restart_ms = _parse_delivery(opts, settings)
        replication, min_insync = _parse_control_replication(opts)
        client, librdkafka = _choose_producer(
            opts,
            settings,
            servers=servers,
        )
        return cls(
            bootstrap_servers=servers,
            topic=opts.get("topic") or None,
            control_topic=opts.get("controltopic") or None,
            producer_settings=settings,
            client=client,
            librdkafka_settings=librdkafka,
            **snapshot,
            delivery=delivery,
            barriers=barriers,
            max_batch_duration_ms=batch_ms,
            max_restart_time_ms=restart_ms,
            control_replication_factor=replication,
            control_min_insync_replicas=min_insync,
        )

    def producer_kwargs(self, *, client_id: str) -> dict[str, Any]:
        """kafka-python ``KafkaProducer`` keyword arguments."""
        return {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "client_id": client_id,
            **self.producer_settings,
        }

    def librdkafka_config(self, *, client_id: str) -> dict[str, Any]:
        """confluent-kafka ``Producer`` configuration (librdkafka properties)."""
        settings = self.librdkafka_settings
        if settings is None:
            settings = librdkafka_producer_settings(self.producer_settings)
        return {"bootstrap.servers": self.bootstrap_servers, "client.id": client_id, **settings}


def check_sink_schema(schema: StructType, config: KafkaSinkConfig) -> None:
    """Spark's Kafka sink rules: ``value`` (string/binary) required; ``key`` string/binary,
    ``topic`` string (unless the option is set), ``partition`` int, ``headers``."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType
    from pyspark.sql.types import StructType as Struct

    fields = {f.name: f.dataType for f in schema.fields}
    text = (StringType, BinaryType)
    if "value" not in fields:
        raise ConfigError(
            "value",
            None,
            f"the query must have a 'value' column (string or binary); it has {', '.join(fields)}",
        )
    for column in ("key", "value"):
        if column in fields and not isinstance(fields[column], text):
            raise ConfigError(
                column,
                fields[column].simpleString(),
                f"the '{column}' column must be string or binary",
            )
    if config.topic is None:
        if "topic" not in fields:
            raise ConfigError("topic", None, "set option 'topic' or write a 'topic' column")
        if not isinstance(fields["topic"], StringType):
            raise ConfigError(
                "topic", fields["topic"].simpleString(), "the 'topic' column must be a string"
            )
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ConfigError(
            "partition", fields["partition"].simpleString(), "the 'partition' column must be an int"
        )
    if "headers" in fields:
        headers = fields["headers"]
        element = headers.elementType if isinstance(headers, ArrayType) else None
        ok = (
            isinstance(element, Struct)
            and [f.name for f in element.fields] == ["key", "value"]
            and isinstance(element.fields[0].dataType, StringType)
            and isinstance(element.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise ConfigError(
                "headers",
                headers.simpleString(),
                "the 'headers' column must be array<struct<key:string,value:binary>>",
            )
