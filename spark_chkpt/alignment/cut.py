"""Where a downstream micro-batch ends on a topic that carries barrier markers.

Pure planning (no Kafka, no Spark): from the batch's start offsets, the log ends and the
barrier index entries of the upstream query, decide the end offsets, which records the
read tasks must drop, and what the batch reports about alignment.

More: docs/concepts/kafka-internals.md (spark_chkpt/alignment/cut.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.alignment.snapshots import (
    barriers_in,
    check_not_passed,
    completed_below,
    entries_ahead,
    revoked_span,
)
from spark_chkpt.errors import AlignmentError
from spark_chkpt.offsets import PartitionOffsets, TopicPartition, allocate_limit

AlignmentMode = Literal["aligned", "unaligned", "at-least-once", "none"]
ALIGNMENT_MODES: tuple[AlignmentMode, ...] = ("aligned", "unaligned", "at-least-once", "none")


@dataclass(frozen=True)
class RecordFilter:
    """What a read task drops on one topic-partition: tagged records before
    ``confirm_until`` whose attempt is not in ``confirmed``; and every record (barriers
    too) of revoked snapshots: offsets in a ``revoked`` range ``[start, end)``, or
    tagged with an attempt in ``revoked_attempts``."""

    confirmed: frozenset[str] = frozenset()
    confirm_until: int = 0
    revoked: tuple[tuple[int, int], ...] = ()
    revoked_attempts: frozenset[str] = frozenset()

    def is_revoked(self, offset: int, attempt: str | None) -> bool:
        return (attempt is not None and attempt in self.revoked_attempts) or any(
            start <= offset < end for start, end in self.revoked
        )


@dataclass(frozen=True)
class TopicCut:
    """The plan for one topic of the batch."""

    topic: str
    mode: AlignmentMode
    end: PartitionOffsets
    filters: Mapping[TopicPartition, RecordFilter] = field(default_factory=dict)
    app_id: str | None = None
    snapshots: tuple[int, ...] = ()
    barriers: int = 0
    note: str | None = None
    reached: Mapping[int, int] = field(default_factory=dict)  # unaligned: partition -> snapshot
    revoked: int = 0  # offsets of revoked snapshots in the batch (records and barriers)

    @property
    def waiting(self) -> bool:
        return self.mode == "aligned" and not self.snapshots


def _app_entries(topic: str, entries: Sequence[IndexEntry]) -> tuple[str | None, list[IndexEntry]]:
    apps = sorted({e.app_id for e in entries})
    if len(apps) > 1:
        raise AlignmentError(
            f"topic {topic} carries barriers of {len(apps)} upstream queries "
            f"({', '.join(apps)}); this plan is for one (the source plans a fan-in topic "
            "with spark_chkpt.alignment.fanin, aligned only). Read it with alignment=aligned "
            "or alignment=none, or give each upstream query its own topic."
        )
    return (apps[0] if apps else None), list(entries)


def plan_topic(
    *,
    topic: str,
    mode: AlignmentMode,
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    entries: Sequence[IndexEntry],
    max_records: int | None,
    force_unaligned: bool = False,
    revocations: Sequence[IndexEntry] = (),
) -> TopicCut:
    """Plan one topic's part of the batch. ``force_unaligned``: the alignment timeout
    expired, read this batch ``unaligned`` (still exactly-once per record).
    ``revocations``: the topic's ``revoke`` entries (``entries`` are the live ones)."""
    partitions = sorted(latest)
    begin = {tp: start.get(tp, latest[tp]) for tp in partitions}
    if mode != "none":
        check_not_passed(topic=topic, begin=begin, revocations=revocations)
    if mode == "none":
        return TopicCut(topic=topic, mode="none", end=_limited(begin, latest, max_records))
    app_id, entries = _app_entries(topic, entries)
    ahead = entries_ahead(entries, begin, topic)
    done = completed_below(ahead, begin, latest)

    at = _BatchStart(
        topic=topic,
        begin=begin,
        entries=entries,
        ahead=ahead,
        revocations=revocations,
        app_id=app_id,
    )
    if mode == "aligned" and not force_unaligned:
        return _plan_aligned(at, done=done, max_records=max_records)
    if mode in ("unaligned", "aligned"):
        note = "alignment timeout: read unaligned" if force_unaligned else None
        return _plan_unaligned(
            at, latest=latest, limited_end=_limited(begin, latest, max_records), note=note
        )
    return _plan_at_least_once(at, end=_limited(begin, latest, max_records), done=done)


