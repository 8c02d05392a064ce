"""A partition added to a topic with barriers (issue 24, hole 3), in the planning logic:
pure, no Kafka.

A model of one upstream topic and the downstream planner: each upstream snapshot writes
10 records per partition, tagged with its attempt, then barriers (and an index entry)
on the partitions its barrier producer knows; the downstream plans each trigger with
:func:`plan_topic` (replanned filters from :func:`record_filters`, as Spark's replay of a
batch does) and reads each range as the fetcher does: a tagged record below the
filter's bound passes if the index or a barrier read so far in the range names its
attempt, else it is held until one does or the range ends (then dropped). Every record
of every committed snapshot must be read exactly once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.alignment.cut import AlignmentMode, RecordFilter, plan_topic, record_filters
from spark_chkpt.offsets import TopicPartition

T = "mid"


def tp(p: int) -> TopicPartition:
    return TopicPartition(T, p)


@dataclass
class Upstream:
    """The data topic's partitions (records as ("rec", attempt, id) or ("barrier",
    snapshot, attempts)) and the control topic's complete entries."""

    partitions: int
    logs: dict[int, list[tuple[object, ...]]] = field(default_factory=dict)
    entries: list[IndexEntry] = field(default_factory=list)
    ids: int = 0

    def __post_init__(self) -> None:
        self.logs = {p: [] for p in range(self.partitions)}

    def add_partition(self) -> None:
        self.logs[self.partitions] = []
        self.partitions += 1

    def snapshot(self, snapshot: int, *, barriers_on: int) -> None:
        """Write tasks (fresh producers) write to every partition; the barrier producer
        writes barriers on its first ``barriers_on`` partitions only."""
        attempt = f"t-{snapshot}-0"
        for p in range(self.partitions):
            for _ in range(10):
                self.logs[p].append(("rec", attempt, self.ids))
                self.ids += 1
        positions = {}
        for p in range(barriers_on):
            positions[p] = len(self.logs[p])
            self.logs[p].append(("barrier", snapshot, (attempt,)))
        self.entries.append(
            IndexEntry(
                kind="complete",
                app_id="up",
                snapshot_id=snapshot,
                topic=T,
                attempts=(attempt,),
                positions=positions,
                created_ms=0,
            )
        )

    def latest(self, partitions: int) -> dict[TopicPartition, int]:
        return {tp(p): len(self.logs[p]) for p in range(partitions)}


def read(
    log: list[tuple[object, ...]], begin: int, end: int, rule: RecordFilter | None
) -> list[int]:
    """One read task's range, as the fetcher filters it."""
    confirmed = rule.confirmed if rule is not None else frozenset()
    until = rule.confirm_until if rule is not None else -1
    seen: set[object] = set()
    held: list[tuple[int, tuple[object, ...]]] = []
    out: list[int] = []

    def unconfirmed(offset: int, record: tuple[object, ...]) -> bool:
        return offset < until and record[1] not in confirmed and record[1] not in seen

    def release() -> None:
        for offset, record in held:
            if not unconfirmed(offset, record):
                out.append(int(record[2]))  # type: ignore[call-overload]
        held.clear()

    for offset in range(begin, end):
        record = log[offset]
        if record[0] == "barrier":
            seen.update(record[2])  # type: ignore[arg-type]
            release()
            continue
        if held or unconfirmed(offset, record):
            held.append((offset, record))
        else:
            out.append(int(record[2]))  # type: ignore[call-overload]
    release()
    return out


@dataclass
class Downstream:
    mode: AlignmentMode
    force_unaligned: bool = False
    start: dict[TopicPartition, int] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)

    def trigger(self, up: Upstream, *, listed: int) -> None:
        """One batch, the topic's metadata listing ``listed`` partitions; new partitions
        start at their earliest offset (0), as the planner starts them."""
        latest = up.latest(listed)
        begin = {t: self.start.get(t, 0) for t in latest}
        cut = plan_topic(
            topic=T,
            mode=self.mode,
            start=begin,
            latest=latest,
            entries=up.entries,
            max_records=None,
            force_unaligned=self.force_unaligned,
        )
        # The read tasks' filters, derived again from the offsets (a replay's path).
        filters = record_filters(
            topic=T, mode=cut.mode, begin=begin, end=cut.end, entries=up.entries
        )
        if not cut.waiting:  # a waiting cut reads nothing and has no filters
            assert filters == cut.filters
        for t, until in cut.end.items():
            self.ids += read(up.logs[t.partition], begin[t], until, filters.get(t))
        self.start = dict(cut.end)


