"""The embedded brokers (Tansu and the real Kafka) and the `spark-chkpt broker` command."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spark_chkpt.errors import BrokerError
from spark_chkpt.kafka.client.topics import create_topic, partition_count
from spark_chkpt.testing.embedded_broker import EmbeddedBroker
from spark_chkpt.testing.kafka_broker import EmbeddedKafka

pytestmark = pytest.mark.integration


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_broker_starts_creates_topics_and_stops() -> None:
    with EmbeddedBroker() as broker:
        assert _port_open(broker.port)
        create_topic(bootstrap_servers=broker.bootstrap_servers, name="t", partitions=3)
        assert partition_count(bootstrap_servers=broker.bootstrap_servers, name="t") == 3
    assert not _port_open(broker.port)


def test_cli_prints_bootstrap_and_stops_on_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "spark_chkpt.cli", "broker", "--topic", "events:2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        address = process.stdout.readline().strip()
        host, _, port = address.rpartition(":")
        assert host == "127.0.0.1" and port.isdigit()
        assert partition_count(bootstrap_servers=address, name="events") == 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert not _port_open(int(port))
    finally:
        if process.poll() is None:
            process.kill()


def test_kafka_starts_creates_topics_and_keeps_them_over_a_restart(tmp_path: Path) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    with EmbeddedKafka(data_dir=tmp_path / "kafka") as kafka:
        servers = kafka.bootstrap_servers
        assert _port_open(kafka.port)
        create_topic(bootstrap_servers=servers, name="t", partitions=3)
        producer = KafkaProducer(bootstrap_servers=servers)
        for i in range(30):
            producer.send("t", value=b"%d" % i, partition=i % 3)
        producer.flush()
        producer.close()
        kafka.restart(keep_data=True)
        assert partition_count(bootstrap_servers=servers, name="t") == 3
        consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        try:
            tps = [KafkaTopicPartition("t", p) for p in range(3)]
            assert consumer.end_offsets(tps) == dict.fromkeys(tps, 10)
        finally:
            consumer.close()
        kafka.restart(keep_data=False)
        assert partition_count(bootstrap_servers=servers, name="t") == 0
    assert not _port_open(kafka.port)
    assert (tmp_path / "kafka").is_dir()  # a given folder stays; a temporary one goes


def test_kafka_that_cannot_start_fails_with_its_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerError, match=rf"(?s)exited with code.*{port}.*already in use"):
            EmbeddedKafka(port=port, data_dir=tmp_path / "kafka").start()
    bad = EmbeddedKafka(data_dir=tmp_path / "bad", settings={"num.io.threads": "none"})
    with pytest.raises(BrokerError, match=r"(?s)formatting the Kafka storage.*num\.io\.threads"):
        bad.start()


def test_cli_with_kafka_prints_bootstrap_and_stops_on_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "spark_chkpt.cli", "broker", "--kafka", "--topic", "events:2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        address = process.stdout.readline().strip()
        assert any("Apache Kafka" in process.stderr.readline() for _ in range(20))
        assert partition_count(bootstrap_servers=address, name="events") == 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert not _port_open(int(address.rpartition(":")[2]))
    finally:
        if process.poll() is None:
            process.kill()
