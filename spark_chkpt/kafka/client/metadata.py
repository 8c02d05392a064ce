"""kafka-python clients whose cached metadata predates a topic's growth.

A kafka-python client keeps the cluster's metadata and refreshes it every
``metadata.max.age.ms`` (5 min) or when a request fails in a way it recognises. Partitions
added to a topic in between are unknown to it, and kafka-python 3.0 (3.0.12) does not
treat that as a reason to refresh everywhere: ListOffsets is sent only for partitions whose
leader is known (the others are missing from the answer, ``KeyError``), a fetch skips them,
and the producer refuses an explicit one (``ValueError: Unrecognized partition``). The
project's long-lived kafka-python clients go through here before they name partitions:
the source's pooled read consumers and the driver's offset probe. (The barrier producer
refreshes on its own before each snapshot: ``kafka.sink.committer.fresh_partitions``; the
control topic has one partition; librdkafka consumers are retired by the pool.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import KafkaReadError
from spark_chkpt.kafka.client.outage import refused

log = logging.getLogger(__name__)
_REFUSED_RETRY_S = 0.5

_T = TypeVar("_T")


def know_leaders(consumer: Any, ktps: Sequence[Any], *, refresh: bool = False) -> None:
    """Refresh a kafka-python consumer's metadata until it knows every partition's leader.

    kafka-python 3.0 (3.0.12) sends ListOffsets only for the partitions whose leader its
    cached metadata knows: the others are left out of the answer and not retried, so
    ``beginning_offsets`` / ``end_offsets`` fail with ``KeyError: TopicPartition(...)``,
    and a fetch skips them. A consumer that read a topic before partitions were added
    knows the old ones only, until ``metadata.max.age.ms`` (5 min): a pooled read task
    given old and new partitions together died, and so could the driver's
    probe right after a growth, while a new partition's leader is still unknown (-1).

    Known leaders cost nothing; otherwise one metadata request per try (``refresh``:
    at least one), until the consumer's ``request_timeout_ms``, then
    :class:`KafkaReadError` naming the partitions. A refused connection (a broker
    restarting) is retried within the same timeout."""
    cluster = getattr(consumer, "_cluster", None)
    leader_for = getattr(cluster, "leader_for_partition", None)
    if leader_for is None:  # another kafka-python: its own retries are all there is
        return

    def unknown() -> list[Any]:
        return [ktp for ktp in ktps if leader_for(ktp) in (None, -1)]

    if not refresh and not unknown():
        return
    timeout_ms = float(consumer.config.get("request_timeout_ms", 30_000))
    deadline = Deadline.after(seconds=timeout_ms / 1000)
    while True:
        try:
            consumer.topics()  # one metadata request for every topic, sent now
        except Exception as e:
            # A restarting broker refuses connections, which kafka-python raises at once
            # where the Java client retries: asked again until the request timeout.
            if not refused(e) or deadline.expired():
                raise
            log.warning("Kafka broker refused the metadata request (%s): retrying", e)
            time.sleep(_REFUSED_RETRY_S)
            continue
        missing = unknown()
        if not missing:
            return
        if deadline.expired():
            named = ", ".join(f"{ktp.topic}-{ktp.partition}" for ktp in missing)
            raise KafkaReadError(
                f"chkpt-kafka: no leader known for {named} after {timeout_ms / 1000:.0f}s of "
                "metadata refreshes (kafka.request.timeout.ms): the partition was deleted, "
                "or its broker is down"
            )
        time.sleep(0.1)


def list_offsets(consumer: Any, ktps: Sequence[Any], request: Callable[[], _T]) -> _T:
    """``request()`` (a ListOffsets call of kafka-python ``consumer`` for ``ktps``) once
    the consumer's metadata knows their leaders (:func:`know_leaders`); asked again, after
    a refresh, if a leader moved in between and the answer left a partition out."""
    know_leaders(consumer, ktps)
    try:
        return request()
    except KeyError:
        know_leaders(consumer, ktps, refresh=True)
        return request()


# A driver-side kafka-python client's spacing of metadata refreshes (see below).
PROBE_RETRY_BACKOFF_MS = 10


def space_refreshes(consumer: Any, *, retry_backoff_ms: int | None = None) -> None:
    """Let a kafka-python consumer that asks for fresh metadata every call get it now.

    kafka-python spaces metadata refreshes by its cluster metadata's ``retry_backoff_ms``,
    which keeps 100 ms whatever the consumer is given (3.0.12 does not pass it on). A
    driver-side client that refreshes on every planning call (the offset probe, a
    control topic's reader) waited about 100 ms each time. ``retry_backoff_ms``: the
    user's ``kafka.retry.backoff.ms``, else :data:`PROBE_RETRY_BACKOFF_MS`."""
    cluster = getattr(consumer, "_cluster", None)
    if isinstance(getattr(cluster, "config", None), dict):
        cluster.config["retry_backoff_ms"] = (  # type: ignore[union-attr]
            PROBE_RETRY_BACKOFF_MS if retry_backoff_ms is None else retry_backoff_ms
        )
