"""Driver-side offset queries: which partitions exist, earliest/latest/by-time offsets.

One kafka-python consumer with no group, reused across micro-batches of a query.

More: docs/concepts/kafka-internals.md (spark_chkpt/kafka/source/offset_reader.py).
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import ChkptError, ConfigError
from spark_chkpt.kafka.client.access import access_checked, principal
from spark_chkpt.kafka.client.metadata import list_offsets, space_refreshes
from spark_chkpt.kafka.client.outage import request_deadline, retry_within
from spark_chkpt.kafka.source.options import EARLIEST, LATEST, OffsetSpec, SourceConfig
from spark_chkpt.offsets import PartitionOffsets, TopicPartition

log = logging.getLogger(__name__)

_PROBE_SECONDS = 2.0
_PROBE_POLL_MS = 5  # one poll of the log-end probe (see _high_watermarks)


_KAFKA_TP: list[Any] = []  # kafka-python's TopicPartition, imported on first use


def _ktp(tp: TopicPartition) -> Any:
    if not _KAFKA_TP:
        from kafka import TopicPartition as KafkaTopicPartition

        _KAFKA_TP.append(KafkaTopicPartition)
    return _KAFKA_TP[0](tp.topic, tp.partition)


def require_topics(config: SourceConfig, existing: Iterable[str]) -> None:
    """Refuse a start that names a topic the broker does not have (``subscribe``,
    ``assign``) with :class:`MissingTopicError`, naming the topics that exist, the
    closest names first; ``failOnMissingTopic=false`` waits for it instead."""
    from spark_chkpt.errors import MissingTopicError

    sub = config.subscription
    if not config.fail_on_missing_topic or sub.kind == "subscribePattern":
        return
    wanted = sub.topics if sub.kind == "subscribe" else tuple(sub.assigned)
    topics = set(existing)
    missing = [t for t in wanted if t not in topics]
    if not missing:
        return
    visible = sorted(t for t in topics if not t.startswith("__"))
    close = difflib.get_close_matches(missing[0], visible, n=5, cutoff=0.5)
    raise MissingTopicError(
        option=sub.kind,
        value=sub.describe().partition("=")[2],
        missing=missing,
        existing=close + [t for t in visible if t not in close],
        servers=config.bootstrap_servers,
        secured=str(config.client_settings.get("security_protocol", "PLAINTEXT")).upper()
        != "PLAINTEXT",
        principal=principal(config.client_settings),
    )


class OffsetReader:
    """Partition discovery and offset lookups for one source (driver side)."""

    def __init__(self, *, config: SourceConfig, client_id: str) -> None:
        self._config = config
        self._client_id = client_id
        self._consumer: Any = None
        self._committer: Any = None
        self.topics_seen: set[str] = set()  # every topic in the last partitions() metadata
        # Per partition: the listed log end when last probed, and the high watermark the
        # probe found (see latest()).
        self._probed: dict[TopicPartition, tuple[int, int]] = {}

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            from spark_chkpt.kafka.client.factory import kafka_consumer

            settings = self._config.consumer_settings(client_id=self._client_id)
            # This consumer only probes; a fetch the broker holds for fetch.max.wait.ms
            # (500 ms by default) would delay the offset requests queued behind it.
            settings["fetch_max_wait_ms"] = 10
            # And a fetch at a log end (the latest() probe on Kafka) is answered at once,
            # with its high watermark, instead of waiting for a record that may come.
            settings["fetch_min_bytes"] = 0
            self._consumer = kafka_consumer(
                bootstrap_servers=self._config.bootstrap_servers, settings=settings
            )
            # Every planning call asks for fresh metadata: a query's initialOffset,
            # prepareForTriggerAvailableNow and first latestOffset, back to back, each
            # waited about 100 ms before (space_refreshes).
            space_refreshes(self._consumer, retry_backoff_ms=settings.get("retry_backoff_ms"))
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
        # Forces a metadata refresh; asked again while a broker refuses (a killed node of
        # the cluster still in the metadata), for status as for the planner.
        all_topics = retry_within(
            self.consumer.topics,
            deadline=request_deadline(self.consumer.config),
            doing="listing the subscription's topics",
        )
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
        """The first offset of each partition that a read can start at (see the module
        docstring: an answer above 0 is checked by a fetch from 0)."""
        listed = self._listed_earliest(tps)
        above = {tp: off for tp, off in listed.items() if off > 0}
        if above:
            for tp, first in self._first_records(above).items():
                if first < listed[tp]:
                    log.warning(
                        "%s: the broker lists the earliest offset as %d, but the records "
                        "start at %d; reading from %d",
                        tp,
                        listed[tp],
                        first,
                        first,
                    )
                    listed[tp] = first
        return listed

    def _listed_earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._listed(
            tps, lambda ktps, ms: self.consumer.beginning_offsets(ktps, timeout_ms=ms)
        )

    def _listed(
        self,
        tps: Iterable[TopicPartition],
        ask: Callable[[list[Any], int], Mapping[Any, int]],
    ) -> PartitionOffsets:
        """``tps``' offsets as ``ask(ktps, timeout_ms)`` (a ListOffsets call of the
        consumer) answers them, through :func:`list_offsets`."""
        tps = list(tps)
        if not tps:
            return {}
        ktps = [_ktp(tp) for tp in tps]
        got = list_offsets(self.consumer, ktps, lambda ms: ask(ktps, ms))
        return {tp: int(got[ktp]) for tp, ktp in zip(tps, ktps, strict=True)}

    def _first_records(self, listed: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The offset of the first record a fetch from offset 0 returns, per partition
        that answers before the probe's deadline (none where 0 is out of range)."""
        from kafka.errors import OffsetOutOfRangeError

        consumer = self.consumer
        ktps = {tp: _ktp(tp) for tp in listed}
        by_ktp = {ktp: tp for tp, ktp in ktps.items()}
        consumer.assign(list(ktps.values()))
        for ktp in ktps.values():
            consumer.seek(ktp, 0)
        first: dict[TopicPartition, int] = {}
        pending = set(ktps)
        deadline = Deadline.after(seconds=_PROBE_SECONDS)
        try:
            while pending and not deadline.expired():
                try:
                    polled = consumer.poll(
                        timeout_ms=max(1, int(deadline.remaining() * 1000)), max_records=1
                    )
                except OffsetOutOfRangeError as error:
                    # Offset 0 is below the log start there: the listed answer stands.
                    # (No pause anywhere here: kafka-python keeps a paused partition's
                    # fetched records past assign(), see consumer.py.)
                    out = error.args[0] if error.args and isinstance(error.args[0], dict) else {}
                    if not out:
                        break
                    for ktp in out:
                        tp = by_ktp.get(ktp)
                        if tp is not None:
                            pending.discard(tp)
                            consumer.seek(ktp, listed[tp])
                    continue
                for ktp, records in polled.items():
                    tp = by_ktp[ktp]
                    if records and tp in pending:
                        first[tp] = min(int(r.offset) for r in records)
                        pending.discard(tp)
                for tp in list(pending):
                    if consumer.position(ktps[tp]) >= listed[tp]:
                        pending.discard(tp)  # read up to the listed start, nothing below
        finally:
            consumer.assign([])
        return first

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """Log end offsets (last stable offsets under read_committed), corrected by the
        fetch high watermark under read_uncommitted (see module docstring)."""
        tps = list(tps)
        ends = self._listed(tps, lambda ktps, ms: self.consumer.end_offsets(ktps, timeout_ms=ms))
        if not ends:
            return {}
        if self.consumer.config.get("isolation_level") == "read_committed":
            return ends  # the last stable offsets (see the module docstring)
        # A partition whose listed end has not moved since it was probed has no new record
        # batch (batches are never appended to): its probed high watermark still holds.
        # Only partitions that got records since are fetched from (and asked their
        # earliest offset), so an idle partition costs no fetch per batch.
        moved = [tp for tp in tps if self._probed.get(tp, (None, 0))[0] != ends[tp]]
        for tp in tps:
            known = self._probed.get(tp)
            if known is not None and known[0] == ends[tp]:
                ends[tp] = max(ends[tp], known[1])
        begins = self._listed_earliest(moved)
        probe = [tp for tp in moved if ends[tp] > begins[tp]]
        for tp in moved:
            if ends[tp] <= begins[tp]:  # empty: nothing to probe until records come
                self._probed[tp] = (ends[tp], ends[tp])
        if probe:
            probed = self._high_watermarks(probe, ends)
            for tp in probe:
                hw = probed.get(tp)
                if hw is not None:  # unanswered before the deadline: asked again next time
                    self._probed[tp] = (ends[tp], hw)
                    ends[tp] = max(ends[tp], hw)
        return ends

    def _high_watermarks(
        self, tps: list[TopicPartition], ends: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        consumer = self.consumer
        ktps = {tp: _ktp(tp) for tp in tps}
        consumer.assign(list(ktps.values()))
        # The fetch starts at the listed end, not at the last record: every fetch response
        # carries the high watermark, records or not. On Kafka the listed end is the high
        # watermark, so the answer holds no record to decode; from end - 1 it held the
        # whole last record batch, which kafka-python decodes record by record to reach
        # the last one (thousands of records where a producer batched the topic's last
        # writes: 0.25 s per restart of the kafka-age bench). On Tansu the listed end
        # falls inside the last batch, which comes back as before.
        for tp, ktp in ktps.items():
            consumer.seek(ktp, ends[tp])
        # A partition has answered once a fetch response for it was parsed: that sets its
        # high watermark (a response without records too). One poll parses every fetch
        # response that has arrived, so the loop runs about once per fetch round trip,
        # not once per partition; position() is not asked (kafka-python validates every
        # assigned partition's position on each call: quadratic in the partitions).
        pending = dict(ktps)
        result: dict[TopicPartition, int] = {}
        deadline = Deadline.after(seconds=_PROBE_SECONDS)
        try:
            while pending and not deadline.expired():
                # Short polls: kafka-python's poll() waits out its whole timeout unless
                # records come, and an answer at the log end holds none.
                consumer.poll(
                    timeout_ms=max(1, min(_PROBE_POLL_MS, int(deadline.remaining() * 1000))),
                    max_records=len(pending),
                )
                for tp, ktp in list(pending.items()):
                    hw = consumer.highwater(ktp)
                    if hw is not None:
                        result[tp] = int(hw)
                        del pending[tp]
        finally:
            consumer.assign([])
        return result

    def for_times(self, times: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """First offset whose timestamp is at or after the time; ``None`` where none is."""
        if not times:
            return {}
        query = {_ktp(tp): ts for tp, ts in times.items()}
        got = list_offsets(
            self.consumer,
            list(query),
            lambda ms: self.consumer.offsets_for_times(query, timeout_ms=ms),
        )
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
        from kafka.structs import OffsetAndMetadata

        from spark_chkpt.kafka.client.factory import kafka_consumer

        if self._committer is None or self._committer.config["group_id"] != group_id:
            settings = self._config.consumer_settings(client_id=self._client_id + "-commit")
            settings["group_id"] = group_id
            self._committer = kafka_consumer(
                bootstrap_servers=self._config.bootstrap_servers, settings=settings
            )
        try:
            with access_checked(
                servers=self._config.bootstrap_servers,
                settings=self._config.client_settings,
                operation="READ",
                resource=group_id,
                resource_kind="group",
            ):
                self._committer.commit(
                    {
                        _ktp(tp): OffsetAndMetadata(off, "spark-chkpt", -1)
                        for tp, off in offsets.items()
                    }
                )
        except ChkptError:
            raise
        except Exception as e:  # the broker's error classes vary; all mean "not committed"
            raise ChkptError(f"committing offsets of group {group_id!r} failed: {e}") from e
