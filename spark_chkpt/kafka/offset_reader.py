"""Driver-side offset queries: which partitions exist, earliest/latest/by-time offsets.

One kafka-python consumer with no group, reused across micro-batches of a query.

Two broker behaviours are handled here rather than assumed away:

* Some Kafka-protocol brokers (Tansu among them) answer ListOffsets(latest) with the
  base offset of the last record batch plus one, not the log end. A fetch response
  always carries the true high watermark, so :meth:`OffsetReader.latest` probes the
  last batch of each non-empty partition and keeps the larger of the two numbers.
* A time lookup with no match comes back as ``None`` from a Kafka broker and as
  ``timestamp == -1`` from others; both mean "no offset at or after that time".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import ChkptError, ConfigError
from spark_chkpt.kafka.source_options import EARLIEST, LATEST, OffsetSpec, SourceConfig
from spark_chkpt.offsets import PartitionOffsets, TopicPartition

log = logging.getLogger(__name__)

_PROBE_SECONDS = 2.0


def _ktp(tp: TopicPartition) -> Any:
    from kafka import TopicPartition as KafkaTopicPartition

    return KafkaTopicPartition(tp.topic, tp.partition)


class OffsetReader:
    """Partition discovery and offset lookups for one source (driver side)."""

    def __init__(self, *, config: SourceConfig, client_id: str) -> None:
        self._config = config
        self._client_id = client_id
        self._consumer: Any = None
        self._committer: Any = None
        self.topics_seen: set[str] = set()  # every topic in the last partitions() metadata

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            from kafka import KafkaConsumer

            settings = self._config.consumer_settings(client_id=self._client_id)
            # This consumer only probes; a fetch the broker holds for fetch.max.wait.ms
            # (500 ms by default) would delay the offset requests queued behind it.
            settings["fetch_max_wait_ms"] = 10
            self._consumer = KafkaConsumer(**settings)
        return self._consumer

    def close(self) -> None:
        for client in (self._consumer, self._committer):
            if client is not None:
                client.close()
        self._consumer = self._committer = None

    # -- discovery -------------------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now (fresh metadata on every call)."""
        sub = self._config.subscription
        all_topics = self.consumer.topics()  # forces a metadata refresh
        self.topics_seen = set(all_topics)
        if sub.kind == "assign":
            return sorted(TopicPartition(t, p) for t, ps in sub.assigned.items() for p in ps)
        if sub.kind == "subscribe":
            topics: Iterable[str] = [t for t in sub.topics if t in all_topics]
        else:
            pattern = re.compile(sub.pattern or "")
            topics = [t for t in all_topics if pattern.fullmatch(t) and not t.startswith("__")]
        found = []
        for topic in topics:
            for p in self.consumer.partitions_for_topic(topic) or ():
                found.append(TopicPartition(topic, p))
        return sorted(found)

    # -- offsets ---------------------------------------------------------------------

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        tps = list(tps)
        if not tps:
            return {}
        got = self.consumer.beginning_offsets([_ktp(tp) for tp in tps])
        return {tp: int(got[_ktp(tp)]) for tp in tps}

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """Log end offsets, corrected by the fetch high watermark (see module docstring)."""
        tps = list(tps)
        if not tps:
            return {}
        listed = self.consumer.end_offsets([_ktp(tp) for tp in tps])
        ends = {tp: int(listed[_ktp(tp)]) for tp in tps}
        begins = self.earliest(tps)
        probe = [tp for tp in tps if ends[tp] > begins[tp]]
        if probe:
            for tp, hw in self._high_watermarks(probe, ends).items():
                ends[tp] = max(ends[tp], hw)
        return ends

    def _high_watermarks(
        self, tps: list[TopicPartition], ends: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        consumer = self.consumer
        ktps = {tp: _ktp(tp) for tp in tps}
        consumer.assign(list(ktps.values()))
        for tp, ktp in ktps.items():
            consumer.seek(ktp, ends[tp] - 1)
        answered: set[TopicPartition] = set()
        deadline = Deadline.after(seconds=_PROBE_SECONDS)
        while len(answered) < len(tps) and not deadline.expired():
            polled = consumer.poll(
                timeout_ms=max(1, int(deadline.remaining() * 1000)), max_records=1
            )
            returned = {TopicPartition(k.topic, k.partition) for k, v in polled.items() if v}
            for tp, ktp in ktps.items():
                if tp in returned or consumer.position(ktp) >= ends[tp]:
                    answered.add(tp)
        result = {}
        for tp, ktp in ktps.items():
            hw = consumer.highwater(ktp)
            if hw is not None:
                result[tp] = int(hw)
        consumer.assign([])
        return result

    def for_times(self, times: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """First offset whose timestamp is at or after the time; ``None`` where none is."""
        if not times:
            return {}
        got = self.consumer.offsets_for_times({_ktp(tp): ts for tp, ts in times.items()})
        result: dict[TopicPartition, int | None] = {}
        for tp in times:
            found = got.get(_ktp(tp))
            result[tp] = None if found is None or found.timestamp < 0 else int(found.offset)
        return result

    def resolve(
        self,
        spec: OffsetSpec,
        tps: list[TopicPartition],
        *,
        option: str,
        missing_time: str = "error",
    ) -> PartitionOffsets:
        """Concrete offsets for ``spec`` on ``tps`` (-2/-1 and times looked up).

        ``missing_time``: what a timestamp with no offset at or after it becomes:
        ``error`` (raise, naming the option and partition) or ``latest``.
        """
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind in ("timestamp", "timestamps"):
            if spec.kind == "timestamp":
                times = {tp: spec.timestamp_ms or 0 for tp in tps}
            else:
                times = self._per_partition(spec, tps, option=option)
            found = self.for_times(times)
            missing = [tp for tp, off in found.items() if off is None]
            latest = self.latest(missing) if missing else {}
            if missing and missing_time == "error":
                tp = missing[0]
                raise ConfigError(
                    option,
                    str(times[tp]),
                    f"no record at or after this time in {tp} (and {len(missing) - 1} other "
                    "partition(s)); set startingOffsetsByTimestampStrategy=latest to start "
                    "at the end of such partitions",
                )
            return {tp: (latest[tp] if off is None else off) for tp, off in found.items()}
        wanted = self._per_partition(spec, tps, option=option)
        earliest = self.earliest(tp for tp, o in wanted.items() if o == EARLIEST)
        latest = self.latest(tp for tp, o in wanted.items() if o == LATEST)
        return {tp: earliest.get(tp, latest.get(tp, o)) if o < 0 else o for tp, o in wanted.items()}

    def _per_partition(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, option: str
    ) -> dict[TopicPartition, int]:
        given = {TopicPartition(t, p): v for t, ps in spec.offsets.items() for p, v in ps.items()}
        missing = [tp for tp in tps if tp not in given]
        if missing:
            raise ConfigError(
                option,
                spec.describe(),
                f"specify every partition of the subscribed topics; {missing[0]} is missing "
                f"({len(missing)} in all)",
            )
        extra = [tp for tp in given if tp not in set(tps)]
        if extra:
            raise ConfigError(
                option, spec.describe(), f"{extra[0]} is not a partition of the subscription"
            )
        return {tp: given[tp] for tp in tps}

    # -- consumer groups -------------------------------------------------------------

    def commit_group(self, *, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for ``group_id`` so lag tools see the query's progress."""
        from kafka import KafkaConsumer
        from kafka.structs import OffsetAndMetadata

        if self._committer is None or self._committer.config["group_id"] != group_id:
            settings = self._config.consumer_settings(client_id=self._client_id + "-commit")
            settings["group_id"] = group_id
            self._committer = KafkaConsumer(**settings)
        try:
            self._committer.commit(
                {_ktp(tp): OffsetAndMetadata(off, "spark-chkpt", -1) for tp, off in offsets.items()}
            )
        except Exception as e:  # the broker's error classes vary; all mean "not committed"
            raise ChkptError(f"committing offsets of group {group_id!r} failed: {e}") from e
