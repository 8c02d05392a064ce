"""Executor-side Kafka consumers behind one small interface: kafka-python or confluent-kafka.

:class:`~spark_chkpt.kafka.source.fetcher.RangeFetcher` reads offset ranges through
:class:`RangeConsumer` and never touches a client library itself. Two clients
implement it, chosen by the source option ``kafka.client``:

- ``kafka-python`` (the source's default): pure Python, with ``crc32c`` for checksums,
  and record batches decoded straight into Arrow columns (:mod:`.columnar`);
- ``confluent``: librdkafka through ``confluent-kafka`` (a dependency of the project).
  Its records are turned into :class:`Record` tuples, the same fields as
  kafka-python's ``ConsumerRecord``.

Both consumers are group-less readers: partitions are assigned with their start
offsets, nothing is committed, and a position outside the log is reported as
:class:`OffsetOutOfRangeError` instead of being reset. The driver's offset planning always
uses kafka-python (:mod:`spark_chkpt.kafka.source.offset_reader`); only the data path differs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from spark_chkpt.errors import KafkaReadError, OffsetOutOfRangeError
from spark_chkpt.kafka.client.columnar import Record, as_columns, as_records
from spark_chkpt.kafka.client.factory import confluent_consumer
from spark_chkpt.kafka.client.fetcher_hook import drain_before_sleeping, set_columnar
from spark_chkpt.kafka.client.metadata import know_leaders, list_offsets
from spark_chkpt.kafka.client.outage import lookup_tries, retry_within
from spark_chkpt.offsets import TopicPartition

log = logging.getLogger(__name__)

ClientKind = Literal["kafka-python", "confluent"]
CLIENTS: tuple[ClientKind, ...] = ("kafka-python", "confluent")


@dataclass(frozen=True)
class ConsumerSettings:
    """Which client to build and its settings (kafka-python kwargs or librdkafka config)."""

    client: ClientKind
    settings: Mapping[str, Any] = field(default_factory=dict)

    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What makes two consumers interchangeable: everything but the client id."""
        ignored = ("client_id", "client.id")
        items = tuple(sorted((k, repr(v)) for k, v in self.settings.items() if k not in ignored))
        return self.client, items


