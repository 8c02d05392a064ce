"""Option parsing: Spark's Kafka option names, one clear error per bad option."""

from __future__ import annotations

import pytest

from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client.settings import kafka_client_settings, librdkafka_producer_settings
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.source.options import OffsetSpec, SourceConfig
from spark_chkpt.options import parse_duration_ms

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "events"}


def parse(streaming: bool | None = True, **extra: str) -> SourceConfig:
    return SourceConfig.from_options({**BASE, **extra}, streaming=streaming)


def test_defaults_follow_spark() -> None:
    cfg = parse()
    assert cfg.starting == OffsetSpec(kind="latest")
    assert cfg.fail_on_data_loss is True
    assert cfg.include_headers is False
    assert cfg.max_offsets_per_trigger is None
    assert cfg.max_trigger_delay_ms == 15 * 60_000
    assert cfg.subscription.topics == ("events",)
    assert parse(streaming=False).starting == OffsetSpec(kind="earliest")


def test_option_names_are_case_insensitive() -> None:
    cfg = SourceConfig.from_options(
        {"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": "a,b", "STARTINGOFFSETS": "earliest"}
    )
    assert cfg.subscription.topics == ("a", "b")
    assert cfg.starting.kind == "earliest"


@pytest.mark.parametrize(
    ("options", "option_named", "fragment"),
    [
        ({"subscribe": None}, "subscribe", "exactly one of"),
        ({"subscribePattern": "e.*"}, "subscribe", "exactly one of"),
        ({"kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers", "required"),
        ({"kafka.bootstrap.servers": "nohostport"}, "kafka.bootstrap.servers", "host:port"),
        ({"startingOffsets": "middle"}, "startingOffsets", "not valid JSON"),
        ({"startingOffsets": '{"events":{"0":"x"}}'}, "startingOffsets", "is not an offset"),
        ({"startingOffsets": '{"events":{"0":-3}}'}, "startingOffsets", "below -2"),
        ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger", "whole number"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger", "greater than 0"),
        (
            {"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
            "minOffsetsPerTrigger",
            "must not exceed",
        ),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay", "duration"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss", "true or false"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp", "milliseconds"),
        ({"endingOffsets": "latest"}, "endingOffsets", "only for batch"),
        ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "startingOffsets"),
        ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit", "not supported"),
        ({"kafka.fetch.max.wait.mss": "5"}, "kafka.fetch.max.wait.mss", "kafka.fetch.max.wait.ms"),
        ({"kafka.max.poll.records": "lots"}, "kafka.max.poll.records", "number"),
        (
            {"kafka.ssl.truststore.location": "/x.jks"},
            "kafka.ssl.truststore.location",
            "ssl.cafile",
        ),
        ({"subscribePattern": "(", "subscribe": None}, "subscribePattern", "regular expression"),
        ({"assign": "[0,1]", "subscribe": None}, "assign", "JSON"),
    ],
)
def test_bad_option_names_option_value_and_rule(
    options: dict[str, str | None], option_named: str, fragment: str
) -> None:
    merged = {**BASE, **options}
    given = {k: v for k, v in merged.items() if v is not None}
    with pytest.raises(ConfigError) as info:
        SourceConfig.from_options(given, streaming=True)
    assert info.value.option == option_named
    assert fragment in str(info.value)
    assert f"'{option_named}'" in str(info.value)


def test_batch_rejects_latest_start_and_earliest_end() -> None:
    with pytest.raises(ConfigError, match="startingOffsets"):
        parse(streaming=False, startingOffsets="latest")
    with pytest.raises(ConfigError, match="endingOffsets"):
        parse(streaming=False, endingOffsets="earliest")
    with pytest.raises(ConfigError, match="-2"):
        parse(streaming=False, endingOffsets='{"events":{"0":-2}}')
    with pytest.raises(ConfigError, match="only for streaming"):
        parse(streaming=False, maxOffsetsPerTrigger="5")


def test_schema_time_validation_accepts_both_kinds() -> None:
    cfg = parse(streaming=None, endingOffsets='{"events":{"0":5}}', maxOffsetsPerTrigger="9")
    assert cfg.ending.offsets == {"events": {0: 5}}
    assert cfg.max_offsets_per_trigger == 9


