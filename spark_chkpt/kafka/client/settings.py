"""``kafka.*`` options mapped onto the Kafka clients' settings.

Spark's Kafka options carry the Java client's setting names (``kafka.fetch.max.bytes``).
:func:`kafka_client_settings` maps each onto the kafka-python setting of the same meaning
and rejects an unknown one, naming the closest known names; :func:`librdkafka_settings`
(the source's read tasks) and :func:`librdkafka_producer_settings` (the sink's write
tasks) translate the result for the confluent-kafka client. :func:`parse_client` reads
the choice of client, the same option for the source and the sink with a default per
format (``ROLE_DEFAULTS``): librdkafka for the sink, kafka-python for the source.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client.consumer import CLIENTS, ClientKind
from spark_chkpt.options import parse_bool

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
    "transactional.id": (
        "the sink derives its transactional ids (delivery=exactly-once-transactions: "
        "chkpt-<appId>-<topic>-<partition>-<slot>); barrier delivery uses none"
    ),
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
    "ssl.truststore.location": "use kafka.ssl.cafile, or a PEM store: ssl.truststore.type=PEM",
    "ssl.truststore.password": "kafka-python reads PEM files: use kafka.ssl.cafile",
    "ssl.keystore.location": "use kafka.ssl.certfile/keyfile, or ssl.keystore.type=PEM",
    "ssl.keystore.password": "use kafka.ssl.password",
    "ssl.key.password": "use kafka.ssl.password",
    "sasl.login.callback.handler.class": "Java login callbacks are not supported",
}
# Java's PEM stores (ssl.*.type=PEM, Kafka 2.7+) are the Python clients' PEM files.
_STORE_TYPES = ("ssl.truststore.type", "ssl.keystore.type")
_PEM_STORES = {
    "ssl.truststore.location": ("ssl.truststore.type", "ssl_cafile"),
    "ssl.keystore.location": ("ssl.keystore.type", "ssl_certfile"),  # key in the same file
    "ssl.key.password": ("ssl.keystore.type", "ssl_password"),
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


RECONNECT_BACKOFF_MAX_MS = 1000


def kafka_client_settings(options: Mapping[str, str], *, role: ClientRole) -> dict[str, Any]:
    """Translate every ``kafka.*`` option except the bootstrap servers and group id.

    Raises :class:`ConfigError` for an unknown setting, naming the closest known ones.
    """
    defaults = _client_defaults(role)
    rejected = _SOURCE_REJECTED if role == "consumer" else _PRODUCER_REJECTED
    # Java's reconnect.backoff.max.ms (1 s): kafka-python's 30 s outlasts a 10 s restart.
    settings: dict[str, Any] = {"reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS}
    stores = {k.lower()[6:]: str(v).strip().upper() for k, v in options.items()}
    for key, raw in options.items():
        option = key.lower()
        if not option.startswith("kafka."):
            continue
        java = option[len("kafka.") :]
        if java in ("bootstrap.servers", "group.id"):
            continue
        if java == "client":
            continue  # the choice of client, parsed by parse_client
        if java in rejected:
            raise ConfigError(key, raw, f"not supported: {rejected[java]}")
        if java in _STORE_TYPES:
            continue  # read with its location: a non-PEM store is refused there
        if java in _PEM_STORES and stores.get(_PEM_STORES[java][0]) == "PEM":
            settings[_PEM_STORES[java][1]] = raw
            continue
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
_LIBRDKAFKA_NAMES: dict[str, str | None] = {
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


# Each format's default client when neither kafka.client nor the environment names one:
# the sink writes 2.2-2.6x faster on librdkafka; the source reads as fast per core on
# kafka-python's columnar path, and a librdkafka consumer crashes on the embedded Tansu
# broker when its topic is deleted (docs/performance/index.md).
ROLE_DEFAULTS: dict[ClientRole, ClientKind] = {"consumer": "kafka-python", "producer": "confluent"}
# The environment's defaults, most specific first: one format's, then both formats'.
ROLE_ENVIRONMENT: dict[ClientRole, str] = {
    "consumer": "SPARK_CHKPT_KAFKA_SOURCE_CLIENT",
    "producer": "SPARK_CHKPT_KAFKA_SINK_CLIENT",
}
DEPLOYMENT_ENVIRONMENT = "SPARK_CHKPT_KAFKA_CLIENT"
_FORMAT = {"consumer": "source", "producer": "sink"}


@dataclass(frozen=True)
class ClientChoice:
    """The client a format's tasks use, and whether someone chose it.

    ``chosen``: named by ``kafka.client`` or by the environment, so a setting it cannot
    honour fails loudly. Otherwise it is the format's default, which the sink may trade
    for kafka-python when the user's settings need it (with a warning).
    """

    kind: ClientKind
    chosen: bool

    @property
    def installed(self) -> bool:
        """Whether this client's library can be imported here."""
        return self.kind != "confluent" or importlib.util.find_spec("confluent_kafka") is not None


