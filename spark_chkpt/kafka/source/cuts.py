"""The cut of a batch at barriers, on the driver: the control topics the source reads (one
index per topic with barriers, kept across batches and read from where the offset log's
report says a restarted reader needs it), each topic cut by its mode at a consistent
snapshot (:mod:`spark_chkpt.alignment.cut`; ``alignmentTimeout`` reading it unaligned) or,
for a topic several upstream queries write, per app (:mod:`spark_chkpt.alignment.fanin`),
and the report written with the batch's end offsets.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from spark_chkpt.alignment.barrier import IndexEntry, control_topic_for
from spark_chkpt.alignment.cut import AlignmentMode, TopicCut, plan_topic
from spark_chkpt.alignment.fanin import (
    app_ids,
    is_fan_in,
    plan_fan_in,
    refuse_mode,
)
from spark_chkpt.kafka.control.topic import ControlTopic, topic_id_of
from spark_chkpt.kafka.source.offset_reader import OffsetReader
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.offsets import (
    PartitionOffsets,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicRead:
    """What one topic's cut is planned from: its partitions' offsets where the batch
    begins and where the log ends, its live and its ``revoke`` index entries, the read
    limit."""

    topic: str
    begin: PartitionOffsets
    latest: PartitionOffsets
    entries: Sequence[IndexEntry]
    revocations: Sequence[IndexEntry]
    max_rows: int | None

    def plan(self, *, mode: AlignmentMode, force_unaligned: bool = False) -> TopicCut:
        """The topic's cut in ``mode`` (:func:`spark_chkpt.alignment.cut.plan_topic`)."""
        return plan_topic(mode=mode, force_unaligned=force_unaligned, **self.planned())

    def planned(self) -> PlanInputs:
        """What both planners (:func:`~spark_chkpt.alignment.cut.plan_topic`,
        :func:`~spark_chkpt.alignment.fanin.plan_fan_in`) take of the read, by name."""
        return PlanInputs(
            topic=self.topic,
            start=self.begin,
            latest=self.latest,
            entries=self.entries,
            max_records=self.max_rows,
            revocations=self.revocations,
        )


class PlanInputs(TypedDict):
    """A topic's read as the planners' keyword arguments (:meth:`TopicRead.planned`)."""

    topic: str
    start: PartitionOffsets
    latest: PartitionOffsets
    entries: Sequence[IndexEntry]
    max_records: int | None
    revocations: Sequence[IndexEntry]


class BarrierCuts:
    """The part of :class:`~spark_chkpt.kafka.source.planner.SourcePlanner` that reads the
    barrier indexes and cuts a batch's end at them; the driver's offset reader, which
    both use, lives here too."""

    def __init__(self, *, config: SourceConfig) -> None:
        self.config = config
        self._run_id = uuid.uuid4().hex[:12]
        self._offsets: OffsetReader | None = None
        self._indexes: dict[str, ControlTopic] = {}
        self._waiting_since: dict[str, float] = {}
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
            read = TopicRead(
                topic=topic,
                begin={tp: begin[tp] for tp in tps},
                latest={tp: latest[tp] for tp in tps},
                entries=entries,
                revocations=self.revocations(topic),
                max_rows=max_rows,
            )
            before = previous.get(topic)
            if self.config.alignment != "none" and is_fan_in(
                entries,
                before if isinstance(before, Mapping) else None,
                self.config.upstream_apps,
            ):
                report[topic] = self._align_fan_in(
                    read, previous=before if isinstance(before, Mapping) else None, end=end
                )
                continue
            report[topic] = self._align_topic(read, now=now, end=end)
        return end, ({"topics": report} if report else {})

    def _align_topic(self, read: TopicRead, *, now: float, end: PartitionOffsets) -> dict[str, Any]:
        """One topic's cut (of one upstream query; ``end`` updated with it) and its report
        in the offset log."""
        topic, begin = read.topic, read.begin
        cut, waited = self._timed_out(read.plan(mode=self.config.alignment), read, now=now)
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
            _log_revoked(topic, cut, read.revocations)
        return report

    def _timed_out(self, cut: TopicCut, read: TopicRead, *, now: float) -> tuple[TopicCut, float]:
        """An aligned cut still waiting for its snapshot, with data to read: planned again
        unaligned once it has waited ``alignmentTimeout``; with how long it has waited."""
        has_data = any(read.latest[tp] > read.begin[tp] for tp in read.begin)
        waited = 0.0
        if cut.waiting and has_data:
            since = self._waiting_since.setdefault(read.topic, now)
            waited = (now - since) * 1000
            timeout = self.config.alignment_timeout_ms
            if timeout is not None and waited >= timeout:
                cut = read.plan(mode="aligned", force_unaligned=True)
                log.warning(
                    "chkpt-kafka: no consistent cut of %s after %.0f ms "
                    "(alignmentTimeout); reading this batch unaligned (each partition up to "
                    "its own newest barrier)",
                    read.topic,
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
        self, read: TopicRead, *, previous: Mapping[str, Any] | None, end: PartitionOffsets
    ) -> dict[str, Any]:
        """The cut of a topic several upstream apps write (fan-in): each app up to its own
        newest complete snapshot, the records of the others kept pending (see
        :mod:`spark_chkpt.alignment.fanin`). Updates ``end``; returns the topic's report."""
        topic = read.topic
        apps = sorted(
            set(app_ids(read.entries))
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
        cut = plan_fan_in(previous=previous, expected=self.config.upstream_apps, **read.planned())
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