class RangeConsumer(Protocol):
    """What the fetcher needs from a Kafka client: assign, seek, poll, positions."""

    def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]: ...

    def assign(self, starts: Mapping[TopicPartition, int]) -> None:
        """Read exactly these partitions, each from its start offset (empty: none)."""

    def seek(self, tp: TopicPartition, offset: int) -> None: ...

    def pause(self, tp: TopicPartition) -> None: ...

    def poll(self, *, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        """Records by partition, in offset order; raises :class:`OffsetOutOfRangeError`."""

    def position(self, tp: TopicPartition) -> int:
        """The next offset to read (past transaction markers and compacted gaps)."""

    def highwater(self, tp: TopicPartition) -> int | None:
        """The partition's end as of the last fetch, if one was made."""

    def last_error(self) -> str | None:
        """The client's latest connection-level error (authentication, brokers down)."""

    def close(self) -> None: ...


class KafkaPythonConsumer:
    """:class:`RangeConsumer` on kafka-python's ``KafkaConsumer``."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        from kafka import TopicPartition as KafkaTopicPartition

        from spark_chkpt.kafka.client.factory import kafka_consumer

        self._ktp = KafkaTopicPartition
        self._consumer = kafka_consumer(
            bootstrap_servers=settings["bootstrap_servers"], settings=settings
        )
        self._tps: dict[Any, TopicPartition] = {}
        self._columnar = False
        fetcher = getattr(self._consumer, "_fetcher", None)
        if fetcher is not None:
            drain_before_sleeping(fetcher)

    def set_columnar(self, *, on: bool) -> bool:
        """Poll :class:`~spark_chkpt.kafka.client.columnar.RecordColumns` instead of
        ``ConsumerRecord``s (True if this consumer can; see that module)."""
        fetcher = getattr(self._consumer, "_fetcher", None)
        self._columnar = fetcher is not None and set_columnar(fetcher, on=on)
        return self._columnar

    def _k(self, tp: TopicPartition) -> Any:
        return self._ktp(tp.topic, tp.partition)

    def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        ktps = [self._k(tp) for tp in tps]
        begins = list_offsets(
            self._consumer, ktps, lambda ms: self._consumer.beginning_offsets(ktps, timeout_ms=ms)
        )
        return {TopicPartition(k.topic, k.partition): int(v) for k, v in begins.items()}

    def assign(self, starts: Mapping[TopicPartition, int]) -> None:
        know_leaders(self._consumer, [self._k(tp) for tp in starts])
        self._drop_parked()
        self._tps = {self._k(tp): tp for tp in starts}
        self._consumer.assign(list(self._tps))
        for tp, offset in starts.items():
            self._consumer.seek(self._k(tp), offset)

    def _drop_parked(self) -> None:
        """Forget the fetched records kafka-python parked for paused partitions.

        kafka-python 3.0 parks a paused partition's fetched records, leaves the partition
        out of every fetch while they are parked, and restores them only on a poll that
        has no other partition's records in hand, which may never come: a pooled consumer
        given that partition again (or a grouped task) then stalls for good. Every
        partition is sought on assign, so what was parked is stale: drop it."""
        fetcher = getattr(self._consumer, "_fetcher", None)
        for name in ("_paused_partition_records", "_paused_completed_fetches"):
            parked = getattr(fetcher, name, None)
            if isinstance(parked, dict):
                for records in parked.values():
                    drain = getattr(records, "drain", None)
                    if drain is not None:
                        drain()
                parked.clear()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._consumer.seek(self._k(tp), offset)

    def pause(self, tp: TopicPartition) -> None:
        self._consumer.pause(self._k(tp))

    def limit_partition_fetch(self, max_bytes: int) -> None:
        """Ask for at most ``max_bytes`` of a partition per fetch from now on (kafka-python's
        ``max_partition_fetch_bytes``, read by its fetcher each time it builds a request).
        The broker still returns a whole first record batch if it is larger."""
        fetcher = getattr(self._consumer, "_fetcher", None)
        config = getattr(fetcher, "config", None)
        if isinstance(config, dict):
            config["max_partition_fetch_bytes"] = max_bytes

    def poll(self, *, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        from kafka.errors import OffsetOutOfRangeError as KafkaOffsetOutOfRange

        try:
            polled = self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        except KafkaOffsetOutOfRange as e:
            raise OffsetOutOfRangeError(str(e)) from e
        if self._columnar:  # what was fetched before the switch may still be records
            return {
                self._tps[k]: as_columns(items) for k, items in polled.items() if k in self._tps
            }
        if any(not hasattr(items[0], "offset") for items in polled.values() if items):
            polled = {k: as_records(items) for k, items in polled.items()}
        return {self._tps[k]: records for k, records in polled.items() if k in self._tps}

    def position(self, tp: TopicPartition) -> int:
        return int(self._consumer.position(self._k(tp)))

    def highwater(self, tp: TopicPartition) -> int | None:
        hw = self._consumer.highwater(self._k(tp))
        return None if hw is None else int(hw)

    def last_error(self) -> str | None:
        return None  # kafka-python raises its errors from poll()

    def close(self) -> None:
        self._consumer.close()


class ConfluentConsumer:
    """:class:`RangeConsumer` on confluent-kafka's ``Consumer`` (librdkafka).

    librdkafka needs a ``group.id`` even for assign-only reading; a unique one is set
    and never used: no group is joined and nothing is committed. Its prefetch is kept
    small through ``queued.min.messages`` (per partition) and ``queued.max.messages.kbytes``.

    librdkafka behaviours a pooled consumer must undo (each found against the broker and
    pinned by ``tests/kafka/client/test_consumer_broker.py``):

    - a partition's pause survives unassign/assign: :meth:`assign` resumes first;
    - the cached high watermark survives reassignment: :meth:`highwater` answers only
      after a fetch (a message or end-of-partition event) since the partition was
      assigned or sought;
    - ``fetch.queue.backoff.ms`` (1 s by default) delays the first fetch of a reused
      consumer: set to 20 ms.

    A poll that hands out records *and* an out-of-range error returns the records and
    raises the error on the next poll (as kafka-python does): librdkafka has already
    moved the positions past the records it handed out.
    """

    def __init__(self, settings: Mapping[str, Any]) -> None:
        try:
            import confluent_kafka
        except ImportError as e:
            raise KafkaReadError(
                "kafka.client=confluent needs the confluent-kafka package on the workers, "
                "a dependency of spark-chkpt: pip install 'confluent-kafka>=2.4,<3'"
            ) from e
        self._ck = confluent_kafka
        config = {
            "group.id": f"spark-chkpt-reader-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,  # marks a fetch at the end: highwater() is fresh
            # The default 1 s survives unassign: a reused consumer would stall each task.
            "fetch.queue.backoff.ms": 20,
            "error_cb": self._on_error,
            "logger": log,
            **settings,
        }
        self._settings = dict(settings)
        self._consumer = confluent_consumer(config)
        self._assigned: list[TopicPartition] = []
        # Partitions with a fetch response since they were assigned or sought: librdkafka's
        # cached high watermark survives unassign/assign and is stale until then.
        self._fresh: set[tuple[str, int]] = set()
        self._last_error: str | None = None
        self._deferred: OffsetOutOfRangeError | None = None

    def _on_error(self, error: Any) -> None:
        self._last_error = str(error)
        log.warning("confluent-kafka: %s", error)

    def last_error(self) -> str | None:
        return self._last_error

    def _c(self, tp: TopicPartition, offset: int = -1001) -> Any:
        return self._ck.TopicPartition(tp.topic, tp.partition, offset)

    def _watermarks(self, tp: TopicPartition, *, cached: bool) -> tuple[int, int]:
        try:
            if cached:
                low, high = self._consumer.get_watermark_offsets(self._c(tp), cached=True)
            else:
                low, high = self._listed_watermarks(tp)
        except self._ck.KafkaException as e:
            raise KafkaReadError(f"{tp}: could not read its offsets: {e}") from e
        return int(low), int(high)

    def _listed_watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        """Asked of ``tp``'s leader in tries of a share of the request timeout
        (``kafka.request.timeout.ms``, librdkafka's ``socket.timeout.ms``;
        :func:`~spark_chkpt.kafka.client.outage.lookup_tries`), each one that timed out
        or met a moved leader followed by a metadata refresh
        (:func:`~spark_chkpt.kafka.client.metadata.list_offsets` for kafka-python)."""
        deadline, try_s = lookup_tries(self._settings, key="socket.timeout.ms")
        codes = self._ck.KafkaError
        moved = {
            codes._TIMED_OUT,
            codes._TRANSPORT,
            codes._ALL_BROKERS_DOWN,
            codes.REQUEST_TIMED_OUT,
            codes.LEADER_NOT_AVAILABLE,
            codes.NOT_LEADER_FOR_PARTITION,
        }

        def one_try() -> tuple[int, int]:
            seconds = max(0.1, min(try_s, deadline.remaining()))
            low, high = self._consumer.get_watermark_offsets(self._c(tp), timeout=seconds)
            return int(low), int(high)

        def again(error: BaseException) -> bool:
            if not isinstance(error, self._ck.KafkaException) or not error.args:
                return False
            code = getattr(error.args[0], "code", None)
            return callable(code) and code() in moved

        def refresh(_: BaseException) -> None:
            try:
                self._consumer.list_topics(tp.topic, timeout=max(0.1, deadline.remaining()))
            except self._ck.KafkaException as e:
                log.warning("confluent-kafka: metadata of %s not refreshed: %s", tp.topic, e)

        return retry_within(
            one_try,
            deadline=deadline,
            doing=f"listing the offsets of {tp}",
            retriable=again,
            before_retry=refresh,
        )

    def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._watermarks(tp, cached=False)[0] for tp in tps}

    def assign(self, starts: Mapping[TopicPartition, int]) -> None:
        if self._assigned:
            # librdkafka keeps a partition's pause across unassign/assign: undo it first.
            self._consumer.resume([self._c(tp) for tp in self._assigned])
            self._consumer.unassign()
        self._assigned = list(starts)
        self._fresh.clear()
        self._deferred = None
        if starts:
            self._consumer.assign([self._c(tp, offset) for tp, offset in starts.items()])

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._fresh.discard((tp.topic, tp.partition))
        try:
            self._consumer.seek(self._c(tp, offset))
        except self._ck.KafkaException:
            # A partition whose fetch stopped (an offset reset with auto.offset.reset=error)
            # refuses seek: assign it again at the offset instead.
            self._consumer.incremental_unassign([self._c(tp)])
            self._consumer.incremental_assign([self._c(tp, offset)])

    def pause(self, tp: TopicPartition) -> None:
        self._consumer.pause([self._c(tp)])

    def poll(self, *, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        # Block for the first message only, then take what is already queued: consume()
        # with a timeout waits for a full batch, which would stall every range's last poll.
        if self._deferred is not None:
            deferred, self._deferred = self._deferred, None
            raise deferred
        first = self._consumer.poll(timeout_ms / 1000)
        if first is None:
            return {}
        messages: list[Any] = [first]
        if max_records > 1:  # librdkafka takes at most 1,000,000 per call
            more = min(max_records - 1, 999_999)
            messages += self._consumer.consume(num_messages=more, timeout=0)
        good = [m for m in messages if m.error() is None]
        if len(good) != len(messages):
            for m in messages:
                error = m.error()
                if error is None:
                    continue
                if error.code() == self._ck.KafkaError._PARTITION_EOF:
                    self._fresh.add((m.topic(), m.partition()))  # a fetch reached the end
                else:
                    try:
                        self._raise_for(m, error)
                    except OffsetOutOfRangeError as e:
                        self._deferred = self._deferred or e  # after this poll's records
        polled: dict[TopicPartition, list[Any]] = {}
        # librdkafka hands out one partition's fetched messages in runs; one conversion per run
        # (a task reading one partition, the default, has a single run).
        start = 0
        while start < len(good):
            topic, partition = good[start].topic(), good[start].partition()
            stop = len(good) if len(self._assigned) == 1 else start + 1
            while (
                stop < len(good)
                and good[stop].partition() == partition
                and good[stop].topic() == topic
            ):
                stop += 1
            key = (topic, partition)
            self._fresh.add(key)
            polled.setdefault(TopicPartition(key[0], key[1]), []).extend(
                self._records(good[start:stop] if start or stop < len(good) else good)
            )
            start = stop
        return polled

    @staticmethod
    def _records(run: list[Any]) -> list[Record]:
        """One partition's messages as :class:`Record` tuples. A comprehension calling
        the message's methods: ``map`` over each method and ``tuple.__new__`` measured
        slower (1.1-1.6 µs a record against 0.6-1.2, 66,000 messages of 100 B)."""
        return [
            Record(
                m.key(),
                m.value(),
                m.offset(),
                stamp[1] if (stamp := m.timestamp())[0] else -1,  # 0: no timestamp
                1 if stamp[0] == 2 else 0,  # 2: log-append time
                m.headers(),
            )
            for m in run
        ]

    def _raise_for(self, message: Any, error: Any) -> None:
        codes = self._ck.KafkaError
        where = f"{message.topic()}-{message.partition()}"
        if error.code() in (codes._AUTO_OFFSET_RESET, codes.OFFSET_OUT_OF_RANGE):
            raise OffsetOutOfRangeError(f"{where}: {error.str()}")
        # Message errors carry no retriable flag (librdkafka sets it only on API errors):
        # these are the ones librdkafka itself retries; anything else fails the task.
        transient = {
            codes._TRANSPORT,
            codes._ALL_BROKERS_DOWN,
            codes._TIMED_OUT,
            codes.REQUEST_TIMED_OUT,
            codes.LEADER_NOT_AVAILABLE,
            codes.NOT_LEADER_FOR_PARTITION,
            codes.UNKNOWN_TOPIC_OR_PART,
        }
        if error.code() in transient and not error.fatal():
            log.warning("confluent-kafka: %s: %s (librdkafka retries)", where, error.str())
            return
        raise KafkaReadError(f"{where} offset {message.offset()}: {error.str()}")

    def position(self, tp: TopicPartition) -> int:
        (got,) = self._consumer.position([self._c(tp)])
        return int(got.offset)

    def highwater(self, tp: TopicPartition) -> int | None:
        if (tp.topic, tp.partition) not in self._fresh:
            return None
        high = self._watermarks(tp, cached=True)[1]
        return None if high < 0 else high

    def close(self) -> None:
        self._consumer.close()


def build_consumer(settings: ConsumerSettings) -> RangeConsumer:
    if settings.client == "confluent":
        return ConfluentConsumer(settings.settings)
    return KafkaPythonConsumer(settings.settings)
