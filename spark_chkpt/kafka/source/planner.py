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
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from spark_chkpt.alignment.barrier import IndexEntry, control_topic_for
from spark_chkpt.alignment.cut import RecordFilter, TopicCut, plan_topic, record_filters
from spark_chkpt.alignment.fanin import (
    FanInFilter,
    app_ids,
    fan_in_filters,
    is_fan_in,
    plan_fan_in,
    read_from_report,
    refuse_mode,
)
from spark_chkpt.errors import DataLossError
from spark_chkpt.kafka.client.outage import broker_calls, retry_while_refused
from spark_chkpt.kafka.control.topic import ControlTopic, topic_id_of
from spark_chkpt.kafka.source.fetcher import ReadSpec
from spark_chkpt.kafka.source.offset_reader import OffsetReader, require_topics
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


class SourcePlanner:
    """The driver side of one ``chkpt-kafka`` reader: offsets, cuts and read tasks."""

    def __init__(self, *, config: SourceConfig) -> None:
        self.config = config
        self._run_id = uuid.uuid4().hex[:12]
        self._offsets: OffsetReader | None = None
        self._indexes: dict[str, ControlTopic] = {}
        self._available_now: PartitionOffsets | None = None
        self._last_trigger = time.monotonic()
        self._latest: PartitionOffsets = {}
        self._waiting_since: dict[str, float] = {}
        self._group_at: PartitionOffsets | None = None  # what the group was last committed to
        # Per topic, the control-topic offset the offset log's report says a reader
        # starting there needs the index from (``index_from``): a restarted reader seeks
        # there instead of reading the control topic from its beginning; with the control
        # topic's Kafka id then (``index_id``): a control topic created again since is
        # read from its beginning.
        self._index_from: dict[str, tuple[int, str | None]] = {}

    @property
    def client_id(self) -> str:
        return f"{self.config.group_id_prefix}-{self._run_id}"

    @property
    def offsets(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(config=self.config, client_id=self.client_id + "-driver")
        return self._offsets

    def __getstate__(self) -> dict[str, Any]:
        # The reader is pickled to executors for read(): leave the driver's consumer behind.
        state = self.__dict__.copy()
        state["_offsets"] = None
        state["_indexes"] = {}
        return state

    def barrier_entries(self, topic: str, *, refresh: bool = True) -> list[IndexEntry] | None:
        """The topic's complete barrier index entries; None for a topic without barriers
        (no control topic), read like Spark's source reads any topic (its read tasks
        refuse the sink's records if they meet any: see ``ReadSpec.missing_control``).
        ``refresh=False`` reuses what this reader already read, if it has read the index
        at all."""
        index = self._indexes.get(topic)
        if index is not None and not refresh:
            return index.complete()
        topic_id = topic_id_of(self.offsets.consumer, topic)
        if index is not None and topic_id != index.topic_id:
            index.close()  # the topic was deleted and created again: read the index anew
            index = None
        if index is None:
            control = self.config.control_topic or control_topic_for(topic)
            seen = self.offsets.topics_seen or set(self.offsets.consumer.topics())
            if control not in seen:  # metadata partitions() just fetched: no extra request
                return None
            index = ControlTopic(
                bootstrap_servers=self.config.bootstrap_servers,
                control_topic=control,
                data_topic=topic,
                client_settings=self.config.client_settings,
                client_id=self.client_id + "-index",
                topic_id=topic_id,
                start_at=self._index_from.get(topic, (0, None))[0],
                start_id=self._index_from.get(topic, (0, None))[1],
            )
            self._indexes[topic] = index
        # partitions() fetched every topic's metadata for this planning call: whether
        # the control topic still exists is read from it, not asked again.
        index.refresh(topics=self.offsets.topics_seen or None)
        return index.complete()

    def revocations(self, topic: str) -> list[IndexEntry]:
        """The topic's ``revoke`` entries as last read by :meth:`barrier_entries` (a
        savepoint rewind of the upstream query: its snapshots after N are revoked)."""
        index = self._indexes.get(topic)
        return index.revocations() if index is not None else []

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

    def _align(
        self,
        begin: PartitionOffsets,
        latest: PartitionOffsets,
        end: PartitionOffsets,
        max_rows: int | None,
        *,
        previous: Mapping[str, Any] | None = None,
    ) -> tuple[PartitionOffsets, dict[str, Any]]:
        """Cut topics that carry barriers at a consistent snapshot (see spark_chkpt.alignment.cut);
        returns the end offsets and the report written with them to Spark's offset log.
        ``previous``: the reports in the batch's start offset (a fan-in topic's pending
        offsets, :mod:`spark_chkpt.alignment.fanin`)."""
        end = dict(end)
        report: dict[str, Any] = {}
        now = time.monotonic()
        previous = previous or {}
        for topic in sorted({tp.topic for tp in latest}):
            entries = self.barrier_entries(topic)
            if entries is None:
                continue
            tps = [tp for tp in latest if tp.topic == topic]
            t_begin = {tp: begin[tp] for tp in tps}
            t_latest = {tp: latest[tp] for tp in tps}
            revocations = self.revocations(topic)
            before = previous.get(topic)
            if self.config.alignment != "none" and is_fan_in(
                entries,
                before if isinstance(before, Mapping) else None,
                self.config.upstream_apps,
            ):
                report[topic] = self._align_fan_in(
                    topic=topic,
                    begin=t_begin,
                    latest=t_latest,
                    entries=entries,
                    max_rows=max_rows,
                    previous=before if isinstance(before, Mapping) else None,
                    revocations=revocations,
                    end=end,
                )
                continue
            report[topic] = self._align_topic(
                topic,
                begin=t_begin,
                latest=t_latest,
                entries=entries,
                revocations=revocations,
                max_rows=max_rows,
                now=now,
                end=end,
            )
        return end, ({"topics": report} if report else {})

    def _align_topic(
        self,
        topic: str,
        *,
        begin: PartitionOffsets,
        latest: PartitionOffsets,
        entries: Sequence[IndexEntry],
        revocations: Sequence[IndexEntry],
        max_rows: int | None,
        now: float,
        end: PartitionOffsets,
    ) -> dict[str, Any]:
        """One topic's cut (of one upstream query; ``end`` updated with it) and its report
        in the offset log."""
        cut = plan_topic(
            topic=topic,
            mode=self.config.alignment,
            start=begin,
            latest=latest,
            entries=entries,
            max_records=max_rows,
            revocations=revocations,
        )
        cut, waited = self._timed_out(
            cut,
            topic=topic,
            begin=begin,
            latest=latest,
            entries=entries,
            revocations=revocations,
            max_rows=max_rows,
            now=now,
        )
        index_from = self._keep_index(topic, begin=begin, end=cut.end)
        if not cut.waiting:
            since = self._waiting_since.pop(topic, now)
            waited = (now - since) * 1000
        end.update(cut.end)
        if cut.note:
            log.warning("chkpt-kafka %s: %s", topic, cut.note)
        report = {
            "mode": cut.mode,
            "app": cut.app_id,
            "snapshots": list(cut.snapshots),
            "barriers": cut.barriers,
            "waited_ms": round(waited),
            "span": sum(cut.end[tp] - begin[tp] for tp in begin),
            **({"reached": {str(p): s for p, s in cut.reached.items()}} if cut.reached else {}),
            **({"note": cut.note} if cut.note else {}),
            **({"revoked": cut.revoked} if cut.revoked else {}),
            **(self._index_report(topic, index_from) if index_from is not None else {}),
        }
        if cut.revoked:
            _log_revoked(topic, cut, revocations)
        return report

    def _timed_out(
        self,
        cut: TopicCut,
        *,
        topic: str,
        begin: PartitionOffsets,
        latest: PartitionOffsets,
        entries: Sequence[IndexEntry],
        revocations: Sequence[IndexEntry],
        max_rows: int | None,
        now: float,
    ) -> tuple[TopicCut, float]:
        """An aligned cut still waiting for its snapshot, with data to read: planned again
        unaligned once it has waited ``alignmentTimeout``; with how long it has waited."""
        has_data = any(latest[tp] > begin[tp] for tp in begin)
        waited = 0.0
        if cut.waiting and has_data:
            since = self._waiting_since.setdefault(topic, now)
            waited = (now - since) * 1000
            timeout = self.config.alignment_timeout_ms
            if timeout is not None and waited >= timeout:
                cut = plan_topic(
                    topic=topic,
                    mode="aligned",
                    start=begin,
                    latest=latest,
                    entries=entries,
                    max_records=max_rows,
                    force_unaligned=True,
                    revocations=revocations,
                )
                log.warning(
                    "chkpt-kafka: no consistent cut of %s after %.0f ms "
                    "(alignmentTimeout); reading this batch unaligned (each partition up to "
                    "its own newest barrier)",
                    topic,
                    waited,
                )
        return cut, waited

    def _remember_index_from(self, reports: Mapping[str, Any]) -> None:
        """Take each topic's ``index_from`` from the reports of a batch's start offsets
        (the offset log's), for an index this reader has not read yet."""
        for topic, report in reports.items():
            found = report.get("index_from") if isinstance(report, Mapping) else None
            if isinstance(found, int) and topic not in self._indexes:
                known = report.get("index_id")
                self._index_from[topic] = (found, known if isinstance(known, str) else None)

    def _keep_index(
        self, topic: str, *, begin: PartitionOffsets, end: PartitionOffsets
    ) -> int | None:
        """After planning a one-app topic's batch ``[begin, end)``: forget the index
        entries no batch from ``begin`` on needs (so planning does not grow with the
        snapshots behind), and return the control-topic offset a reader restarting at
        ``end`` needs the index from (written in the batch's report)."""
        index = self._indexes.get(topic)
        if index is None:
            return None
        after = index.needed_from({tp.partition: off for tp, off in end.items()})
        now = index.needed_from({tp.partition: off for tp, off in begin.items()})
        index.drop_before(index.position if now is None else now)
        return index.position if after is None else after

    def _index_report(self, topic: str, index_from: int) -> dict[str, Any]:
        """The report's ``index_from`` and the control topic's Kafka id it is an offset of
        (none from a broker without topic ids)."""
        known = self._indexes[topic].control_topic_id()
        return {"index_from": index_from, **({"index_id": known} if known else {})}

    def _align_fan_in(
        self,
        *,
        topic: str,
        begin: PartitionOffsets,
        latest: PartitionOffsets,
        entries: Sequence[IndexEntry],
        max_rows: int | None,
        previous: Mapping[str, Any] | None,
        revocations: Sequence[IndexEntry],
        end: PartitionOffsets,
    ) -> dict[str, Any]:
        """The cut of a topic several upstream apps write (fan-in): each app up to its own
        newest complete snapshot, the records of the others kept pending (see
        :mod:`spark_chkpt.alignment.fanin`). Updates ``end``; returns the topic's report."""
        apps = sorted(
            set(app_ids(entries))
            | set((previous or {}).get("apps") or {})
            | set(self.config.upstream_apps)
        )
        if self.config.alignment != "aligned":
            raise refuse_mode(
                topic=topic, apps=apps, option="alignment", value=self.config.alignment
            )
        if self.config.alignment_timeout_ms is not None:
            raise refuse_mode(
                topic=topic,
                apps=apps,
                option="alignmentTimeout",
                value=f"{self.config.alignment_timeout_ms}ms",
            )
        cut = plan_fan_in(
            topic=topic,
            start=begin,
            latest=latest,
            entries=entries,
            max_records=max_rows,
            previous=previous,
            revocations=revocations,
            expected=self.config.upstream_apps,
        )
        end.update(cut.end)
        return {
            "mode": "aligned",
            "app": None,
            "snapshots": [],
            "apps": cut.report(),
            "barriers": cut.barriers,
            "waited_ms": 0,
            # No "span": a fan-in batch reads offsets before its start again and leaves
            # pending records unread, so span - rows is no count of dropped records.
        }

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


def _log_revoked(topic: str, cut: TopicCut, revocations: Sequence[IndexEntry]) -> None:
    """The revoked upstream snapshots a batch skips, named in the log."""
    log.warning(
        "chkpt-kafka %s: skipping %d offset(s) of upstream snapshots revoked by "
        "a savepoint rewind (%s)",
        topic,
        cut.revoked,
        "; ".join(
            f"app {r.app_id} snapshots {list(r.revoked)} at generation {r.generation}"
            for r in revocations
            if r.revoked
        ),
    )