def _plan_at_least_once(
    at: _BatchStart, *, end: dict[TopicPartition, int], done: Sequence[IndexEntry]
) -> TopicCut:
    """Up to the read limit, past the barriers: the snapshots the range holds whole are
    the ones it covers."""
    covered = tuple(
        e.snapshot_id for e in done if all(e.positions[tp.partition] < end[tp] for tp in end)
    )
    return at.read_cut("at-least-once", end, snapshots=covered)


def _limited(
    begin: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_records: int | None,
) -> PartitionOffsets:
    """Each partition's end at its log end, the batch within ``max_records``
    (:func:`~spark_chkpt.offsets.allocate_limit`)."""
    capped = {tp: max(begin[tp], latest[tp]) for tp in sorted(latest)}
    if max_records is None:
        return capped
    return allocate_limit(begin, capped, max_records=max_records)


def _plan_aligned(
    at: _BatchStart, *, done: Sequence[IndexEntry], max_records: int | None
) -> TopicCut:
    """Every partition ends right after the barrier of the newest completed snapshot
    that keeps the batch within ``max_records`` (the first one read whole if it alone
    spans more); none completed: the batch reads nothing."""
    begin = at.begin
    partitions = sorted(begin)
    if not done:
        return TopicCut(topic=at.topic, mode="aligned", end=dict(begin), app_id=at.app_id)
    chosen, note = [done[0]], None
    for entry in done[1:]:
        span = sum(max(0, entry.positions[tp.partition] + 1 - begin[tp]) for tp in partitions)
        if max_records is not None and span > max_records:
            break
        chosen.append(entry)
    last = chosen[-1]
    # A partition already past the barrier (after an unaligned batch) reads nothing.
    end = {tp: max(begin[tp], last.positions[tp.partition] + 1) for tp in partitions}
    span = sum(end[tp] - begin[tp] for tp in partitions)
    if max_records is not None and span > max_records:
        note = (
            f"snapshot {last.snapshot_id} alone spans {span} offsets, more than "
            f"maxOffsetsPerTrigger={max_records}: read whole to keep the cut consistent"
        )
    return at.read_cut("aligned", end, snapshots=tuple(e.snapshot_id for e in chosen), note=note)


@dataclass(frozen=True)
class _BatchStart:
    """What one app's index says of a topic where its batch begins: the entries, those
    ahead of the start, the ``revoke`` entries, the app."""

    topic: str
    begin: Mapping[TopicPartition, int]
    entries: Sequence[IndexEntry]
    ahead: Sequence[IndexEntry]
    revocations: Sequence[IndexEntry]
    app_id: str | None

    def read_cut(
        self,
        mode: Literal["aligned", "unaligned", "at-least-once"],
        end: dict[TopicPartition, int],
        **cut: Any,
    ) -> TopicCut:
        """The cut of a mode that reads ``[begin, end)``: with the record filters of
        that mode, the barriers inside the range and the revoked offsets it skips, all
        derived from the range; ``cut`` holds the rest of the :class:`TopicCut`."""
        topic, begin, revocations = self.topic, self.begin, self.revocations
        return TopicCut(
            topic=topic,
            mode=mode,
            end=end,
            filters=record_filters(
                topic=topic,
                mode=mode,
                begin=begin,
                end=end,
                entries=self.entries,
                revocations=revocations,
            ),
            barriers=barriers_in(self.ahead, begin, end, topic),
            revoked=revoked_span(topic=topic, begin=begin, end=end, revocations=revocations),
            app_id=self.app_id,
            **cut,
        )


