"""The embedded broker and the `spark-chkpt broker` command."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from spark_chkpt.kafka.client.topics import create_topic, partition_count
from spark_chkpt.testing.embedded_broker import EmbeddedBroker

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
