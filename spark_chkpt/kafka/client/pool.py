"""Executor-side pool of Kafka consumers, reused across read tasks.

Spark reuses Python workers across tasks (``spark.python.worker.reuse``, on by
default), so a consumer a read task leaves here is picked up by the next task of the
same worker: no new connection, API-version probe or metadata round trip per task.
Consumers are keyed by their client and settings (the cluster, security, fetch sizes),
released unassigned, never shared by two tasks at once, and closed after ``idle_timeout_s``.
A consumer whose task failed is closed, not pooled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from spark_chkpt.kafka.client.consumer import ConsumerSettings, RangeConsumer, build_consumer

log = logging.getLogger(__name__)

Key = tuple[str, tuple[tuple[str, str], ...]]


class ConsumerPool:
    """Idle consumers by settings; ``acquire`` hands one out or builds a new one."""

    def __init__(
        self,
        *,
        idle_timeout_s: float = 300.0,
        max_idle_per_key: int = 8,
        factory: Callable[[ConsumerSettings], RangeConsumer] = build_consumer,
    ) -> None:
        self._factory = factory
        self.idle_timeout_s = idle_timeout_s
        self.max_idle_per_key = max_idle_per_key
        self._idle: dict[Key, list[tuple[float, RangeConsumer]]] = {}
        self._lock = threading.Lock()
        self.created = 0
        self.reused = 0

    def acquire(self, settings: ConsumerSettings) -> RangeConsumer:
        key = settings.key()
        self._expire()
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                self.reused += 1
                return idle.pop()[1]
            self.created += 1
        return self._factory(settings)

    def build(self, settings: ConsumerSettings) -> RangeConsumer:
        """A new consumer, never an idle one (to stand in for one that stopped fetching)."""
        with self._lock:
            self.created += 1
        return self._factory(settings)

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
