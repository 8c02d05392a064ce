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


class Ids:
    """A fake broker's topic ids, and the topics each probe asked about."""

    def __init__(self, **ids: str | None) -> None:
        self.ids = dict(ids)
        self.asked: list[list[str]] = []

    def __call__(self, settings: ConsumerSettings, topics: Any) -> dict[str, str | None]:
        self.asked.append(list(topics))
        return {t: self.ids.get(t) for t in topics}


def _pool_of(ids: Ids) -> ConsumerPool:
    return ConsumerPool(factory=lambda settings: FakeConsumer(), topic_ids=ids)  # type: ignore[arg-type,return-value]


def test_a_consumer_that_read_a_recreated_topic_is_closed_not_reused() -> None:
    ids = Ids(a="id-1", b="id-9")
    pool = _pool_of(ids)
    reader = pool.acquire(SETTINGS, topics={"a"})
    pool.release(reader, SETTINGS, healthy=True)
    ids.ids["a"] = "id-2"  # deleted and created again under the same name
    fresh = pool.acquire(SETTINGS, topics={"a", "b"})
    assert fresh is not reader and reader.closed  # type: ignore[attr-defined]
    assert (pool.created, pool.reused, pool.retired) == (2, 0, 1)
    pool.release(fresh, SETTINGS, healthy=True)
    assert pool.acquire(SETTINGS, topics={"a"}) is fresh  # it read the new topic: reusable
    assert ids.asked == [["a"], ["a", "b"], ["a"]]  # one probe per task, for its topics


def test_a_deleted_topic_retires_its_readers_and_other_topics_keep_them() -> None:
    ids = Ids(a="id-1", b="id-5")
    pool = _pool_of(ids)
    reader = pool.acquire(SETTINGS, topics={"a"})
    pool.release(reader, SETTINGS, healthy=True)
    ids.ids["b"] = "id-6"  # a topic the consumer never read changed: no matter
    assert pool.acquire(SETTINGS, topics={"b"}) is reader
    pool.release(reader, SETTINGS, healthy=True)
    del ids.ids["a"]  # deleted, not (yet) created again
    assert pool.acquire(SETTINGS, topics={"a"}) is not reader
    assert reader.closed  # type: ignore[attr-defined]


def test_a_stand_in_consumer_carries_the_ids_of_the_one_it_replaces() -> None:
    ids = Ids(a="id-1")
    pool = _pool_of(ids)
    wedged = pool.acquire(SETTINGS, topics={"a"})
    stand_in = pool.build(SETTINGS, replacing=wedged)
    pool.release(wedged, SETTINGS, healthy=False)
    pool.release(stand_in, SETTINGS, healthy=True)
    ids.ids["a"] = "id-2"
    assert pool.acquire(SETTINGS, topics={"a"}) is not stand_in
    assert stand_in.closed  # type: ignore[attr-defined]


def test_kafka_python_consumers_cost_no_topic_id_call() -> None:
    from spark_chkpt.kafka.client.pool import read_topic_ids

    assert read_topic_ids(SETTINGS, ["a"]) == {}  # no broker at h:1 was asked


def test_the_drivers_client_cache_builds_once_and_rebuilds_what_is_stale_or_retired() -> None:
    from spark_chkpt.kafka.client.pool import ClientCache

    closed: list[str] = []
    built: list[str] = []
    cache: ClientCache[str] = ClientCache(close=closed.append)

    def build(name: str) -> Any:
        return lambda: built.append(name) or name

    assert cache.get("k", build=build("a")) == "a"
    assert cache.get("k", build=build("b")) == "a"  # cached: not built again
    assert cache.get("k", build=build("c"), stale=lambda c: c == "a") == "c"  # recreated
    cache.retire("k")  # a client that failed
    assert cache.get("k", build=build("d")) == "d"
    assert built == ["a", "c", "d"] and closed == ["a", "c"]


def test_two_sinks_with_other_producer_settings_never_share_a_barrier_producer() -> None:
    """The cache was keyed on the bootstrap servers alone: a second sink on the same
    cluster with other credentials or TLS settings got the first one's producer."""
    from spark_chkpt.kafka.sink.committer import barrier_producer_key
    from spark_chkpt.kafka.sink.options import KafkaSinkConfig

    def settings(**producer: Any) -> KafkaSinkConfig:
        return KafkaSinkConfig(
            bootstrap_servers="h:9092",
            topic="t",
            control_topic=None,
            checkpoint_location="/chk",
            query_name=None,
            txn_app_id="a",
            retained_snapshots=10,
            producer_settings=producer,
        )

    plain, sasl = settings(), settings(security_protocol="SASL_SSL", sasl_plain_username="u")
    assert barrier_producer_key(plain) != barrier_producer_key(sasl)
    assert barrier_producer_key(sasl) == barrier_producer_key(
        settings(sasl_plain_username="u", security_protocol="SASL_SSL")
    )
