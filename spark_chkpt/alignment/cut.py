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

from spark_chkpt.alignment.aligner import Aligner
from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.errors import AlignmentError, RevokedSnapshotError
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


def completed_snapshots(
    entries: Sequence[IndexEntry],
    start: Mapping[TopicPartition, int],
    partitions: Sequence[TopicPartition],
) -> list[IndexEntry]:
    """Entries whose barrier every partition has reached by the end of its log, in
    snapshot order, as the aligner completes them. A partition whose barrier lies before
    ``start`` (an unaligned batch took it further than the others) has delivered it
    already; an entry must still have a barrier at or after ``start`` somewhere.

    The aligner's state machine for this case (every partition's barriers in snapshot
    order, no channel ending, no records) run inline: a barrier newer than the pending
    snapshot subsumes it, an older or equal one of a finished snapshot is stale, and the
    pending snapshot completes once every partition has brought its barrier. Fed to
    :class:`Aligner` barrier by barrier, 1,000 partitions cost ~40 ms per batch."""
    Aligner(channels=partitions, mode="at-least-once")  # the aligner's argument checks
    channels = set(partitions)
    first = {tp: start.get(tp, 0) for tp in channels}
    by_id: dict[int, IndexEntry] = {}
    done: list[IndexEntry] = []
    latest = -1  # the highest snapshot begun (barriers up to it are stale once it ends)
    pending: int | None = None
    arrived: set[TopicPartition] = set()
    for entry in sorted(entries, key=lambda e: e.snapshot_id):
        by_id[entry.snapshot_id] = entry
        positions = entry.positions
        if not any(positions.get(tp.partition, -1) >= first[tp] for tp in partitions):
            continue
        snapshot = entry.snapshot_id
        for tp in partitions:
            if positions.get(tp.partition) is None:
                continue
            if pending is None or snapshot > pending:
                if pending is None and snapshot <= latest:
                    continue  # trailing barrier of a finished snapshot
                pending, arrived, latest = snapshot, {tp}, snapshot  # begins (subsumes)
            elif snapshot == pending:
                arrived.add(tp)
            else:
                continue  # older than the pending one
            if len(arrived) == len(channels):
                done.append(by_id[pending])
                pending, arrived = None, set()
    return done


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

    def limited(target: Mapping[TopicPartition, int]) -> PartitionOffsets:
        capped = {tp: max(begin[tp], min(target[tp], latest[tp])) for tp in partitions}
        if max_records is None:
            return capped
        return allocate_limit(begin, capped, max_records=max_records)

    if mode == "none":
        return TopicCut(topic=topic, mode="none", end=limited(latest))
    app_id, entries = _app_entries(topic, entries)
    ahead = entries_ahead(entries, begin, topic)
    # Only snapshots whose barriers are all below the log ends this batch may read (the
    # index can be newer than ``latest``, and Trigger.AvailableNow fixes ``latest``).
    done = [
        e
        for e in completed_snapshots(ahead, begin, partitions)
        if all(e.positions[tp.partition] < latest[tp] for tp in partitions)
    ]

    if mode == "aligned" and not force_unaligned:
        if not done:
            return TopicCut(topic=topic, mode="aligned", end=dict(begin), app_id=app_id)
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
        return _read_cut(
            topic=topic,
            mode="aligned",
            begin=begin,
            end=end,
            entries=entries,
            ahead=ahead,
            revocations=revocations,
            app_id=app_id,
            snapshots=tuple(e.snapshot_id for e in chosen),
            note=note,
        )

    if mode in ("unaligned", "aligned"):
        return _plan_unaligned(
            topic=topic,
            begin=begin,
            latest=latest,
            limited_end=limited(latest),
            entries=entries,
            ahead=ahead,
            app_id=app_id,
            note="alignment timeout: read unaligned" if force_unaligned else None,
            revocations=revocations,
        )

    end = limited(latest)
    covered = tuple(
        e.snapshot_id for e in done if all(e.positions[tp.partition] < end[tp] for tp in partitions)
    )
    return _read_cut(
        topic=topic,
        mode="at-least-once",
        begin=begin,
        end=end,
        entries=entries,
        ahead=ahead,
        revocations=revocations,
        app_id=app_id,
        snapshots=covered,
    )


def _read_cut(
    *,
    topic: str,
    mode: Literal["aligned", "unaligned", "at-least-once"],
    begin: Mapping[TopicPartition, int],
    end: dict[TopicPartition, int],
    entries: Sequence[IndexEntry],
    ahead: Sequence[IndexEntry],
    revocations: Sequence[IndexEntry],
    **cut: Any,
) -> TopicCut:
    """The cut of a mode that reads ``[begin, end)``: with the record filters of that
    mode, the barriers inside the range and the revoked offsets it skips, all derived
    from the range; ``cut`` holds the rest of the :class:`TopicCut`."""
    return TopicCut(
        topic=topic,
        mode=mode,
        end=end,
        filters=record_filters(
            topic=topic, mode=mode, begin=begin, end=end, entries=entries, revocations=revocations
        ),
        barriers=_barriers(ahead, begin, end, topic),
        revoked=revoked_span(topic=topic, begin=begin, end=end, revocations=revocations),
        **cut,
    )