def test_offset_forms() -> None:
    cfg = parse(startingOffsets='{"events":{"0":-2,"1":-1,"2":42}}')
    assert cfg.starting.kind == "offsets"
    assert cfg.starting.offsets == {"events": {0: -2, 1: -1, 2: 42}}
    assert parse(startingTimestamp="1700000000000").starting == OffsetSpec(
        kind="timestamp", timestamp_ms=1_700_000_000_000
    )
    by_ts = parse(startingOffsetsByTimestamp='{"events":{"0":1700000000000}}').starting
    assert by_ts.kind == "timestamps"
    # Spark's precedence: startingTimestamp over startingOffsetsByTimestamp over startingOffsets
    both = parse(startingTimestamp="5", startingOffsets="earliest").starting
    assert both.kind == "timestamp"


def test_assign_and_pattern() -> None:
    cfg = SourceConfig.from_options(
        {"kafka.bootstrap.servers": "h:1", "assign": '{"a":[1,0],"b":[3]}'}
    )
    assert cfg.subscription.assigned == {"a": (0, 1), "b": (3,)}
    cfg = SourceConfig.from_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "ev.*"})
    assert cfg.subscription.pattern == "ev.*"


def test_kafka_settings_map_to_kafka_python_types() -> None:
    settings = kafka_client_settings(
        {
            "kafka.fetch.max.wait.ms": "250",
            "kafka.check.crcs": "false",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="alice" password="s3cr\\"t";',
            "kafka.isolation.level": "read_committed",
            "kafka.api.version": "2.8.0",
            "kafka.bootstrap.servers": "ignored-here:1",
            "subscribe": "not-a-kafka-setting",
        },
        role="consumer",
    )
    assert settings == {
        "fetch_max_wait_ms": 250,
        "check_crcs": False,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": 's3cr\\"t',
        "isolation_level": "read_committed",
        "api_version": (2, 8, 0),
        "reconnect_backoff_max_ms": 1000,  # the Java client's default, not kafka-python's
    }
    assert kafka_client_settings({"kafka.reconnect.backoff.max.ms": "5000"}, role="consumer") == {
        "reconnect_backoff_max_ms": 5000
    }


def test_kafka_settings_reject_object_valued_and_owned_settings() -> None:
    with pytest.raises(ConfigError, match="unknown or unsupported"):
        kafka_client_settings({"kafka.selector": "x"}, role="consumer")
    with pytest.raises(ConfigError, match="not supported"):
        kafka_client_settings({"kafka.value.serializer": "x"}, role="producer")


def test_consumer_settings_are_group_less_and_never_auto_commit() -> None:
    cfg = parse(**{"kafka.group.id": "lag-visible", "kafka.fetch.min.bytes": "10"})
    settings = cfg.consumer_settings(client_id="c")
    assert settings["group_id"] is None
    assert settings["enable_auto_commit"] is False
    assert settings["fetch_min_bytes"] == 10
    assert cfg.group_id == "lag-visible"


def test_kafka_client_chooses_the_read_tasks_library_and_translates_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SPARK_CHKPT_KAFKA_CLIENT", "SPARK_CHKPT_KAFKA_SOURCE_CLIENT"):
        monkeypatch.delenv(name, raising=False)
    assert parse().client == "kafka-python"
    assert parse().fetch_settings(client_id="c").client == "kafka-python"
    cfg = parse(
        **{
            "kafka.client": "confluent",
            "kafka.fetch.max.bytes": "2000000",
            "kafka.sasl.jaas.config": 'x.PlainLoginModule required username="u" password="p";',
            "kafka.ssl.endpoint.identification.algorithm": "",
        }
    )
    settings = cfg.fetch_settings(client_id="c")
    assert settings.client == "confluent"
    assert settings.settings["fetch.max.bytes"] == 2_000_000
    assert settings.settings["sasl.username"] == "u" and settings.settings["sasl.password"] == "p"
    assert settings.settings["ssl.endpoint.identification.algorithm"] == "none"
    assert settings.settings["isolation.level"] == "read_uncommitted"  # Spark's, not librdkafka's
    assert settings.settings["queued.min.messages"] == cfg.max_records_per_arrow_batch
    monkeypatch.setenv("SPARK_CHKPT_KAFKA_CLIENT", "confluent")
    assert parse().client == "confluent"
    assert parse(**{"kafka.client": "kafka-python"}).client == "kafka-python"  # option wins


