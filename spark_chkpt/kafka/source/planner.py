"""The driver side of the ``chkpt-kafka`` source: where each batch starts and ends.

:class:`SourcePlanner` keeps one offset reader (:mod:`spark_chkpt.kafka.source.offset_reader`)
for the query's lifetime and answers what Spark asks a Kafka source: the initial
offsets, the end of the next batch (read limits, ``minOffsetsPerTrigger``,
Trigger.AvailableNow, new and lost partitions, and on topics with barriers a cut at a
snapshot, :mod:`spark_chkpt.alignment.cut`), and the read tasks of a batch. The
offsets it returns are Spark's Kafka JSON, e.g. ``{"events": {"0": 1200, "1": 1187}}``,
with the batch's alignment report under ``__chkpt__``. The DataSource classes in
``connectors/kafka_source.py`` only translate between Spark and this class.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.alignment.cut import RecordFilter, record_filters
from spark_chkpt.alignment.fanin import (
    FanInFilter,
    fan_in_filters,
    read_from_report,
)
from spark_chkpt.errors import DataLossError
from spark_chkpt.kafka.client.outage import broker_calls, retry_while_refused
from spark_chkpt.kafka.source.cuts import BarrierCuts
from spark_chkpt.kafka.source.intake import ReadSpec
from spark_chkpt.kafka.source.offset_reader import require_topics
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.offsets import (
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    allocate_limit,
    from_json,
    meta_of,
    split_ranges,
    to_json,
    total_lag,
)

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _on_broker(
    doing: str,
) -> Callable[
    [Callable[Concatenate[SourcePlanner, _P], _R]], Callable[Concatenate[SourcePlanner, _P], _R]
]:
    """A planner call whose broker outage leaves as one error naming broker and timeout;
    a broker that refuses connections (restarting) is retried within the request timeout."""

    def wrap(
        method: Callable[Concatenate[SourcePlanner, _P], _R],
    ) -> Callable[Concatenate[SourcePlanner, _P], _R]:
        @functools.wraps(method)
        def call(self: SourcePlanner, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            settings = self.config.client_settings
            with broker_calls(
                servers=self.config.bootstrap_servers,
                settings=settings,
                doing=doing,
                # The planner lists offsets (DESCRIBE) and reads the first records of a
                # partition (READ); Kafka's READ implies DESCRIBE: one grant for both.
                operation="READ",
            ):
                return retry_while_refused(
                    lambda: method(self, *args, **kwargs), settings=settings, doing=doing
                )

        return call

    return wrap


def _group(pieces: Sequence[OffsetRange], per_task: int) -> list[list[OffsetRange]]:
    """Up to ``per_task`` ranges of distinct partitions per read task: each piece, in
    partition and offset order, joins the first task with room that holds no piece of
    its partition. Full tasks are skipped for good and each task knows its partitions,
    so 1,000 partitions in two tasks cost a few ms, not the quarter second of comparing
    every piece with every member of a task."""
    groups: list[list[OffsetRange]] = []
    members: list[set[TopicPartition]] = []
    first_open = 0  # every task before it is full
    for piece in sorted(pieces, key=lambda r: (r.tp, r.start)):
        for index in range(first_open, len(groups)):
            group = groups[index]
            if len(group) < per_task and piece.tp not in members[index]:
                group.append(piece)
                members[index].add(piece.tp)
                break
        else:
            groups.append([piece])
            members.append({piece.tp})
        while first_open < len(groups) and len(groups[first_open]) >= per_task:
            first_open += 1
    return groups


class SourcePlanner(BarrierCuts):
    """The driver side of one ``chkpt-kafka`` reader: offsets, cuts (:class:`BarrierCuts`)
    and read tasks."""

    def __init__(self, *, config: SourceConfig) -> None:
        super().__init__(config=config)
        self._available_now: PartitionOffsets | None = None
        self._last_trigger = time.monotonic()
        self._latest: PartitionOffsets = {}
        self._group_at: PartitionOffsets | None = None  # what the group was last committed to

    def __getstate__(self) -> dict[str, Any]:
        # The reader is pickled to executors for read(): leave the driver's consumer behind.
        state = self.__dict__.copy()
        state["_offsets"] = None
        state["_indexes"] = {}
        return state

    def plan(
        self,
        start: PartitionOffsets,
        end: PartitionOffsets,
        *,
        modes: Mapping[str, str] | None = None,
        fan_in: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[list[ReadSpec]]:
        """Read tasks for ``[start, end)``, each a list of ranges of distinct partitions.

        Partitions new since ``start`` are read from their earliest offset; an end before
        its start is data loss (fail, or warn and read that partition from its earliest
        offset). ``fan_in``: the reports of fan-in topics (several upstream apps), whose
        reads begin at the apps' pending offsets (:mod:`spark_chkpt.alignment.fanin`)."""
        went_back = [tp for tp in end if tp in start and end[tp] < start[tp]]
        for tp in went_back:
            self._data_loss(
                f"{tp}: the offset went back from {start[tp]} to {end[tp]} (the "
                "topic was recreated or truncated); reading it from earliest"
            )
        first = dict(start)
        first.update(self.offsets.earliest([tp for tp in end if tp not in start] + went_back))
        fan_in = fan_in or {}
        reads = dict(first)
        for topic, report in fan_in.items():
            # A fan-in batch reads again from the first record some app has not judged.
            reads.update(
                read_from_report(report, {tp: o for tp, o in first.items() if tp.topic == topic})
            )
        ranges = [OffsetRange(tp, reads[tp], until) for tp, until in sorted(end.items())]
        pieces = split_ranges(ranges, min_partitions=self.config.min_partitions)
        specs = self._read_specs(first, end, modes or {})
        fan_filters: dict[TopicPartition, FanInFilter] = {}
        for topic, report in fan_in.items():
            fan_filters.update(
                fan_in_filters(
                    report=report,
                    start={tp: o for tp, o in first.items() if tp.topic == topic},
                    end={tp: o for tp, o in end.items() if tp.topic == topic},
                    entries=self.barrier_entries(topic, refresh=False) or [],
                    revocations=self.revocations(topic),
                )
            )
        return [
            [
                ReadSpec(
                    range=r,
                    markers=specs[r.tp][0],
                    filter=None if r.tp in fan_filters else specs[r.tp][1],
                    missing_control=specs[r.tp][2],
                    fan_in=fan_filters.get(r.tp),
                )
                for r in group
            ]
            for group in _group(
                pieces, self.config.per_task(len(pieces), records=sum(r.size for r in pieces))
            )
        ]

    def _read_specs(
        self, begin: PartitionOffsets, end: PartitionOffsets, modes: Mapping[str, str]
    ) -> dict[TopicPartition, tuple[bool, RecordFilter | None, str | None]]:
        """Per partition: does its topic carry barriers, which records to drop, and (for
        a topic read as plain whose alignment is not ``none``) the control topic whose
        absence the read task must refuse if the topic holds the sink's records."""
        specs: dict[TopicPartition, tuple[bool, RecordFilter | None, str | None]] = {}
        for topic in sorted({tp.topic for tp in end}):
            tps = [tp for tp in end if tp.topic == topic]
            # latestOffset just read the index up to (at least) this batch's end; a
            # replay in a new process has no index yet and reads it.
            entries = self.barrier_entries(topic, refresh=False)
            if entries is None:
                control = None
                if self.config.alignment != "none":
                    control = self.config.control_topic or control_topic_for(topic)
                specs.update({tp: (False, None, control) for tp in tps})
                continue
            mode = modes.get(topic, self.config.alignment)
            filters = record_filters(
                topic=topic,
                mode=mode,  # type: ignore[arg-type]
                begin={tp: begin[tp] for tp in tps},
                end={tp: end[tp] for tp in tps},
                entries=entries,
                revocations=self.revocations(topic),
            )
            specs.update({tp: (True, filters.get(tp), None) for tp in tps})
        return specs

    def _data_loss(self, message: str) -> None:
        if self.config.fail_on_data_loss:
            raise DataLossError(
                message + ". Some data may have been lost. Set "
                "failOnDataLoss=false to go on with a warning instead."
            )
        log.warning("%s; going on because failOnDataLoss=false", message)

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None
        for index in self._indexes.values():
            index.close()
        self._indexes = {}

    @_on_broker("finding the query's starting offsets")
    def initial_offsets(self) -> dict[str, Any]:
        """Where a new streaming query starts (``startingOffsets`` and friends)."""
        spec = self.config.starting
        tps = self.offsets.partitions()
        require_topics(self.config, self.offsets.topics_seen)  # before offsets/0 is written
        offsets = self.offsets.resolve(
            spec,
            tps,
            option=_starting_option(spec.kind),
            missing_time=self.config.timestamp_strategy,
        )
        log.info("chkpt-kafka starts at %s", to_json(offsets))
        return to_json(offsets)

    @_on_broker("reading the log ends for Trigger.AvailableNow")
    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow: fix the end at what exists now."""
        tps = self.offsets.partitions()
        self._available_now = self.offsets.latest(tps)
        log.info("chkpt-kafka Trigger.AvailableNow reads up to %s", to_json(self._available_now))

    @_on_broker("planning the next batch")
    def latest_offset(
        self, start: dict[str, Any], *, max_rows: int | None, read_all: bool
    ) -> dict[str, Any]:
        """The end of the next batch from ``start``: capped at ``max_rows`` records, cut
        at a barrier on topics that carry them; ``start`` itself to skip the trigger.

        ``start`` is where the last completed batch ended (Spark plans a batch only once
        the one before it committed): the consumer group is committed there first, so
        lag tools see a caught-up or stopped query where it is. Spark's own
        ``commit(end)`` of a batch comes only when the next batch is planned, which left
        the group one batch behind for as long as no new record came."""
        self.commit_group(start)
        begin = from_json(start)
        tps = self.offsets.partitions()
        if self._available_now is not None:
            # Read what existed when the query started; partitions added since wait.
            latest = {tp: off for tp, off in self._available_now.items() if tp in set(tps)}
        else:
            latest = self.offsets.latest(tps)
        gone = [tp for tp in begin if tp not in latest]
        if gone:
            self._data_loss(
                f"{gone[0]} is no longer in Kafka ({len(gone)} partition(s) gone: "
                "topic deleted or unsubscribed)"
            )
        effective = {tp: off for tp, off in begin.items() if tp in latest}
        new = [tp for tp in latest if tp not in effective]
        if new:
            earliest = self.offsets.earliest(new)
            log.info(
                "chkpt-kafka found new partitions %s; reading them from earliest",
                ", ".join(str(tp) for tp in new),
            )
            effective.update(earliest)
        went_back = [tp for tp, off in effective.items() if latest[tp] < off]
        for tp in went_back:
            self._data_loss(
                f"{tp}: the log now ends at {latest[tp]}, before the offset "
                f"{effective[tp]} already read (topic recreated or truncated)"
            )
        effective.update(self.offsets.earliest(went_back))
        self._latest = latest
        end = latest
        if max_rows is not None:
            # Exactly max_rows records (largest remainder); Spark rounds each partition's
            # share down instead: a difference kept on purpose (docs/reference/parity.md)
            end = allocate_limit(effective, latest, max_records=max_rows)
        previous = meta_of(start).get("topics", {})
        self._remember_index_from(previous)
        end, meta = self._align(effective, latest, end, max_rows, previous=previous)
        if self._waits_for_more(effective, end, read_all=read_all):
            return start
        if end == from_json(start) and not _fan_in_moved(previous, meta.get("topics", {})):
            return start
        self._last_trigger = time.monotonic()
        return to_json(end, meta=meta)

    def _waits_for_more(
        self, start: PartitionOffsets, end: PartitionOffsets, *, read_all: bool
    ) -> bool:
        """minOffsetsPerTrigger: skip this trigger until enough records or maxTriggerDelay."""
        wanted = self.config.min_offsets_per_trigger
        if wanted is None or self._available_now is not None or read_all:
            return False
        waited_ms = (time.monotonic() - self._last_trigger) * 1000
        if total_lag(start, end) >= wanted or waited_ms >= self.config.max_trigger_delay_ms:
            return False
        log.debug(
            "chkpt-kafka waits: %d new records < minOffsetsPerTrigger %d",
            total_lag(start, end),
            wanted,
        )
        return True

    def reported_latest(self) -> dict[str, Any] | None:
        return to_json(self._latest) if self._latest else None

    @_on_broker("planning a batch's read tasks")
    def read_tasks(self, start: dict[str, Any], end: dict[str, Any]) -> list[list[ReadSpec]]:
        """Read tasks of the streaming batch ``[start, end)``. Spark may replay this from
        its offset log after a restart: the modes come from the report stored with the
        end offset, the drop rules from the barrier index.

        A topic the report does not name had no control topic when the batch was planned
        and was read as plain: its replay reads it as plain too (mode ``none``: barriers
        skipped, nothing dropped), even if its control topic exists by now, or the replay
        would drop records the first run read."""
        self._remember_index_from(meta_of(start).get("topics", {}))
        topics = meta_of(end).get("topics", {})
        modes = {t: str(r.get("mode")) for t, r in topics.items() if isinstance(r, dict)}
        fan_in = {t: r for t, r in topics.items() if isinstance(r, dict) and "apps" in r}
        planned = from_json(end)
        for topic in {tp.topic for tp in planned}:
            modes.setdefault(topic, "none")
        return self.plan(from_json(start), planned, modes=modes, fan_in=fan_in)

    def commit_group(self, end: dict[str, Any]) -> None:
        """Spark finished the batch ending at ``end``: make it visible to lag tools
        (``kafka.group.id``; once per end: the next trigger's ``start`` is the same).

        Informational only: the query restarts from its checkpoint's offsets, never from
        the group's, so the group's offsets take no part in exactly-once."""
        if self.config.group_id is None:
            return
        offsets = {tp: off for tp, off in from_json(end).items() if off >= 0}
        if not offsets or offsets == self._group_at:
            return
        try:
            self.offsets.commit_group(group_id=self.config.group_id, offsets=offsets)
            self._group_at = offsets
        except Exception as e:  # progress reporting must not fail a committed batch
            log.warning(
                "chkpt-kafka could not commit offsets for group %s: %s", self.config.group_id, e
            )

    @_on_broker("planning a batch query's read tasks")
    def batch_read_tasks(self) -> list[list[ReadSpec]]:
        """Read tasks of a batch query, ``[startingOffsets, endingOffsets)``. On topics with
        barriers, barrier records are skipped and records of failed upstream attempts
        before the last barrier dropped; records after it (a snapshot in flight) are read."""
        tps = self.offsets.partitions()
        require_topics(self.config, self.offsets.topics_seen)
        start = self.offsets.resolve(
            self.config.starting,
            tps,
            option=_starting_option(self.config.starting.kind),
            missing_time=self.config.timestamp_strategy,
        )
        end = self.offsets.resolve(
            self.config.ending,
            tps,
            option=_ending_option(self.config.ending.kind),
            missing_time="latest",
        )
        # A batch query has no later batch to wait for: it reads the records after the
        # last barrier too (at-least-once for them), like Flink's AT_LEAST_ONCE.
        mode = "none" if self.config.alignment == "none" else "at-least-once"
        try:
            return self.plan(start, end, modes={tp.topic: mode for tp in end})
        finally:
            self.stop()


def _fan_in_moved(previous: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether a fan-in topic's pending offsets moved (an app's snapshot to deliver whose
    barriers lie before Spark's start offsets): a batch even if the offsets stay."""
    for topic, report in now.items():
        if not isinstance(report, Mapping) or "apps" not in report:
            continue
        before = previous.get(topic)
        old = before.get("apps") if isinstance(before, Mapping) else None
        pending = {a: r.get("pending") for a, r in (old or {}).items() if isinstance(r, Mapping)}
        if {a: r.get("pending") for a, r in report["apps"].items()} != pending:
            return True
    return False


def _starting_option(kind: str) -> str:
    return {"timestamp": "startingTimestamp", "timestamps": "startingOffsetsByTimestamp"}.get(
        kind, "startingOffsets"
    )


def _ending_option(kind: str) -> str:
    return {"timestamp": "endingTimestamp", "timestamps": "endingOffsetsByTimestamp"}.get(
        kind, "endingOffsets"
    )
