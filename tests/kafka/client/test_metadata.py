"""kafka-python metadata refreshed until it knows each partition's leader, and offset
lookups asked again after a refresh when their leader did not answer.

The broker-backed proofs are ``tests/kafka/source/test_added_partition.py`` and
``test_topic_growth.py``; these pin the refresh loop's edges with a stand-in for
kafka-python's cluster metadata."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import TopicPartition

from spark_chkpt.errors import KafkaReadError
from spark_chkpt.kafka.client.metadata import know_leaders, list_offsets


class _Cluster:
    def __init__(self, leaders: dict[Any, int]) -> None:
        self.leaders = leaders

    def leader_for_partition(self, tp: Any) -> int | None:
        return self.leaders.get(tp)


class _Consumer:
    """What kafka-python's KafkaConsumer shows: cached metadata, and ``topics()`` that
    refreshes it (here: learns one more partition per call from ``arriving``)."""

    def __init__(self, known: dict[Any, int], arriving: list[tuple[Any, int]]) -> None:
        self._cluster = _Cluster(dict(known))
        self.arriving = list(arriving)
        self.config = {"request_timeout_ms": 300}
        self.refreshes = 0

    def topics(self) -> set[str]:
        self.refreshes += 1
        if self.arriving:
            tp, leader = self.arriving.pop(0)
            self._cluster.leaders[tp] = leader
        return {"t"}


P0, P1, P2 = (TopicPartition("t", p) for p in range(3))


def test_known_leaders_cost_no_metadata_request() -> None:
    consumer = _Consumer({P0: 1, P1: 1}, [])
    know_leaders(consumer, [P0, P1])
    assert consumer.refreshes == 0


def test_a_partition_unknown_or_without_a_leader_is_waited_for() -> None:
    # P2 unknown (added since), then known without a leader (-1, election), then led.
    consumer = _Consumer({P0: 1, P1: 1}, [(P2, -1), (P2, 1)])
    know_leaders(consumer, [P0, P1, P2])
    assert consumer.refreshes == 2


def test_a_partition_that_never_appears_is_named_after_the_request_timeout() -> None:
    consumer = _Consumer({P0: 1}, [])
    with pytest.raises(KafkaReadError, match=r"no leader known for t-2 .*request\.timeout"):
        know_leaders(consumer, [P0, P2])


def test_an_answer_missing_a_partition_is_asked_again_after_a_refresh() -> None:
    """A leader lost between the check and the request: kafka-python's answer leaves the
    partition out (KeyError); one refresh, then the request again."""
    consumer = _Consumer({P0: 1, P1: 1}, [])
    answers: list[Any] = [KeyError(P1), {P0: 0, P1: 5}]

    def request(timeout_ms: int) -> dict[Any, int]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert list_offsets(consumer, [P0, P1], request) == {P0: 0, P1: 5}
    assert consumer.refreshes == 1


def test_an_unanswered_lookup_is_asked_again_after_a_refresh_within_the_request_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kafka-python kept asking a dead leader until its whole timeout: each try gets a
    quarter of the request timeout, and a try that timed out refreshes the metadata
    before the next one (the leader moved, or the broker is back). Red before: one try,
    given no timeout of its own."""
    from kafka.errors import KafkaTimeoutError

    from spark_chkpt.kafka.client import outage

    monkeypatch.setattr(outage, "RETRY_PAUSE_S", 0.01)
    consumer = _Consumer({P0: 1}, [])
    consumer.config["request_timeout_ms"] = 8000
    given: list[int] = []

    def request(timeout_ms: int) -> dict[Any, int]:
        given.append(timeout_ms)
        if len(given) < 3:
            raise KafkaTimeoutError(f"Failed to get offsets by timestamps in {timeout_ms} ms")
        return {P0: 7}

    assert list_offsets(consumer, [P0], request) == {P0: 7}
    assert given[0] == 2000 and all(ms <= 2000 for ms in given), given
    assert consumer.refreshes == 2


def test_a_lookup_unanswered_for_twice_the_request_timeout_says_so() -> None:
    from kafka.errors import KafkaTimeoutError

    consumer = _Consumer({P0: 1}, [])

    def request(timeout_ms: int) -> dict[Any, int]:
        raise KafkaTimeoutError(f"Failed to get offsets by timestamps in {timeout_ms} ms")

    with pytest.raises(KafkaTimeoutError, match=r"offsets of t-0 were not listed.*twice"):
        list_offsets(consumer, [P0], request)


def test_an_error_no_retry_cures_leaves_at_once() -> None:
    from kafka.errors import TopicAuthorizationFailedError

    consumer = _Consumer({P0: 1}, [])
    calls: list[int] = []

    def request(timeout_ms: int) -> dict[Any, int]:
        calls.append(timeout_ms)
        raise TopicAuthorizationFailedError("t")

    with pytest.raises(TopicAuthorizationFailedError):
        list_offsets(consumer, [P0], request)
    assert len(calls) == 1 and consumer.refreshes == 0
