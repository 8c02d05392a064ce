"""The per-process pool of transaction clients (spark_chkpt/kafka/client/transactions.py)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from spark_chkpt.kafka.client import transactions


class FakeClient:
    made: ClassVar[list[FakeClient]] = []

    def __init__(self, *, bootstrap_servers: str, settings: Any) -> None:
        self.servers, self.settings, self.closed = bootstrap_servers, dict(settings), False
        FakeClient.made.append(self)

    def close(self) -> None:
        self.closed = True


def test_a_client_is_reused_by_the_next_caller_and_a_failed_one_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactions, "TransactionClient", FakeClient)
    monkeypatch.setattr(transactions, "_IDLE", {})
    FakeClient.made = []
    with (
        transactions.pooled_client(bootstrap_servers="b:1", settings={"a": 1}) as first,
        transactions.pooled_client(bootstrap_servers="b:1", settings={"a": 1}) as second,
    ):
        assert second is not first  # one caller at a time per client
    with transactions.pooled_client(bootstrap_servers="b:1", settings={"a": 1}) as again:
        assert again in (first, second)
    with transactions.pooled_client(bootstrap_servers="b:1", settings={"a": 2}) as other:
        assert other not in (first, second)  # other settings: another client
    assert len(FakeClient.made) == 3
    with (
        pytest.raises(RuntimeError, match="boom"),
        transactions.pooled_client(bootstrap_servers="b:1", settings={"a": 1}) as failed,
    ):
        raise RuntimeError("boom")
    assert failed.closed  # type: ignore[attr-defined]
    assert not any(c.closed for c in FakeClient.made if c is not failed)
    with transactions.pooled_client(bootstrap_servers="b:1", settings={"a": 1}) as last:
        assert last is not failed and not last.closed  # type: ignore[attr-defined]


def test_a_stale_pooled_client_is_replaced_by_a_new_one_that_asks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle client whose broker restarted fails outside describe's retries (kafka-python's
    transport); the answer comes from a new client, which the pool then keeps."""

    class Describing(FakeClient):
        stale: ClassVar[set[int]] = set()

        def describe(self, *, transactional_id: str) -> tuple[str, int, int]:
            if id(self) in Describing.stale:
                raise AttributeError("'NoneType' object has no attribute 'recv'")
            return ("Ongoing", 7, len(FakeClient.made))

    monkeypatch.setattr(transactions, "TransactionClient", Describing)
    monkeypatch.setattr(transactions, "_IDLE", {})
    FakeClient.made = []
    ask: dict[str, Any] = {"bootstrap_servers": "b:1", "settings": {}, "transactional_id": "t-0"}
    assert transactions.describe_pooled(**ask) == ("Ongoing", 7, 1)
    (first,) = FakeClient.made
    Describing.stale.add(id(first))  # the broker restarted
    assert transactions.describe_pooled(**ask) == ("Ongoing", 7, 2)
    assert first.closed and len(FakeClient.made) == 2
    assert transactions.describe_pooled(**ask) == ("Ongoing", 7, 2)  # the new one, pooled
    assert len(FakeClient.made) == 2


def test_a_dead_coordinator_is_looked_up_again_before_the_end_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broker holding a transactional id's coordinator dies mid-commit: its
    connection is refused, then in reconnect backoff, then a request to it times out.
    Each time the coordinator is forgotten, so the next try asks FindCoordinator again
    (the transaction log's new leader); an EndTxn whose answer was lost after the broker
    committed is then answered done by the new coordinator. Red before: the cached dead
    coordinator was asked again and again, and NodeNotReadyError failed the commit."""
    import kafka.errors as errors

    client = transactions.TransactionClient.__new__(transactions.TransactionClient)
    forgotten: list[str] = []
    answers: list[Any] = [
        errors.KafkaConnectionError("111 ECONNREFUSED"),
        errors.NodeNotReadyError(1),
        errors.RequestTimedOutError(),
        type("Answer", (), {"error_code": 0})(),
    ]

    def send(transactional_id: str, request: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(client, "_send", send)
    monkeypatch.setattr(client, "_forget_coordinator", forgotten.append)
    result = client.end(transactional_id="t-0", producer_id=7, epoch=0, commit=True, timeout_s=5)
    assert result is transactions.EndResult.DONE
    assert forgotten == ["t-0"] * 3 and not answers
