"""The executor consumer pool's rules (fake clients: no Kafka here)."""

from __future__ import annotations

from typing import Any

from spark_chkpt.kafka.client.consumer import ConsumerSettings
from spark_chkpt.kafka.client.pool import ConsumerPool


class FakeConsumer:
    def __init__(self) -> None:
        self.closed = False
        self.assigned: dict[object, int] = {"tp": 0}
        self.fail_reset = False

    def assign(self, starts: dict[object, int]) -> None:
        if self.fail_reset:
            raise RuntimeError("broken")
        self.assigned = starts

    def close(self) -> None:
        self.closed = True


RAW = {"bootstrap_servers": ["h:1"], "client_id": "task-1", "fetch_max_bytes": 1}
SETTINGS = ConsumerSettings(client="kafka-python", settings=RAW)


def _settings(**changes: Any) -> ConsumerSettings:
    return ConsumerSettings(client="kafka-python", settings={**RAW, **changes})


def test_released_consumer_is_reset_and_reused_whatever_the_client_id() -> None:
    pool = ConsumerPool()
    consumer = FakeConsumer()
    pool.release(consumer, SETTINGS, healthy=True)
    assert consumer.assigned == {} and not consumer.closed
    assert pool.acquire(_settings(client_id="task-2")) is consumer
    assert pool.reused == 1


def test_other_settings_or_client_never_get_the_consumer() -> None:
    built: list[ConsumerSettings] = []

    def factory(settings: ConsumerSettings) -> Any:
        built.append(settings)
        return FakeConsumer()

    pool = ConsumerPool(factory=factory)
    pooled = FakeConsumer()
    pool.release(pooled, SETTINGS, healthy=True)
    other = pool.acquire(_settings(fetch_max_bytes=2))
    assert other is not pooled and built == [_settings(fetch_max_bytes=2)] and pool.created == 1
    confluent = ConsumerSettings(client="confluent", settings=RAW)
    assert pool.acquire(confluent) is not pooled and len(built) == 2
    assert SETTINGS.key() != _settings(fetch_max_bytes=2).key() != confluent.key()


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
