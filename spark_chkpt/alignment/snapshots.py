"""What the barrier index says of a batch's range on one topic, pure: the snapshots
whose barriers every partition has reached, the entries ahead of the range, the barriers
in it, the revoked offsets it skips, and the revocations a reader must not have read
past. The cut (:mod:`spark_chkpt.alignment.cut`) and the fan-in plan
(:mod:`spark_chkpt.alignment.fanin`) read the index through these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spark_chkpt.alignment.aligner import Aligner
from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.errors import RevokedSnapshotError
from spark_chkpt.offsets import TopicPartition


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


def completed_below(
    ahead: Sequence[IndexEntry],
    begin: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> list[IndexEntry]:
    """The completed snapshots this batch may read: only those whose barriers are all
    below the log ends (the index can be newer than ``latest``, and
    Trigger.AvailableNow fixes ``latest``)."""
    partitions = sorted(latest)
    return [
        e
        for e in completed_snapshots(ahead, begin, partitions)
        if all(e.positions[tp.partition] < latest[tp] for tp in partitions)
    ]


def entries_ahead(
    entries: Sequence[IndexEntry], begin: Mapping[TopicPartition, int], topic: str
) -> list[IndexEntry]:
    """Entries with a barrier at or after ``begin`` on some partition: the snapshots whose
    records can be in a batch starting there."""
    first = {tp.partition: off for tp, off in begin.items() if tp.topic == topic}
    return [e for e in entries if any(pos >= first.get(p, 0) for p, pos in e.positions.items())]


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


def barriers_in(
    entries: Sequence[IndexEntry],
    begin: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    topic: str,
) -> int:
    """How many barriers of ``entries`` lie in ``[begin, end)``."""
    first = {tp.partition: off for tp, off in begin.items() if tp.topic == topic}
    last = {tp.partition: off for tp, off in end.items() if tp.topic == topic}
    return sum(
        1
        for e in entries
        for p, pos in e.positions.items()
        if first.get(p, 0) <= pos < last.get(p, 0)
    )
