"""Each format's default client (issue 29): the sink writes with librdkafka unless told
otherwise, the source reads with kafka-python; a job that never set ``kafka.client`` and
that librdkafka cannot serve keeps producing with kafka-python, with one warning."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client import settings as client_settings
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.source.options import SourceConfig

SERVERS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
SOURCE = {**SERVERS, "subscribe": "events"}
SINK = {**SERVERS, "checkpointLocation": "/tmp/chk", "topic": "out"}
TXN = {**SINK, "delivery": "exactly-once-transactions"}
ENVIRONMENT = (
    "SPARK_CHKPT_KAFKA_CLIENT",
    "SPARK_CHKPT_KAFKA_SOURCE_CLIENT",
    "SPARK_CHKPT_KAFKA_SINK_CLIENT",
)
SILENCE = "kafka.client=kafka-python to silence"


@pytest.fixture(autouse=True)
def no_client_in_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    yield


def source(**extra: str) -> SourceConfig:
    return SourceConfig.from_options({**SOURCE, **extra})


def sink(base: dict[str, str] = SINK, **extra: str) -> KafkaSinkConfig:
    return KafkaSinkConfig.from_options({**base, **extra})


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_sink_defaults_to_librdkafka_and_the_source_to_kafka_python(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    assert source().client == "kafka-python"
    config = sink()
    assert config.client == "confluent"
    assert config.librdkafka_settings is not None
    assert config.librdkafka_settings["enable.idempotence"] is True
    # librdkafka serves these settings: no warning.
    assert sink(**{"kafka.linger.ms": "50", "kafka.compression.type": "zstd"}).client == "confluent"
    assert warnings(caplog) == []


def test_the_environment_sets_both_formats_or_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_CHKPT_KAFKA_CLIENT", "kafka-python")
    assert (source().client, sink().client) == ("kafka-python", "kafka-python")
    monkeypatch.setenv("SPARK_CHKPT_KAFKA_CLIENT", "confluent")
    assert (source().client, sink().client) == ("confluent", "confluent")
    # make test's second pass: each format on its non-default client.
    monkeypatch.setenv("SPARK_CHKPT_KAFKA_SOURCE_CLIENT", "confluent")
    monkeypatch.setenv("SPARK_CHKPT_KAFKA_SINK_CLIENT", "kafka-python")
    assert (source().client, sink().client) == ("confluent", "kafka-python")
    monkeypatch.delenv("SPARK_CHKPT_KAFKA_CLIENT")
    assert (source().client, sink().client) == ("confluent", "kafka-python")
    # The option wins over the environment.
    both = {"kafka.client": "confluent"}
    assert (source(**both).client, sink(**both).client) == ("confluent", "confluent")
    monkeypatch.setenv("SPARK_CHKPT_KAFKA_SINK_CLIENT", "rdkafka")
    with pytest.raises(ConfigError, match=r"'kafka\.client' = 'rdkafka': one of.*sink's default"):
        sink()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        # kafka-python settings librdkafka has no equivalent of
        ({"kafka.bootstrap.timeout.ms": "5000"}, "kafka.bootstrap.timeout.ms"),
        ({"kafka.api.version": "2.5.0"}, "kafka.api.version"),
        # values librdkafka refuses (its message names its own property: socket.timeout.ms)
        ({"kafka.request.timeout.ms": "400000"}, "kafka.request.timeout.ms"),
        ({"kafka.linger.ms": "200000", "kafka.batch.size": "1000"}, "kafka.linger.ms"),
    ],
)
def test_an_unchosen_client_falls_back_to_kafka_python_with_one_warning(
    caplog: pytest.LogCaptureFixture, extra: dict[str, str], named: str
) -> None:
    """A job written before librdkafka was the sink's default does not break on upgrade."""
    caplog.set_level(logging.WARNING)
    config = sink(**extra)
    assert (config.client, config.librdkafka_settings) == ("kafka-python", None)
    (line,) = warnings(caplog)
    assert f"option '{named}' = '{extra[named]}'" in line
    assert SILENCE in line and "\n" not in line
    # Chosen explicitly, the setting fails as before, naming itself or librdkafka's verdict.
    with pytest.raises(ConfigError, match=r"no librdkafka equivalent|librdkafka rejects"):
        sink(**extra, **{"kafka.client": "confluent"})
    # kafka-python chosen: no warning.
    caplog.clear()
    assert sink(**extra, **{"kafka.client": "kafka-python"}).client == "kafka-python"
    assert warnings(caplog) == []


def test_a_client_chosen_in_the_environment_fails_like_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPARK_CHKPT_KAFKA_SINK_CLIENT", "confluent")
    with pytest.raises(ConfigError, match="no librdkafka equivalent") as info:
        sink(**{"kafka.bootstrap.timeout.ms": "5000"})
    assert info.value.option == "kafka.bootstrap.timeout.ms"
    monkeypatch.delenv("SPARK_CHKPT_KAFKA_SINK_CLIENT")
    monkeypatch.setenv("SPARK_CHKPT_KAFKA_CLIENT", "confluent")
    with pytest.raises(ConfigError, match="no librdkafka equivalent") as info:
        sink(TXN, **{"kafka.bootstrap.timeout.ms": "5000"})
    assert info.value.option == "kafka.bootstrap.timeout.ms"


def test_transactions_produce_with_librdkafka_by_default_and_kafka_python_when_chosen(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Transactions follow the sink's client like the other modes (they were on
    kafka-python only, with a warning, until the write task could hand a librdkafka
    transaction to the driver); the transaction timeout reaches librdkafka, and a
    record's delivery timeout is at most that (librdkafka refuses a longer one)."""
    caplog.set_level(logging.WARNING)
    config = sink(TXN)
    assert (config.client, config.transactional) == ("confluent", True)
    assert warnings(caplog) == []
    assert config.librdkafka_settings is not None
    assert config.librdkafka_settings["transaction.timeout.ms"] == config.transaction_timeout_ms
    assert config.librdkafka_settings["message.timeout.ms"] == 120_000
    short = sink(
        TXN,
        **{
            "kafka.transaction.timeout.ms": "10000",
            "maxBatchDuration": "4s",
            "maxRestartTime": "5s",
        },
    )
    assert short.librdkafka_settings is not None
    assert short.librdkafka_settings["message.timeout.ms"] == 10_000
    assert short.librdkafka_settings["socket.timeout.ms"] == 10_000
    assert short.librdkafka_settings["request.timeout.ms"] == 30_000
    assert sink(TXN, **{"kafka.client": "kafka-python"}).client == "kafka-python"
    assert sink(SINK).librdkafka_settings is not None
    assert "transaction.timeout.ms" not in (sink(SINK).librdkafka_settings or {})


def test_without_confluent_kafka_an_unchosen_sink_client_is_kafka_python(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """confluent-kafka is a dependency, but an install with --no-deps may lack it."""
    find_spec = importlib.util.find_spec

    def no_confluent(name: str, *args: Any) -> Any:
        return None if name == "confluent_kafka" else find_spec(name, *args)

    monkeypatch.setattr(client_settings.importlib.util, "find_spec", no_confluent)
    caplog.set_level(logging.WARNING)
    assert sink().client == "kafka-python"
    (line,) = warnings(caplog)
    assert "confluent-kafka package" in line and SILENCE in line
    with pytest.raises(ConfigError, match="needs the confluent-kafka package"):
        sink(**{"kafka.client": "confluent"})
    assert source().client == "kafka-python"