def committed_ids(up: Upstream) -> list[int]:
    """The ids of records every snapshot up to the last one that has barriers on every
    partition; the partitions' logs end with it."""
    return sorted(int(r[2]) for log in up.logs.values() for r in log if r[0] == "rec")  # type: ignore[call-overload]


def run(
    mode: AlignmentMode, *, force_unaligned: bool = False, listed_late: bool = False
) -> tuple[list[int], list[int]]:
    """Two partitions; snapshot 0; a third partition is added; snapshots 1 and 2 are
    committed by a barrier producer whose metadata still lists two partitions (the cached
    one, ``metadata.max.age.ms``), snapshot 3 by one that lists three. The downstream
    plans after each snapshot (``listed_late``: its metadata lists the new partition
    one trigger late), and twice at the end."""
    up = Upstream(partitions=2)
    down = Downstream(mode=mode, force_unaligned=force_unaligned)
    up.snapshot(0, barriers_on=2)
    down.trigger(up, listed=2)
    up.add_partition()
    for snapshot, known in ((1, 2), (2, 2), (3, 3)):
        up.snapshot(snapshot, barriers_on=known)
        down.trigger(up, listed=2 if listed_late and snapshot == 1 else 3)
    down.trigger(up, listed=3)
    down.trigger(up, listed=3)
    return sorted(down.ids), committed_ids(up)


@pytest.mark.parametrize(
    ("mode", "force_unaligned", "listed_late"),
    [
        ("unaligned", False, False),
        ("aligned", True, False),  # alignmentTimeout expired: read unaligned
        ("aligned", False, False),
        ("aligned", False, True),  # the new partition listed one trigger late
    ],
    ids=["unaligned", "aligned-timeout", "aligned", "aligned-listed-late"],
)
def test_records_of_a_new_partition_are_read_once_when_barriers_reach_it_late(
    mode: AlignmentMode, force_unaligned: bool, listed_late: bool
) -> None:
    read_ids, committed = run(mode, force_unaligned=force_unaligned, listed_late=listed_late)
    missing = sorted(set(committed) - set(read_ids))
    assert not missing, f"{len(missing)} of {len(committed)} records lost: {missing}"
    assert read_ids == committed  # once each


def test_barriers_on_every_partition_after_it_is_added() -> None:
    """With the committer's fix (barriers on every partition a task wrote to) every
    entry after the add lists the new partition; every mode reads each record once."""
    for mode, force in (("unaligned", False), ("aligned", True), ("aligned", False)):
        up = Upstream(partitions=2)
        down = Downstream(mode=mode, force_unaligned=force)  # type: ignore[arg-type]
        up.snapshot(0, barriers_on=2)
        down.trigger(up, listed=2)
        up.add_partition()
        for snapshot in (1, 2, 3):
            up.snapshot(snapshot, barriers_on=3)
            down.trigger(up, listed=2 if snapshot == 1 else 3)
        down.trigger(up, listed=3)
        assert sorted(down.ids) == committed_ids(up), mode


def test_a_partition_no_entry_lists_confirms_the_attempts_of_every_entry() -> None:
    """The rule itself: on a partition an entry does not list, its attempts are
    confirmed (its records there lie before the partition's first barrier)."""
    entries = [
        IndexEntry(kind="complete", app_id="up", snapshot_id=1, topic=T, attempts=("a1",),
                   positions={0: 10, 1: 10}, created_ms=0),
        IndexEntry(kind="complete", app_id="up", snapshot_id=2, topic=T, attempts=("a2",),
                   positions={0: 21, 1: 21, 2: 20}, created_ms=0),
    ]  # fmt: skip
    filters: Mapping[TopicPartition, RecordFilter] = record_filters(
        topic=T,
        mode="unaligned",
        begin={tp(0): 11, tp(1): 11, tp(2): 0},
        end={tp(0): 22, tp(1): 22, tp(2): 21},
        entries=entries,
    )
    assert filters[tp(2)].confirmed == frozenset({"a1", "a2"})
    assert filters[tp(0)].confirmed == frozenset({"a2"})
