"""The Kafka broker a bench row runs on: the one given, else the project's real Apache
Kafka broker (embedded), started for the row and stopped after it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def kafka_broker(bootstrap_servers: str | None) -> Iterator[str]:
    """The given broker, else the real Apache Kafka broker (embedded) for the run: Spark's
    own connector, which the native rows run, needs Kafka (bench/native.py), and every
    row must read the same topic on the same broker."""
    if bootstrap_servers:
        yield bootstrap_servers
        return
    from spark_chkpt.testing.kafka_broker import EmbeddedKafka

    with EmbeddedKafka() as broker:
        yield broker.bootstrap_servers
