"""Shared fixtures: the broker (the real Kafka broker, embedded; Tansu with
SPARK_CHKPT_TEST_BROKER=tansu; or KAFKA_BOOTSTRAP_SERVERS), one SparkSession (with
Spark's Kafka connector and delta-spark: ``make setup`` fetched them), and a
uniquely named topic per test."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator

import pytest


@pytest.fixture(scope="session")
def bootstrap_servers() -> Iterator[str]:
    """The session's broker: KAFKA_BOOTSTRAP_SERVERS if set, else an embedded one, the
    real Apache Kafka broker unless SPARK_CHKPT_TEST_BROKER=tansu (tests.helpers)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    from tests.helpers import embedded_broker

    with embedded_broker() as broker:
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from spark_chkpt.session import build_session

    session = build_session(
        app_name="spark-chkpt-tests",
        master="local[2]",
        connectors=True,
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.python.worker.reuse": "true",
            # delta-spark replays a table's log in 50 tasks by default; two slots here
            "spark.databricks.delta.snapshotPartitions": "2",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[object]:
    """An S3-compatible server on loopback for the session: moto's, in a child process,
    enforcing conditional writes (spark_chkpt.testing.s3_server)."""
    from spark_chkpt.testing.s3_server import S3Server

    with S3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: object, request: pytest.FixtureRequest) -> str:
    """A new bucket on :func:`s3_server` named after the test."""
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40]
    name = f"{base}-{uuid.uuid4().hex[:6]}".strip("-")
    s3_server.create_bucket(name)  # type: ignore[attr-defined]
    return name


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:60]
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def make_topic(bootstrap_servers: str, topic_name: str) -> Callable[..., str]:
    """Create a topic named after the test: ``make_topic(partitions=3)``."""
    from spark_chkpt.kafka.client.topics import create_topic

    counter = iter(range(1000))

    def make(*, partitions: int = 1, suffix: str | None = None) -> str:
        n = next(counter)
        name = topic_name if n == 0 and suffix is None else f"{topic_name}-{suffix or n}"
        create_topic(bootstrap_servers=bootstrap_servers, name=name, partitions=partitions)
        return name

    return make


@pytest.fixture
def producer(bootstrap_servers: str) -> Iterator[object]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=5)
    yield p
    p.close()
