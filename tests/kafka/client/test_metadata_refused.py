"""A command's first metadata request reaching a killed broker of the cluster (still in
the metadata: kafka-python raises ``KafkaConnectionError: 111 ECONNREFUSED`` at once) is
asked again, within the request timeout: ``spark-chkpt status`` (the source's offset
reader), a savepoint fork sizing its topics, a Kafka rewind's revoke entry. Each failed
on the old code with the refusal; the chains of the three-node cluster are
tests/chains/test_kafka_cluster.py."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from kafka import TopicPartition
from kafka.errors import KafkaConnectionError

from spark_chkpt.kafka.client import outage


class _FirstRequestRefused:
    """kafka-python's consumer whose first metadata request, ``topics()`` or a
    ``partitions_for_topic`` that has to ask, is refused."""

    config: ClassVar[dict[str, Any]] = {"request_timeout_ms": 30_000}

    def __init__(self) -> None:
        self.known = False
        self.refused = 0

    def _metadata(self) -> None:
        if not self.known and not self.refused:
            self.refused += 1
            raise KafkaConnectionError("111 ECONNREFUSED")
        self.known = True

    def topics(self) -> set[str]:
        self._metadata()
        return {"views"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        self._metadata()
        return {0, 1} if topic == "views" else set()

    def beginning_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[Any, int]:
        return {tp: 0 for tp in tps}

    def end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[Any, int]:
        return {tp: 10 + tp.partition for tp in tps}

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "RETRY_PAUSE_S", 0.01)


def test_a_fork_sizing_its_topics_asks_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_chkpt.savepoint.pipeline import fork

    consumer = _FirstRequestRefused()
    monkeypatch.setattr(fork, "kafka_consumer", lambda **_: consumer)
    assert fork._offsets("b:9092", "views") == ({0: 0, 1: 0}, {0: 10, 1: 11})
    assert consumer.refused == 1


def test_status_listing_the_subscription_asks_again() -> None:
    from spark_chkpt.kafka.source.offset_reader import OffsetReader
    from spark_chkpt.kafka.source.options import SourceConfig
    from spark_chkpt.offsets import TopicPartition as Partition

    config = SourceConfig.from_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "views"})
    reader = OffsetReader(config=config, client_id="spark-chkpt-status")
    consumer = _FirstRequestRefused()
    reader._consumer = consumer
    assert reader.partitions() == [Partition("views", 0), Partition("views", 1)]
    assert consumer.refused == 1


def test_partitions_of_a_topic_after_a_refusal() -> None:
    from spark_chkpt.kafka.client.metadata import partitions_of

    consumer = _FirstRequestRefused()
    assert partitions_of(consumer, "views") == [
        TopicPartition("views", 0),
        TopicPartition("views", 1),
    ]
    assert partitions_of(consumer, "gone") == []