def test_kafka_client_errors_name_the_option() -> None:
    with pytest.raises(ConfigError, match=r"'kafka\.client' = 'rdkafka': one of"):
        parse(**{"kafka.client": "rdkafka"})
    with pytest.raises(
        ConfigError, match=r"'kafka\.session\.timeout\.ms'.*no librdkafka equivalent"
    ):
        parse(**{"kafka.client": "confluent", "kafka.session.timeout.ms": "100"})
    with pytest.raises(ConfigError, match=r"librdkafka rejects.*fetch\.max\.bytes"):
        parse(**{"kafka.client": "confluent", "kafka.fetch.max.bytes": "1000"})
    # kafka.client is the sink's choice too now, parsed by parse_client, not a setting.
    assert kafka_client_settings({"kafka.client": "confluent"}, role="producer") == {
        "reconnect_backoff_max_ms": 1000
    }


def test_prefetch_records_defaults_to_one_arrow_batch_and_zero_turns_it_off() -> None:
    assert parse(maxRecordsPerArrowBatch="500").prefetch_records == 500
    assert parse(prefetchRecords="0").prefetch_records == 0
    with pytest.raises(ConfigError, match="prefetchRecords"):
        parse(prefetchRecords="-1")


@pytest.mark.parametrize(
    ("raw", "ms"),
    [("100ms", 100), ("30s", 30_000), ("15m", 900_000), ("2h", 7_200_000), ("250", 250)],
)
def test_durations(raw: str, ms: int) -> None:
    assert parse_duration_ms("maxTriggerDelay", raw, default_ms=1) == ms


def test_every_documented_source_option_is_known(caplog: pytest.LogCaptureFixture) -> None:
    parse(
        alignment="unaligned",
        alignmentTimeout="30s",
        controlTopic="ctl",
        partitionsPerTask="2",
        minPartitions="4",
        includeHeaders="true",
    )
    assert "ignores unknown option" not in caplog.text
    cfg = parse(alignment="none", alignmentTimeout="1500ms", partitionsPerTask="3")
    assert (cfg.alignment, cfg.alignment_timeout_ms, cfg.partitions_per_task) == ("none", 1500, 3)
    with pytest.raises(ConfigError, match="'alignment'"):
        parse(alignment="sometimes")


# -- the chkpt-kafka sink: kafka.* settings that would weaken exactly-once ----------------

SINK = {"kafka.bootstrap.servers": "127.0.0.1:9092", "checkpointLocation": "/tmp/chk"}


def sink(**extra: str) -> KafkaSinkConfig:
    return KafkaSinkConfig.from_options({**SINK, **extra})


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("kafka.acks", "1", "leader"),
        ("kafka.acks", "0", "leader"),
        ("kafka.enable.idempotence", "false", "twice"),
        ("kafka.retries", "0", "retries"),
        ("kafka.max.in.flight.requests.per.connection", "6", "at most 5"),
    ],
)
def test_sink_rejects_kafka_settings_that_weaken_exactly_once(
    option: str, value: str, why: str
) -> None:
    with pytest.raises(ConfigError) as info:
        sink(**{option: value})
    assert info.value.option == option
    assert info.value.value == value
    message = str(info.value)
    assert f"option '{option}' = '{value}'" in message
    assert "exactly-once" in message and why in message