def parse_client(opts: Mapping[str, str], *, role: ClientRole) -> ClientChoice:
    """``kafka.client``: which library the source's read tasks fetch with (role
    ``consumer``, default kafka-python) or the sink's write tasks produce with (role
    ``producer``, default confluent, that is librdkafka).

    When the option is not set, ``SPARK_CHKPT_KAFKA_SOURCE_CLIENT`` /
    ``SPARK_CHKPT_KAFKA_SINK_CLIENT`` and then ``SPARK_CHKPT_KAFKA_CLIENT`` (both formats)
    in the environment set the default for a deployment. Raises :class:`ConfigError` for
    an unknown client, or a chosen confluent client whose package is missing.
    """
    raw = opts.get("kafka.client") or os.environ.get(ROLE_ENVIRONMENT[role])
    raw = raw or os.environ.get(DEPLOYMENT_ENVIRONMENT)
    if not raw:
        return ClientChoice(kind=ROLE_DEFAULTS[role], chosen=False)
    client = raw.strip().lower()
    if client not in CLIENTS:
        default = ROLE_DEFAULTS[role]
        raise ConfigError(
            "kafka.client",
            raw,
            f"one of 'kafka-python', 'confluent' (the {_FORMAT[role]}'s default: {default})",
        )
    kind: ClientKind = "confluent" if client == "confluent" else "kafka-python"
    choice = ClientChoice(kind=kind, chosen=True)
    if not choice.installed:
        raise ConfigError("kafka.client", raw, CONFLUENT_MISSING)
    return choice


CONFLUENT_MISSING = (
    "needs the confluent-kafka package, a dependency of spark-chkpt: "
    "pip install 'confluent-kafka>=2.4,<3' (or reinstall spark-chkpt with its dependencies)"
)


def check_librdkafka(
    config: Mapping[str, Any], servers: str, *, role: ClientRole = "consumer"
) -> None:
    """Let librdkafka judge the values here, on the driver, not in every task.

    Building a consumer or producer validates its configuration without waiting for the
    broker (a few ms).
    """
    import confluent_kafka

    from spark_chkpt.kafka.client.factory import confluent_consumer, confluent_producer

    try:
        if role == "producer":
            # log_level 0: the check's connection attempt is not worth a log line.
            producer = confluent_producer({**config, "bootstrap.servers": servers, "log_level": 0})
            producer.flush(0)
            del producer
            return
        consumer = confluent_consumer(
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
    _translate(settings, _LIBRDKAFKA_NAMES, into=config)
    return config


def _translate(
    settings: Mapping[str, Any], names: Mapping[str, str | None], *, into: dict[str, Any]
) -> None:
    for name, value in settings.items():
        if name == "ssl_check_hostname":
            into["ssl.endpoint.identification.algorithm"] = "https" if value else "none"
            continue
        if name not in names:
            raise ConfigError(
                "kafka." + name.replace("_", "."),
                str(value),
                "has no librdkafka equivalent here; remove it or use kafka.client=kafka-python",
            )
        target = names[name]
        if target is not None and value is not None:
            into[target] = value


# kafka-python producer settings and the librdkafka property of the same meaning (None:
# honoured by the sink itself). Timeouts are set in librdkafka_producer_settings.
_CONSUMER_ONLY = {
    "fetch_min_bytes",
    "fetch_max_wait_ms",
    "fetch_max_bytes",
    "max_partition_fetch_bytes",
    "isolation_level",
    "check_crcs",
    "max_poll_records",
}
_LIBRDKAFKA_PRODUCER_NAMES: dict[str, str | None] = {
    **{k: v for k, v in _LIBRDKAFKA_NAMES.items() if k not in _CONSUMER_ONLY},
    "acks": "acks",
    "enable_idempotence": "enable.idempotence",
    "linger_ms": "linger.ms",
    "batch_size": "batch.size",
    "compression_type": "compression.type",
    "retries": "retries",
    "max_in_flight_requests_per_connection": "max.in.flight.requests.per.connection",
    "max_request_size": "message.max.bytes",
    "receive_message_max_bytes": "receive.message.max.bytes",
    "allow_auto_create_topics": "allow.auto.create.topics",
    "request_timeout_ms": None,
    "delivery_timeout_ms": None,
    "max_block_ms": None,  # how long a full queue may block a write task (BufferError)
    "transaction_timeout_ms": "transaction.timeout.ms",  # delivery=exactly-once-transactions
}
# librdkafka's upper bound for retries; kafka-python's default is float('inf').
_MAX_RETRIES = 2_147_483_647


def librdkafka_producer_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Translate validated kafka-python producer settings into librdkafka properties.

    The exactly-once ones are fixed (``enable.idempotence=true``, ``acks=all``; the sink
    options have already refused weaker values). kafka-python's request and delivery
    timeouts become ``socket.timeout.ms`` / ``request.timeout.ms`` and
    ``message.timeout.ms`` with kafka-python's defaults, so a flush is bounded the same
    way for both clients. Keys are partitioned with murmur2, as kafka-python and Java do.
    With a transaction timeout (``delivery=exactly-once-transactions``) a record's delivery
    timeout and a socket's are at most that: librdkafka refuses longer ones for a
    transactional producer, and a record delivered after its transaction was aborted is
    of no use anyway.
    Raises :class:`ConfigError` naming the ``kafka.*`` option that has no equivalent.
    """
    config: dict[str, Any] = {"partitioner": "murmur2_random"}
    _translate(settings, _LIBRDKAFKA_PRODUCER_NAMES, into=config)
    config["acks"] = "all"
    config["enable.idempotence"] = True
    if "compression.type" in config:
        config["compression.type"] = str(config["compression.type"]).lower()
    if "retries" in config:
        config["retries"] = int(min(config["retries"], _MAX_RETRIES))
    request_ms = int(settings.get("request_timeout_ms", 30_000))
    delivery_ms = int(settings.get("delivery_timeout_ms", 120_000))
    config["request.timeout.ms"] = request_ms
    if "transaction_timeout_ms" in settings:
        transaction_ms = int(settings["transaction_timeout_ms"])
        request_ms = min(request_ms, transaction_ms)
        delivery_ms = min(delivery_ms, transaction_ms)
    config["socket.timeout.ms"] = request_ms
    config["message.timeout.ms"] = delivery_ms
    return config
