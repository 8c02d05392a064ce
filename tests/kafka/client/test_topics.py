"""The CreateTopics request a topic the project creates sends: replication factor -1 (the
broker's ``default.replication.factor``, KIP-464) unless the caller gives one.

The request's topics are built by kafka-python's own ``_process_create_topics_input``
from what :func:`create_topic` hands the admin client, so the assertion is on the
request kafka-python would send. The broker's side (the topic created with the
broker's factor, a factor the broker cannot place refused) is
``tests/kafka/client/test_topics_broker.py``."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.admin import KafkaAdminClient

from spark_chkpt.kafka.client import topics


class _Admin:
    """kafka-python's admin client up to the request: the CreateTopics topics it builds."""

    def __init__(self, *, version: tuple[int, int] = (4, 1)) -> None:
        self.requests: list[list[Any]] = []
        self.version = version

    def create_topics(self, new_topics: Any, **_: Any) -> dict[str, Any]:
        request = KafkaAdminClient._process_create_topics_input(new_topics)
        if self.version < (2, 4) and any(t.replication_factor == -1 for t in request):
            from kafka.errors import IncompatibleBrokerVersion

            raise IncompatibleBrokerVersion("needs an explicit replication_factor")
        self.requests.append(request)
        return {}

    def describe_cluster(self) -> dict[str, Any]:
        return {"brokers": [{"broker_id": 1}]}

    def describe_configs(self, resources: Any, **_: Any) -> dict[str, Any]:
        return {"broker": {"1": {"default.replication.factor": {"value": "3"}}}}

    def close(self) -> None:
        pass


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> _Admin:
    fake = _Admin()
    monkeypatch.setattr(topics, "_admin", lambda *a, **k: fake)
    monkeypatch.setattr(topics, "_wait_for_partitions", lambda *a, **k: None)
    return fake


def test_a_topic_takes_the_brokers_replication_factor_unless_given(admin: _Admin) -> None:
    """Red before: replication_factor defaulted to 1 and was sent as 1, overriding a
    cluster's default of 3 (a control topic on one broker of three)."""
    topics.create_topic(bootstrap_servers="b:9092", name="__chkpt.t", config={"a": "1"})
    topics.create_topic(bootstrap_servers="b:9092", name="u", partitions=4, replication_factor=3)
    (first,), (second,) = admin.requests
    assert (first.name, first.num_partitions, first.replication_factor) == ("__chkpt.t", 1, -1)
    assert [(c.name, c.value) for c in first.configs] == [("a", "1")]
    assert (second.name, second.num_partitions, second.replication_factor) == ("u", 4, 3)


def test_a_broker_before_2_4_is_asked_for_its_default_replication_factor(
    admin: _Admin,
) -> None:
    admin.version = (2, 3)
    topics.create_topic(bootstrap_servers="b:9092", name="t")
    ((request,),) = admin.requests
    assert request.replication_factor == 3


class _RefusingEverySecondTime:
    """kafka-python's consumer whose metadata request reaches a killed broker every
    second time: the node a refresh picked is still in the cluster's metadata."""

    tries = 0

    def topics(self) -> set[str]:
        type(self).tries += 1
        if type(self).tries % 2 == 1:
            from kafka.errors import KafkaConnectionError

            raise KafkaConnectionError("111 ECONNREFUSED")
        return {"out"}

    def partitions_for_topic(self, name: str) -> set[int]:
        return {0, 1} if name == "out" else set()

    def close(self) -> None:
        pass


def test_a_sink_planning_its_batch_while_a_broker_refuses_asks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI's three-node cluster with the data leader killed: a ``chkpt-kafka`` sink plans
    its writer each micro-batch and checks its output topic
    (:func:`topics.require_output_topic`); the metadata request went to the dead node,
    kafka-python raised ``KafkaConnectionError: 111 ECONNREFUSED`` at once and the query
    died though two brokers of three served. Each metadata question of the module is
    asked again while refused, within the request timeout."""
    from spark_chkpt.kafka.client import outage

    monkeypatch.setattr(outage, "RETRY_PAUSE_S", 0.01)
    monkeypatch.setattr(topics, "_PRESENT", set())
    monkeypatch.setattr(_RefusingEverySecondTime, "tries", 0)
    monkeypatch.setattr(topics, "_metadata_consumer", lambda *_: _RefusingEverySecondTime())
    topics.require_output_topic(bootstrap_servers="b:9092", name="out")
    assert ("b:9092", "out") in topics._PRESENT
    assert topics.partition_count(bootstrap_servers="b:9092", name="out") == 2
    assert topics.topic_names(bootstrap_servers="b:9092") == {"out"}
    assert _RefusingEverySecondTime.tries == 6
