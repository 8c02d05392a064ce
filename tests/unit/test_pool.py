"""The executor consumer pool's rules (fake clients: no Kafka here)."""

from __future__ import annotations

import pytest

from spark_chkpt.pool import ConsumerPool, pool_key


class FakeConsumer:
    def __init__(self) -> None:
        self.closed = False
        self.assigned: list[object] = ["tp"]
        self.fail_reset = False

    def assign(self, partitions: list[object]) -> None:
        if self.fail_reset:
            raise RuntimeError("broken")
        self.assigned = partitions

    def close(self) -> None:
        self.closed = True


SETTINGS = {"bootstrap_servers": ["h:1"], "client_id": "task-1", "fetch_max_bytes": 1}


def test_released_consumer_is_reset_and_reused_whatever_the_client_id() -> None:
    pool = ConsumerPool()
    consumer = FakeConsumer()
    pool.release(consumer, SETTINGS, healthy=True)
    assert consumer.assigned == [] and not consumer.closed
    assert pool.acquire({**SETTINGS, "client_id": "task-2"}) is consumer
    assert pool.reused == 1


def test_other_settings_never_get_the_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = ConsumerPool()
    pooled = FakeConsumer()
    pool.release(pooled, SETTINGS, healthy=True)
    built: list[dict[str, object]] = []
    monkeypatch.setattr("kafka.KafkaConsumer", lambda **kw: built.append(kw) or FakeConsumer())
    other = pool.acquire({**SETTINGS, "fetch_max_bytes": 2})
    assert other is not pooled and len(built) == 1 and pool.created == 1
    assert pool_key(SETTINGS) != pool_key({**SETTINGS, "fetch_max_bytes": 2})


def test_failed_or_unresettable_consumers_are_closed() -> None:
    pool = ConsumerPool()
    failed, broken = FakeConsumer(), FakeConsumer()
    broken.fail_reset = True
    pool.release(failed, SETTINGS, healthy=False)
    pool.release(broken, SETTINGS, healthy=True)
    assert failed.closed and broken.closed


def test_idle_consumers_expire_and_the_pool_is_bounded() -> None:
    pool = ConsumerPool(idle_timeout_s=0.0, max_idle_per_key=1)
    first, second = FakeConsumer(), FakeConsumer()
    pool.release(first, SETTINGS, healthy=True)
    pool.release(second, SETTINGS, healthy=True)
    assert second.closed  # over max_idle_per_key
    pool._expire()
    assert first.closed  # idle longer than idle_timeout_s