def _plan_unaligned(
    *,
    topic: str,
    begin: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    limited_end: Mapping[TopicPartition, int],
    entries: Sequence[IndexEntry],
    ahead: Sequence[IndexEntry],
    app_id: str | None,
    note: str | None,
    revocations: Sequence[IndexEntry] = (),
) -> TopicCut:
    """Each partition ends right after its newest barrier within the read limit. If no
    partition has a barrier within it, each reads up to its first barrier (a snapshot is
    read whole rather than not at all)."""
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
    reached = {tp.partition: b[1] for tp, b in chosen.items() if b is not None}
    for tp in end:  # a partition that stays where it is: the barrier it is already past
        passed = [
            (e.positions[tp.partition], e.snapshot_id)
            for e in entries
            if tp.partition in e.positions and e.positions[tp.partition] < begin[tp]
        ]
        if tp.partition not in reached and passed:
            reached[tp.partition] = max(passed)[1]
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
    return _read_cut(
        topic=topic,
        mode="unaligned",
        begin=begin,
        end=end,
        entries=entries,
        ahead=ahead,
        revocations=revocations,
        app_id=app_id,
        snapshots=covered,
        note=note,
        reached=reached,
    )


def entries_ahead(
    entries: Sequence[IndexEntry], begin: Mapping[TopicPartition, int], topic: str
) -> list[IndexEntry]:
    """Entries with a barrier at or after ``begin`` on some partition: the snapshots whose
    records can be in a batch starting there."""
    first = {tp.partition: off for tp, off in begin.items() if tp.topic == topic}
    return [e for e in entries if any(pos >= first.get(p, 0) for p, pos in e.positions.items())]


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
        if mode in ("aligned", "unaligned"):
            bound = until
        else:
            # Per upstream app its last barrier; with several apps (fan-in) the earliest
            # of them: after it, another app's snapshot may still be in flight.
            last: dict[str, int] = {}
            for e in ahead:
                pos = e.positions.get(tp.partition)
                if pos is not None and pos < until:
                    last[e.app_id] = max(last.get(e.app_id, -1), pos)
            bound = min(last.values(), default=-1) + 1
        filters[tp] = RecordFilter(
            confirmed=((confirmed | missing) - revoked_attempts) if missing else shared,
            confirm_until=bound,
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


def revoked_span(
    *,
    topic: str,
    begin: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    revocations: Sequence[IndexEntry],
) -> int:
    """How many offsets of ``[begin, end)`` lie in revoked ranges (records and barriers of
    revoked snapshots, and unconfirmed records among them: all skipped)."""
    total = 0
    for tp, until in end.items():
        for r in revocations:
            found = r.revoked_range(tp.partition) if tp.topic == topic else None
            if found is not None:
                total += max(0, min(until, found[1]) - max(begin.get(tp, 0), found[0]))
    return total


def check_not_passed(
    *, topic: str, begin: Mapping[TopicPartition, int], revocations: Sequence[IndexEntry]
) -> None:
    """Refuse a batch that starts inside offsets a revocation revoked: the reader already
    read records of revoked snapshots (it was not restored with the upstream query), and
    going on would mix the revoked timeline with the one written again after it. A
    reader that starts at or before the revoked offsets skips them; one past their end
    read through them after the revocation (it can only get there that way)."""
    for r in revocations:
        if not r.revoked:
            continue
        for tp, at in sorted(begin.items()):
            found = r.revoked_range(tp.partition)
            if found is None or not found[0] < at <= found[1]:
                continue
            raise RevokedSnapshotError(
                f"chkpt-kafka: topic {topic} partition {tp.partition}: this reader already "
                f"read to offset {at}, past snapshot {r.snapshot_id} of upstream app "
                f"{r.app_id} into offsets [{found[0]}, {found[1]}) that a savepoint rewind "
                f"of that query revoked (revocation at control-topic offset {r.offset}, "
                f"generation {r.generation}, revoked snapshots "
                f"{', '.join(str(s) for s in r.revoked)}). Its output holds records of a "
                "timeline that no longer exists, and the upstream query writes those "
                "snapshots again: going on would mix both. Restore this query too, from a "
                f"savepoint at the cut that ends at barrier {r.snapshot_id} of app "
                f"{r.app_id} or earlier (a pipeline savepoint restores both together), or "
                "start it on a new checkpoint reading from the start."
            )


def _barriers(
    entries: Sequence[IndexEntry],
    begin: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    topic: str,
) -> int:
    first = {tp.partition: off for tp, off in begin.items() if tp.topic == topic}
    last = {tp.partition: off for tp, off in end.items() if tp.topic == topic}
    return sum(
        1
        for e in entries
        for p, pos in e.positions.items()
        if first.get(p, 0) <= pos < last.get(p, 0)
    )