@pytest.mark.parametrize(
    ("options", "setting", "expected"),
    [
        ({}, "acks", "all"),
        ({"kafka.acks": "all"}, "acks", "all"),
        ({"kafka.ACKS": "ALL"}, "acks", "all"),
        ({"kafka.acks": "-1"}, "acks", -1),
        ({}, "enable_idempotence", True),
        ({"kafka.enable.idempotence": "true"}, "enable_idempotence", True),
        ({"kafka.retries": "3"}, "retries", 3.0),
        (
            {"kafka.max.in.flight.requests.per.connection": "5"},
            "max_in_flight_requests_per_connection",
            5,
        ),
        (
            {"kafka.max.in.flight.requests.per.connection": "1"},
            "max_in_flight_requests_per_connection",
            1,
        ),
    ],
)
def test_sink_accepts_the_safe_delivery_settings(
    options: dict[str, str], setting: str, expected: object
) -> None:
    settings = sink(**options).producer_settings
    assert settings[setting] == expected
    assert settings["enable_idempotence"] is True


def test_sink_control_topic_replication_defaults_to_the_brokers_and_takes_the_users() -> None:
    assert (sink().control_replication_factor, sink().control_min_insync_replicas) == (-1, None)
    cfg = sink(**{"controlTopic.replication.factor": "3", "controlTopic.min.insync.replicas": "2"})
    assert (cfg.control_replication_factor, cfg.control_min_insync_replicas) == (3, 2)
    cfg = sink(**{"controlTopic.min.insync.replicas": "2"})  # the broker's factor
    assert (cfg.control_replication_factor, cfg.control_min_insync_replicas) == (-1, 2)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"controlTopic.replication.factor": "0"}, "'controlTopic.replication.factor' = '0'"),
        ({"controlTopic.replication.factor": "three"}, "or -1 for the broker's"),
        ({"controlTopic.min.insync.replicas": "0"}, "'controlTopic.min.insync.replicas' = '0'"),
        (
            {"controlTopic.replication.factor": "2", "controlTopic.min.insync.replicas": "3"},
            r"at most controlTopic.replication.factor \(2\)",
        ),
    ],
)
def test_sink_control_topic_replication_errors_name_the_option(
    options: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        sink(**options)


# -- the chkpt-kafka sink's client: kafka-python or librdkafka ----------------------------


def test_sink_kafka_client_option_and_environment_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPARK_CHKPT_KAFKA_CLIENT", "SPARK_CHKPT_KAFKA_SINK_CLIENT"):
        monkeypatch.delenv(name, raising=False)
    # librdkafka by default (tests/kafka/client/test_client_defaults.py: when it is not).
    assert sink().client == "confluent" and sink().librdkafka_settings is not None
    assert sink(**{"kafka.client": "kafka-python"}).client == "kafka-python"
    assert sink(**{"kafka.client": "kafka-python"}).librdkafka_settings is None
    monkeypatch.setenv("SPARK_CHKPT_KAFKA_CLIENT", "kafka-python")
    assert sink().client == "kafka-python"
    assert sink(**{"kafka.client": "confluent"}).client == "confluent"  # option wins
    with pytest.raises(ConfigError, match=r"'kafka\.client' = 'rdkafka': one of"):
        sink(**{"kafka.client": "rdkafka"})


def test_sink_settings_translate_to_librdkafka_with_exactly_once_fixed() -> None:
    cfg = sink(
        **{
            "kafka.client": "confluent",
            "kafka.linger.ms": "25",
            "kafka.batch.size": "65536",
            "kafka.compression.type": "LZ4",
            "kafka.retries": "3",
            "kafka.max.in.flight.requests.per.connection": "2",
            "kafka.request.timeout.ms": "7000",
            "kafka.delivery.timeout.ms": "20000",
            "kafka.max.block.ms": "9000",
            "kafka.max.request.size": "2000000",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": 'x.ScramLoginModule required username="u" password="p";',
            "kafka.ssl.endpoint.identification.algorithm": "",
        }
    )
    config = cfg.librdkafka_config(client_id="task-1")
    assert config == {
        "bootstrap.servers": "127.0.0.1:9092",
        "client.id": "task-1",
        "partitioner": "murmur2_random",  # kafka-python's and Java's key partitioning
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 25,
        "batch.size": 65536,
        "compression.type": "lz4",
        "retries": 3,
        "max.in.flight.requests.per.connection": 2,
        "message.max.bytes": 2_000_000,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.endpoint.identification.algorithm": "none",
        "socket.timeout.ms": 7000,
        "request.timeout.ms": 7000,
        "message.timeout.ms": 20000,
        "reconnect.backoff.max.ms": 1000,
    }
    # kafka.max.block.ms bounds the wait on a full queue (the producer reads it itself).
    assert cfg.producer_settings["max_block_ms"] == 9000
    # The defaults: kafka-python's timeouts, so both clients' flushes are bounded alike.
    defaults = sink(**{"kafka.client": "confluent", "kafka.acks": "-1"}).librdkafka_settings
    assert defaults is not None and defaults["acks"] == "all"
    assert "retries" not in defaults  # kafka-python's infinity: librdkafka's own maximum
    assert (defaults["message.timeout.ms"], defaults["socket.timeout.ms"]) == (120_000, 30_000)
    # librdkafka opens files at load (a missing CA file fails there): translated only here.
    translated = librdkafka_producer_settings({"ssl_cafile": "/etc/ca.pem", "ssl_keyfile": "k"})
    assert (translated["ssl.ca.location"], translated["ssl.key.location"]) == ("/etc/ca.pem", "k")


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [
        ("kafka.bootstrap.timeout.ms", "5000", "no librdkafka equivalent"),
        ("kafka.metrics.num.samples", "3", "no librdkafka equivalent"),
        ("kafka.acks", "1", "exactly-once"),  # _check_delivery, either client
        ("kafka.enable.idempotence", "false", "exactly-once"),
        ("kafka.max.in.flight.requests.per.connection", "6", "at most 5"),
    ],
)
def test_sink_on_librdkafka_rejects_settings_naming_the_option(
    option: str, value: str, fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment) as info:
        sink(**{"kafka.client": "confluent", option: value})
    assert info.value.option == option


