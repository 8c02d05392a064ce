"""Client errors that mean "the broker did not answer" become one error naming the
broker, what was being done, and the option that sets the expired timeout."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from kafka import errors as kafka_errors

from spark_chkpt.errors import BrokerUnavailableError
from spark_chkpt.kafka.client.outage import broker_calls, unavailable


@pytest.mark.parametrize(
    ("error", "option", "value"),
    [
        (
            kafka_errors.KafkaTimeoutError("Unable to bootstrap from ['h:1']"),
            "kafka.bootstrap.timeout.ms",
            5000,
        ),
        (
            kafka_errors.RequestTimedOutError("Request timed out after 4999 ms"),
            "kafka.request.timeout.ms",
            30000,
        ),
        (
            kafka_errors.KafkaTimeoutError("Failed to update metadata after 60.0 secs."),
            "kafka.max.block.ms",
            60000,
        ),
    ],
)
def test_an_outage_names_broker_doing_and_timeout(
    error: Exception, option: str, value: int
) -> None:
    result = unavailable(
        error, servers="h:1", settings={"bootstrap_timeout_ms": 5000}, doing="planning"
    )
    assert isinstance(result, BrokerUnavailableError) and result.retriable
    message = str(result)
    assert "h:1" in message and "while planning" in message
    assert f"{option}={value}" in message and f"raise {option}" in message


def test_other_errors_pass_unchanged() -> None:
    assert unavailable(ValueError("x"), servers="h:1", settings={}, doing="d") is None
    with pytest.raises(ValueError, match="x"), broker_calls(servers="h:1", settings={}, doing="d"):
        raise ValueError("x")
    with (
        pytest.raises(BrokerUnavailableError) as info,
        broker_calls(servers="h:1", settings={}, doing="reading"),
    ):
        raise kafka_errors.RequestTimedOutError("late")
    assert isinstance(info.value.__cause__, kafka_errors.RequestTimedOutError)


def test_the_librdkafka_sink_fails_within_its_timeouts_when_the_broker_never_answers(
    tmp_path: Path,
) -> None:
    """A frozen broker: the port accepts connections (the kernel's backlog) and never
    answers a request. The librdkafka producer's flush must end in BrokerUnavailableError
    naming the delivery timeout within delivery + request timeout, not hang."""
    import pyarrow as pa

    from spark_chkpt.kafka.sink.options import KafkaSinkConfig
    from spark_chkpt.kafka.sink.writer import build_producer

    with socket.socket() as frozen:
        frozen.bind(("127.0.0.1", 0))
        frozen.listen(16)
        servers = f"127.0.0.1:{frozen.getsockname()[1]}"
        config = KafkaSinkConfig.from_options(
            {
                "kafka.bootstrap.servers": servers,
                "topic": "frozen",
                "checkpointLocation": str(tmp_path / "chk"),
                "kafka.client": "confluent",
                "kafka.delivery.timeout.ms": "1500",
                "kafka.request.timeout.ms": "1000",
            }
        )
        producer = build_producer(config=config, batch_id=7, task=0)
        started = time.monotonic()
        producer.send(pa.record_batch({"value": [b"v-%d" % i for i in range(100)]}))
        with pytest.raises(BrokerUnavailableError) as info:
            producer.finish()
        producer.close()
        took = time.monotonic() - started
    message = str(info.value)
    assert servers in message and "producing batch 7's records" in message
    assert "kafka.delivery.timeout.ms=1500" in message, message
    assert took < 2.5 + 3, f"took {took:.1f} s"


def test_a_metadata_answer_without_brokers_is_retried_like_a_refused_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A KRaft broker paused longer than its session timeout is fenced by the controller,
    and for a moment after it resumes its metadata lists no brokers: kafka-python raises
    MetadataEmptyBrokerList. tests/kafka/client/test_broker_outage.py saw stage B's planner die
    on it although the outage was shorter than B's timeouts. Red before: raised at once."""
    from spark_chkpt.kafka.client import outage

    monkeypatch.setattr(outage, "RETRY_PAUSE_S", 0.01)
    calls = []

    def call() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise kafka_errors.MetadataEmptyBrokerList("MetadataResponse(brokers=[])")
        return "read"

    got = outage.retry_while_refused(
        call, settings={"request_timeout_ms": 5000}, doing="reading the index"
    )
    assert got == "read" and len(calls) == 3
