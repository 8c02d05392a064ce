"""Executor-side pool of Kafka consumers, reused across read tasks.

Spark reuses Python workers across tasks (``spark.python.worker.reuse``, on by
default), so a consumer a read task leaves here is picked up by the next task of the
same worker: no new connection, API-version probe or metadata round trip per task.
Consumers are keyed by their client and settings (the cluster, security, fetch sizes),
released unassigned, never shared by two tasks at once, and closed after ``idle_timeout_s``.
A consumer whose task failed is closed, not pooled.

A pooled consumer is also keyed on the ids of the topics it has read. ``acquire`` asks
the broker for the current ids of the task's topics (one DescribeTopics call per task,
none per poll) and closes, instead of handing out, an idle consumer that read one of
them under another id: a topic deleted and created again under the same name is a new
topic, and a librdkafka handle's topic-id metadata cache is not trusted to follow that
change (confluentinc/librdkafka#4778, #4964, #5093), nor partitions added since (the
partition count is part of the id here). kafka-python follows a changed id
itself (its cluster metadata replaces the id and logs it), and a partition it does not
know is refreshed for before the task names it (:mod:`.metadata`), so its consumers are
not probed and cost no call.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Generic, TypeVar

from spark_chkpt.kafka.client.consumer import ConsumerSettings, RangeConsumer, build_consumer

log = logging.getLogger(__name__)

Key = tuple[str, tuple[tuple[str, str], ...]]
TopicIds = Mapping[str, str | None]  # topic -> its id (None: the topic does not exist)
TopicIdProbe = Callable[[ConsumerSettings, Sequence[str]], TopicIds]

# librdkafka properties an admin client shares with the consumer (no fetch settings: an
# admin handle warns about each consumer-only property it is given).
_ADMIN_PREFIXES = ("bootstrap.", "security.", "sasl.", "ssl.", "socket.", "reconnect.", "client.")
_ADMIN_NAMES = {"retry.backoff.ms", "connections.max.idle.ms", "metadata.max.age.ms"}
_ADMINS: dict[Key, Any] = {}  # one librdkafka admin handle per settings, per worker
_ADMINS_LOCK = threading.Lock()


def read_topic_ids(settings: ConsumerSettings, topics: Sequence[str]) -> TopicIds:
    """The topics' ids from fresh metadata, for the consumers whose pool entries need them.

    confluent: one DescribeTopics call through an admin handle kept per settings; a
    topic's "id" is its topic id and partition count (``<uuid>/<n>``), so partitions added
    since also retire a consumer. A topic the broker does not know maps to None.
    kafka-python: no call, an empty answer.
    """
    if settings.client != "confluent" or not topics:
        return {}
    import confluent_kafka

    from spark_chkpt.kafka.client.factory import confluent_admin

    key = settings.key()
    with _ADMINS_LOCK:
        admin = _ADMINS.get(key)
        if admin is None:
            config: dict[str, Any] = {
                k: v
                for k, v in settings.settings.items()
                if k.startswith(_ADMIN_PREFIXES) or k in _ADMIN_NAMES
            }
            config["logger"] = log
            admin = _ADMINS[key] = confluent_admin(config)
    futures = admin.describe_topics(confluent_kafka.TopicCollection(list(topics)))
    ids: dict[str, str | None] = {}
    for topic, future in futures.items():
        try:
            described = future.result(timeout=30)
            # The partition count too: a librdkafka handle's cached metadata does not know
            # partitions added since (get_watermark_offsets: "Local: Unknown partition").
            ids[topic] = f"{described.topic_id}/{len(described.partitions)}"
        except confluent_kafka.KafkaException as e:
            error: Any = e.args[0] if e.args else None
            if (
                getattr(error, "code", lambda: None)()
                != confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
            ):
                raise
            ids[topic] = None
    return ids


def stale(read: TopicIds, current: TopicIds) -> list[str]:
    """The topics a consumer read under an id other than the current one (or now gone)."""
    return sorted(t for t, now in current.items() if t in read and read[t] != now)


class ConsumerPool:
    """Idle consumers by settings; ``acquire`` hands one out or builds a new one."""

    def __init__(
        self,
        *,
        idle_timeout_s: float = 300.0,
        max_idle_per_key: int = 8,
        factory: Callable[[ConsumerSettings], RangeConsumer] = build_consumer,
        topic_ids: TopicIdProbe = read_topic_ids,
    ) -> None:
        self._factory = factory
        self._topic_ids = topic_ids
        self.idle_timeout_s = idle_timeout_s
        self.max_idle_per_key = max_idle_per_key
        self._idle: dict[Key, list[tuple[float, RangeConsumer]]] = {}
        # The topic ids each consumer (idle or handed out) has read under.
        self._read: weakref.WeakKeyDictionary[Any, dict[str, str | None]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self.created = 0
        self.reused = 0
        self.retired = 0  # idle consumers closed because a topic they read changed id

    def acquire(self, settings: ConsumerSettings, *, topics: Collection[str] = ()) -> RangeConsumer:
        """A consumer for a task reading ``topics``: an idle one that never read any of
        them under another id, or a new one."""
        key = settings.key()
        self._expire()
        current = dict(self._topic_ids(settings, sorted(set(topics)))) if topics else {}
        retired: list[tuple[RangeConsumer, list[str]]] = []
        chosen: RangeConsumer | None = None
        with self._lock:
            idle = self._idle.get(key)
            while idle:
                consumer = idle.pop()[1]
                changed = stale(self._read.get(consumer, {}), current)
                if changed:
                    retired.append((consumer, changed))
                    continue
                chosen = consumer
                self.reused += 1
                break
            if chosen is None:
                self.created += 1
            self.retired += len(retired)
        for consumer, changed in retired:
            log.info("closing a pooled consumer: topic %s was recreated", ", ".join(changed))
            self._read.pop(consumer, None)
            consumer.close()
        if chosen is None:
            chosen = self._factory(settings)
        self._remember(chosen, current)
        return chosen

    def _remember(self, consumer: RangeConsumer, ids: TopicIds) -> None:
        with self._lock:
            self._read.setdefault(consumer, {}).update(ids)

    def build(
        self, settings: ConsumerSettings, *, replacing: RangeConsumer | None = None
    ) -> RangeConsumer:
        """A new consumer, never an idle one (to stand in for one that stopped fetching)."""
        with self._lock:
            self.created += 1
            ids = dict(self._read.get(replacing, {})) if replacing is not None else {}
        consumer = self._factory(settings)
        self._remember(consumer, ids)
        return consumer

    def release(
        self, consumer: RangeConsumer, settings: ConsumerSettings, *, healthy: bool
    ) -> None:
        """Return ``consumer`` for the next task, or close it (failed task, pool full)."""
        key = settings.key()
        if healthy:
            try:
                consumer.assign({})  # drop the task's partitions, positions and pauses
            except Exception:  # a broken client is closed below instead of pooled
                log.debug("consumer could not be reset; closing it", exc_info=True)
                healthy = False
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if healthy and len(idle) < self.max_idle_per_key:
                idle.append((time.monotonic(), consumer))
                return
        consumer.close()

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.idle_timeout_s
        stale = []
        with self._lock:
            for idle in self._idle.values():
                stale += [c for used, c in idle if used < cutoff]
                idle[:] = [(used, c) for used, c in idle if used >= cutoff]
        for consumer in stale:
            consumer.close()

    def close_all(self) -> None:
        with self._lock:
            idle = [c for entries in self._idle.values() for _, c in entries]
            self._idle.clear()
        for consumer in idle:
            consumer.close()


POOL = ConsumerPool()  # one per Python worker process


V = TypeVar("V")


class ClientCache(Generic[V]):
    """The driver's long-lived Kafka clients by key, one per process: the Kafka sink's
    barrier producer and its control-topic readers. Spark builds a new writer per batch;
    a client built per batch would reconnect and, for a control topic, read it again from
    its start (O(history) per commit). ``get`` builds once; ``retire`` closes and forgets
    (a client that failed, or whose topic was recreated), so the next ``get`` builds anew.
    """

    def __init__(self, *, close: Callable[[V], None]) -> None:
        self._close = close
        self._clients: dict[Any, V] = {}
        self._lock = threading.Lock()

    def get(
        self, key: Any, *, build: Callable[[], V], stale: Callable[[V], bool] | None = None
    ) -> V:
        """The client under ``key``, built by ``build`` if there is none, or if
        ``stale(client)`` says the cached one must not be used again (it is closed)."""
        with self._lock:
            client = self._clients.get(key)
        if client is not None and stale is not None and stale(client):
            self.retire(key)
            client = None
        if client is None:
            client = build()
            with self._lock:
                self._clients[key] = client
        return client

    def retire(self, key: Any) -> None:
        with self._lock:
            client = self._clients.pop(key, None)
        if client is not None:
            try:
                self._close(client)
            except Exception:  # a client that cannot close is dropped all the same
                log.debug("closing a cached client failed", exc_info=True)

    def __len__(self) -> int:
        return len(self._clients)