def test_sink_on_librdkafka_is_judged_by_librdkafka_at_load() -> None:
    """Values librdkafka refuses fail on the driver (a producer built and closed), not in
    every write task."""
    with pytest.raises(ConfigError, match=r"librdkafka rejects.*compression"):
        sink(**{"kafka.client": "confluent", "kafka.compression.type": "brotli"})
    with pytest.raises(ConfigError, match=r"librdkafka rejects.*linger\.ms"):
        sink(**{"kafka.client": "confluent", "kafka.linger.ms": "200000"})


def test_spark_jobs_pem_truststore_and_keystore_are_the_pem_files() -> None:
    """A job moved from Spark's connector keeps its TLS options: Java clients read PEM
    trust and key stores (``ssl.truststore.type=PEM``, Kafka 2.7+), which are the PEM
    files the Python clients take (kafka-python's cafile / certfile, librdkafka's
    ssl.ca.location / ssl.certificate.location)."""
    options = {
        "kafka.bootstrap.servers": "b:9093",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "pem",
        "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.location": "/etc/kafka/alice.pem",
        "kafka.ssl.key.password": "k3y",
    }
    settings = kafka_client_settings(options, role="consumer")
    assert settings["ssl_cafile"] == "/etc/kafka/ca.pem"
    assert settings["ssl_certfile"] == "/etc/kafka/alice.pem"
    assert settings["ssl_password"] == "k3y"
    assert not any("truststore" in k or "keystore" in k for k in settings)
    produced = librdkafka_producer_settings(kafka_client_settings(options, role="producer"))
    assert produced["ssl.ca.location"] == "/etc/kafka/ca.pem"
    assert produced["ssl.certificate.location"] == "/etc/kafka/alice.pem"


@pytest.mark.parametrize("kind", ["JKS", "PKCS12"])
def test_a_java_key_store_is_refused_naming_the_pem_options(kind: str) -> None:
    options = {"kafka.ssl.truststore.type": kind, "kafka.ssl.truststore.location": "/x.jks"}
    with pytest.raises(ConfigError) as info:
        kafka_client_settings(options, role="consumer")
    assert info.value.option == "kafka.ssl.truststore.location"
    assert "kafka.ssl.cafile" in str(info.value) and "ssl.truststore.type=PEM" in str(info.value)
