"""The sink's output-topic check runs where Spark plans each batch's writer (the driver,
once per micro-batch): a topic found once is not asked about again in the process. Each
question built a client and waited for a metadata refresh, about 110 ms of every
Kafka -> Kafka batch (the two-job latency regression of the fourth round, bisected)."""

from __future__ import annotations

import pytest

from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client import topics


@pytest.fixture(autouse=True)
def _forget() -> None:
    getattr(topics, "_PRESENT", set()).clear()


def test_a_topic_found_is_not_asked_about_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def count(*, bootstrap_servers: str, name: str, settings: object = None) -> int:
        asked.append(f"{bootstrap_servers}/{name}")
        return 4

    monkeypatch.setattr(topics, "partition_count", count)
    for _ in range(3):  # three batches
        topics.require_output_topic(bootstrap_servers="b:9092", name="out")
    topics.require_output_topic(bootstrap_servers="other:9092", name="out")
    assert asked == ["b:9092/out", "other:9092/out"]


def test_a_missing_topic_is_asked_about_at_every_batch_until_it_appears(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counts = iter([0, 0, 3])
    asked: list[str] = []

    def count(*, bootstrap_servers: str, name: str, settings: object = None) -> int:
        asked.append(name)
        return next(counts)

    monkeypatch.setattr(topics, "partition_count", count)
    monkeypatch.setattr(topics, "creates_topics_on_demand", lambda **_: True)
    topics.require_output_topic(bootstrap_servers="b:9092", name="out")  # the broker creates it
    topics.require_output_topic(bootstrap_servers="b:9092", name="out")
    topics.require_output_topic(bootstrap_servers="b:9092", name="out")  # there now
    topics.require_output_topic(bootstrap_servers="b:9092", name="out")
    assert asked == ["out", "out", "out"]


def test_a_missing_topic_a_broker_will_not_create_is_still_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics, "partition_count", lambda **_: 0)
    monkeypatch.setattr(topics, "creates_topics_on_demand", lambda **_: False)
    monkeypatch.setattr(topics, "_NEW_TOPIC_WAIT_S", 0.0)
    with pytest.raises(ConfigError, match="'out' does not exist"):
        topics.require_output_topic(bootstrap_servers="b:9092", name="out")
    assert not getattr(topics, "_PRESENT", set())
