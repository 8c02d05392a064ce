"""Barrier N of a snapshot written into every partition of a data topic by the Kafka
sink's coordinator: one barrier producer kept per cluster and producer settings, the
topic's partitions read fresh (a partition added since the producer's metadata still gets
its barrier), each barrier acknowledged and its offset returned for the ``complete``
entry.
"""

from __future__ import annotations

import time
from typing import Any

from spark_chkpt.alignment.barrier import BARRIER_KEY, Barrier
from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import ChkptError
from spark_chkpt.failpoints import FaultPoint, armed, failpoint
from spark_chkpt.kafka.client.outage import delivery_timeout_s, flush_within
from spark_chkpt.kafka.client.pool import ClientCache
from spark_chkpt.kafka.sink.options import KafkaSinkConfig

# One barrier producer per cluster and producer settings (two sinks with other
# credentials or TLS settings never share one).
BARRIER_PRODUCERS: ClientCache[Any] = ClientCache(close=lambda p: p.close(timeout=0))


def barrier_producer(config: KafkaSinkConfig, *, app_id: str) -> Any:
    """The process's barrier producer for ``config``'s cluster and producer settings."""

    def build() -> Any:
        from spark_chkpt.kafka.client.factory import kafka_producer

        return kafka_producer(
            bootstrap_servers=config.bootstrap_servers,
            settings=config.producer_settings,
            client_id=f"spark-chkpt-barriers-{app_id[:8]}",
        )

    return BARRIER_PRODUCERS.get(barrier_producer_key(config), build=build)


def write_barriers(
    producer: Any, *, config: KafkaSinkConfig, topic: str, barrier: Barrier, written: set[int]
) -> dict[int, int]:
    """Step 4: barrier ``barrier`` into every partition of ``topic``, acknowledged;
    returns each partition's barrier offset. The partitions come from metadata read
    now (the producer is cached per process and its metadata may predate partitions
    added to the topic) and from the write tasks' acknowledged counts (``written``):
    a partition a task wrote to always gets its barrier. With ``between-barriers``
    armed, each barrier is flushed on its own and the kill comes after the first one."""
    split = armed(FaultPoint.BETWEEN_BARRIERS, barrier.snapshot_id)
    futures = {}
    wait = delivery_timeout_s(config.producer_settings)
    for partition in sorted(fresh_partitions(producer, topic, written, timeout_s=wait)):
        futures[partition] = producer.send(
            topic,
            key=BARRIER_KEY,
            value=barrier.value(),
            partition=partition,
            headers=Barrier.headers(),
        )
        if split:
            flush_within(producer, settings=config.producer_settings)
            failpoint(FaultPoint.BETWEEN_BARRIERS, barrier.snapshot_id)
    flush_within(producer, settings=config.producer_settings)
    return {p: int(f.get(timeout=wait).offset) for p, f in futures.items()}


def barrier_producer_key(config: KafkaSinkConfig) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What makes two sinks' barrier producers interchangeable: the cluster and every
    producer setting (security, TLS, timeouts)."""
    items = tuple(sorted((k, repr(v)) for k, v in config.producer_settings.items()))
    return config.bootstrap_servers, items


def fresh_partitions(producer: Any, topic: str, written: set[int], *, timeout_s: float) -> set[int]:
    """``topic``'s partitions from a metadata request sent now by the kafka-python
    ``producer`` (its own ``partitions_for`` answers from metadata up to
    ``metadata.max.age.ms`` old), asked again until they include ``written``; raises
    :class:`ChkptError` if they still do not after ``timeout_s``."""
    import threading

    deadline = Deadline.after(seconds=timeout_s)
    while True:
        done = threading.Event()
        future = producer._metadata.request_update()
        future.add_both(lambda *_, event=done: event.set())
        producer._sender.wakeup()
        done.wait(max(0.0, deadline.remaining()))
        known = set(producer.partitions_for(topic))
        if written <= known:
            return known
        if deadline.expired():
            raise ChkptError(
                f"chkpt-kafka: write tasks wrote to partition(s) "
                f"{sorted(written - known)} of topic {topic}, which its metadata does not list "
                f"after {timeout_s:.0f}s; no barrier can confirm their records. Nothing was "
                "committed: Spark retries the batch."
            )
        time.sleep(0.1)
