"""kafka-python clients whose cached metadata predates a topic's growth.

A kafka-python client keeps the cluster's metadata and refreshes it every
``metadata.max.age.ms`` (5 min) or when a request fails in a way it recognises. Partitions
added to a topic in between are unknown to it, and kafka-python 3.0 (3.0.12) does not
treat that as a reason to refresh everywhere: ListOffsets is sent only for partitions whose
leader is known (the others are missing from the answer, ``KeyError``), a fetch skips them,
and the producer refuses an explicit one (``ValueError: Unrecognized partition``). The
project's long-lived kafka-python clients go through here before they name partitions:
the source's pooled read consumers and the driver's offset probe. (The barrier producer
refreshes on its own before each snapshot: ``kafka.sink.barriers.fresh_partitions``; the
control topic has one partition; librdkafka consumers are retired by the pool.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from spark_chkpt.deadline import Deadline, retry
from spark_chkpt.errors import KafkaReadError
from spark_chkpt.kafka.client.outage import (
    lookup_tries,
    request_deadline,
    retry_within,
    unanswered,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def know_leaders(
    consumer: Any, ktps: Sequence[Any], *, refresh: bool = False, deadline: Deadline | None = None
) -> None:
    """Refresh a kafka-python consumer's metadata until it knows every partition's leader.

    kafka-python 3.0 (3.0.12) sends ListOffsets only for the partitions whose leader its
    cached metadata knows: the others are left out of the answer and not retried, so
    ``beginning_offsets`` / ``end_offsets`` fail with ``KeyError: TopicPartition(...)``,
    and a fetch skips them. A consumer that read a topic before partitions were added
    knows the old ones only, until ``metadata.max.age.ms`` (5 min): a pooled read task
    given old and new partitions together died, and so could the driver's
    probe right after a growth, while a new partition's leader is still unknown (-1).

    Known leaders cost nothing; otherwise one metadata request per try (``refresh``:
    at least one), until ``deadline`` (default: the consumer's ``request_timeout_ms``),
    then :class:`KafkaReadError` naming the partitions. A refused connection (a broker
    restarting) is retried within the same deadline."""
    cluster = getattr(consumer, "_cluster", None)
    leader_for = getattr(cluster, "leader_for_partition", None)
    if leader_for is None:  # another kafka-python: its own retries are all there is
        return

    def unknown() -> list[Any]:
        return [ktp for ktp in ktps if leader_for(ktp) in (None, -1)]

    if not refresh and not unknown():
        return
    if deadline is None:
        deadline = request_deadline(consumer.config)
    started = time.monotonic()

    def refreshed(_: int) -> None:
        # A restarting broker refuses connections, which kafka-python raises at once
        # where the Java client retries: asked again until the deadline.
        retry_within(consumer.topics, deadline=deadline, doing="refreshing metadata")
        missing = unknown()
        if missing:
            named = ", ".join(f"{ktp.topic}-{ktp.partition}" for ktp in missing)
            timeout_ms = consumer.config.get("request_timeout_ms", 30_000)
            raise KafkaReadError(
                f"chkpt-kafka: no leader known for {named} after "
                f"{time.monotonic() - started:.0f}s of metadata refreshes "
                f"(kafka.request.timeout.ms={timeout_ms}): the partition was deleted, or its "
                "broker is down"
            )

    retry(
        refreshed,
        deadline=deadline,
        retriable=lambda error: isinstance(error, KafkaReadError),
        pause_s=lambda _: 0.1,
    )


def partitions_of(consumer: Any, topic: str) -> list[Any]:
    """``topic``'s partitions as kafka-python ``TopicPartition`` s, in order, from a
    metadata refresh asked again while a broker refuses (a killed node still in the
    cluster's metadata: kafka-python raises its ECONNREFUSED at once), within the
    request timeout. For the clients of one command (a savepoint's rewind or fork,
    ``status``), which then list offsets with :func:`list_offsets`."""
    from kafka import TopicPartition

    config = getattr(consumer, "config", None) or {}
    retry_within(
        consumer.topics, deadline=request_deadline(config), doing=f"reading {topic}'s metadata"
    )
    return [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]


def list_offsets(consumer: Any, ktps: Sequence[Any], request: Callable[[int], _T]) -> _T:
    """``request(timeout_ms)`` (a ListOffsets call of kafka-python ``consumer`` for
    ``ktps``, such as ``lambda ms: consumer.beginning_offsets(ktps, timeout_ms=ms)``)
    once the consumer's metadata knows their leaders (:func:`know_leaders`).

    kafka-python 3.0 (3.0.12) sends a lookup again and again to the leader its metadata
    names, and gives up after one ``request_timeout_ms``: a read task's
    ``beginning_offsets`` failed with ``Failed to get offsets by timestamps in 30000 ms``
    while a killed broker's partitions had new leaders after 9 s. Here each try gets a
    share of the request timeout (:func:`~spark_chkpt.kafka.client.outage.lookup_tries`);
    one that goes unanswered or is refused
    (:func:`~spark_chkpt.kafka.client.outage.unanswered`), or whose answer leaves a
    partition out (``KeyError``), is asked again after a forced metadata refresh, which
    finds a leader that moved or a broker that is back."""
    from kafka.errors import KafkaTimeoutError

    config = getattr(consumer, "config", None) or {}
    deadline, try_s = lookup_tries(config)
    named = ", ".join(f"{ktp.topic}-{ktp.partition}" for ktp in ktps[:5])
    know_leaders(consumer, ktps, deadline=deadline)

    def one_try() -> _T:
        return request(int(1000 * max(0.1, min(try_s, deadline.remaining()))))

    def again(error: BaseException) -> bool:
        return isinstance(error, KeyError) or unanswered(error)

    def refresh(_: BaseException) -> None:
        try:
            know_leaders(consumer, ktps, refresh=True, deadline=deadline)
        except Exception as e:  # a refresh the broker did not answer: the next try tells
            if not unanswered(e):
                raise
            log.warning("metadata refresh before listing the offsets of %s failed: %s", named, e)

    try:
        return retry_within(
            one_try,
            deadline=deadline,
            doing=f"listing the offsets of {named}",
            retriable=again,
            before_retry=refresh,  # a metadata request: no pause needed before it
            pause_s=0.1,
        )
    except KafkaTimeoutError as e:
        raise KafkaTimeoutError(
            f"the offsets of {named} were not listed, asked again after each metadata "
            f"refresh until twice the request timeout had passed ({e})"
        ) from e
    except KeyError as e:
        raise KafkaReadError(
            f"chkpt-kafka: the broker left {e} out of its offsets, asked again until twice "
            "kafka.request.timeout.ms had passed: its leader is unknown or down"
        ) from e


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