def _plan_unaligned(
    at: _BatchStart,
    *,
    latest: Mapping[TopicPartition, int],
    limited_end: Mapping[TopicPartition, int],
    note: str | None,
) -> TopicCut:
    """Each partition ends right after its newest barrier within the read limit. If no
    partition has a barrier within it, each reads up to its first barrier (a snapshot is
    read whole rather than not at all)."""
    begin, ahead = at.begin, at.ahead
    barriers: dict[TopicPartition, list[tuple[int, int]]] = {}
    for tp in sorted(latest):
        barriers[tp] = sorted(
            (e.positions[tp.partition], e.snapshot_id)
            for e in ahead
            if tp.partition in e.positions and begin[tp] <= e.positions[tp.partition] < latest[tp]
        )
    chosen = {
        tp: next((b for b in reversed(found) if b[0] < limited_end[tp]), None)
        for tp, found in barriers.items()
    }
    if all(b is None for b in chosen.values()):
        chosen = {tp: (found[0] if found else None) for tp, found in barriers.items()}
    end = {tp: (b[0] + 1 if b is not None else begin[tp]) for tp, b in chosen.items()}
    reached = _reached(chosen, end, begin, at.entries)
    covered = tuple(
        sorted(
            e.snapshot_id
            for e in ahead
            if all(
                tp.partition in e.positions and begin[tp] <= e.positions[tp.partition] < end[tp]
                for tp in end
            )
        )
    )
    return at.read_cut("unaligned", end, snapshots=covered, note=note, reached=reached)


def _reached(
    chosen: Mapping[TopicPartition, tuple[int, int] | None],
    end: Mapping[TopicPartition, int],
    begin: Mapping[TopicPartition, int],
    entries: Sequence[IndexEntry],
) -> dict[int, int]:
    """The snapshot each partition's unaligned read reaches: its chosen barrier's, or for
    a partition that stays where it is, the barrier it is already past."""
    reached = {tp.partition: b[1] for tp, b in chosen.items() if b is not None}
    for tp in end:
        passed = [
            (e.positions[tp.partition], e.snapshot_id)
            for e in entries
            if tp.partition in e.positions and e.positions[tp.partition] < begin[tp]
        ]
        if tp.partition not in reached and passed:
            reached[tp.partition] = max(passed)[1]
    return reached


def record_filters(
    *,
    topic: str,
    mode: AlignmentMode,
    begin: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    entries: Sequence[IndexEntry],
    revocations: Sequence[IndexEntry] = (),
) -> dict[TopicPartition, RecordFilter]:
    """The drop rule per partition of ``[begin, end)``, derived again from the index when
    Spark replans a batch from its offset log (so a replay filters the same way).

    aligned, unaligned: every tagged record in the range must be confirmed by a barrier
    (the range ends right after one on each partition);
    at-least-once: only those before the last known barrier (later ones are in flight; on
    a topic of several upstream apps, before the earliest of their last barriers).

    A partition added to the topic after the upstream's barrier producer last read its
    metadata gets its first barrier some snapshots later; its records before that barrier
    belong to those snapshots too. So on a partition an entry does not list, the entry's
    attempts are confirmed as well (an attempt in any entry was committed).

    Every mode but ``none`` also drops the records of revoked snapshots (``revocations``).
    """
    if mode == "none":
        return {}
    revoked_attempts = frozenset(a for r in revocations for a in r.attempts)
    ahead = entries_ahead(entries, begin, topic)
    confirmed = frozenset(a for e in ahead for a in e.attempts)
    # Entries that list every partition of the batch confirm nothing extra anywhere: only
    # the others are looked at per partition, and partitions they all list share one set.
    numbers = {tp.partition for tp in end}
    partial = [e for e in entries if not numbers <= e.positions.keys()]
    shared = confirmed - revoked_attempts
    filters = {}
    for tp, until in end.items():
        missing = frozenset(
            a for e in partial if tp.partition not in e.positions for a in e.attempts
        )
        filters[tp] = RecordFilter(
            confirmed=((confirmed | missing) - revoked_attempts) if missing else shared,
            confirm_until=_confirm_until(mode, tp, until, ahead),
            revoked=tuple(
                sorted(
                    found
                    for r in revocations
                    if (found := r.revoked_range(tp.partition)) is not None
                )
            ),
            revoked_attempts=revoked_attempts,
        )
    return filters


def _confirm_until(
    mode: AlignmentMode, tp: TopicPartition, until: int, ahead: Sequence[IndexEntry]
) -> int:
    """The offset below which ``tp``'s tagged records must be confirmed: the range's end
    (aligned, unaligned), or at-least-once the last barrier per upstream app, with
    several apps (fan-in) the earliest of them: after it, another app's snapshot may
    still be in flight."""
    if mode in ("aligned", "unaligned"):
        return until
    last: dict[str, int] = {}
    for e in ahead:
        pos = e.positions.get(tp.partition)
        if pos is not None and pos < until:
            last[e.app_id] = max(last.get(e.app_id, -1), pos)
    return min(last.values(), default=-1) + 1
