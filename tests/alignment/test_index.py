"""What the barrier index keeps as a query ages: after each batch a reader forgets the
entries no later batch needs (``needed_from``/``drop_before``), so planning and a restart
(which seeks to the same offset) stay flat with the number of snapshots, and the cuts
planned from what is kept are the cuts planned from everything. Pure: no Kafka."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.alignment.cut import plan_topic
from spark_chkpt.alignment.index import BarrierIndex
from spark_chkpt.offsets import TopicPartition

T = "mid"
P0, P1 = TopicPartition(T, 0), TopicPartition(T, 1)


def entry(
    snapshot: int, positions: Mapping[int, int], *, offset: int, generation: int = 0
) -> IndexEntry:
    return IndexEntry(
        kind="complete",
        app_id="A",
        snapshot_id=snapshot,
        topic=T,
        attempts=(f"A.{snapshot}.0.0",),
        positions=dict(positions),
        created_ms=0,
        generation=generation,
        offset=offset,
    )


def aged(snapshots: int) -> list[IndexEntry]:
    """Snapshot n: 9 records then its barrier on each partition (offset 10n + 9)."""
    return [entry(n, {0: 10 * n + 9, 1: 10 * n + 9}, offset=n) for n in range(snapshots)]


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "at-least-once"])
def test_an_aged_index_keeps_a_bounded_number_of_entries_and_plans_the_same_cuts(
    mode: str,
) -> None:
    entries = aged(600)
    full = BarrierIndex(data_topic=T, entries=entries)
    kept = BarrierIndex(data_topic=T)
    begin = {P0: 0, P1: 0}
    held = []
    read_to = 0
    for n in range(5, 600, 7):  # batches of 7 snapshots, the index growing as they come
        kept.add(entries[read_to:n])
        read_to = n
        latest = {P0: 10 * n, P1: 10 * n}
        full_cut = plan_topic(
            topic=T,
            mode=mode,  # type: ignore[arg-type]
            start=begin,
            latest=latest,
            entries=BarrierIndex(data_topic=T, entries=entries[:n]).complete(),
            max_records=None,
        )
        cut = plan_topic(
            topic=T,
            mode=mode,  # type: ignore[arg-type]
            start=begin,
            latest=latest,
            entries=kept.complete(),
            max_records=None,
        )
        assert (cut.end, cut.snapshots, cut.filters) == (
            full_cut.end,
            full_cut.snapshots,
            full_cut.filters,
        )
        start = kept.needed_from({tp.partition: o for tp, o in begin.items()})
        assert start is not None
        kept.drop_before(start)
        held.append(len(kept.entries))
        begin = dict(cut.end)
    assert len(full.entries) == 600
    assert max(held) <= 9  # the batch's snapshots and the one before them, never the past


def test_a_restart_from_the_offset_needed_plans_what_the_whole_index_plans() -> None:
    entries = aged(500)
    begin = {P0: 2_000, P1: 2_000}  # right after snapshot 199's barriers
    start = BarrierIndex(data_topic=T, entries=entries).needed_from({0: 2_000, 1: 2_000})
    assert start == 199  # the newest entry behind the reader, then those ahead
    restarted = BarrierIndex(data_topic=T, entries=entries[start:])
    latest = {P0: 2_100, P1: 2_100}
    for mode in ("aligned", "unaligned", "at-least-once"):
        cuts = [
            plan_topic(
                topic=T,
                mode=mode,  # type: ignore[arg-type]
                start=begin,
                latest=latest,
                entries=index.complete(),
                max_records=None,
            )
            for index in (BarrierIndex(data_topic=T, entries=entries), restarted)
        ]
        assert cuts[0] == cuts[1]


def test_a_revocation_is_kept_while_its_revoked_offsets_reach_the_reader() -> None:
    # Generation 0 wrote snapshots 0..6; a rewind to snapshot 5 revoked 6 (offsets
    # [60, 70) on each partition); generation 1 wrote 6 and 7 again after.
    old = aged(7)
    revoke = IndexEntry(
        kind="revoke",
        app_id="A",
        snapshot_id=5,
        topic=T,
        attempts=("A.6.0.0",),
        positions={0: 70, 1: 70},
        starts={0: 60, 1: 60},
        revoked=(6,),
        created_ms=0,
        generation=1,
        offset=7,
    )
    again = [entry(n, {0: 10 * n + 19, 1: 10 * n + 19}, offset=2 + n, generation=1) for n in (6, 7)]
    index = BarrierIndex(data_topic=T, entries=[*old, revoke, *again])
    # A reader at offset 65 (inside the revoked offsets) must still see the revocation:
    # it is the one check_not_passed refuses it with.
    assert index.needed_from({0: 65, 1: 65}) == 5
    assert 7 in [e.offset for e in index.entries[5:]]
    # Past the revoked offsets and every entry it revokes, it can go.
    assert index.needed_from({0: 80, 1: 80}) == 8
    # An entry written before it without an offset (not read from Kafka) keeps everything.
    assert (
        BarrierIndex(data_topic=T, entries=[replace(old[0], offset=None)]).needed_from(
            {0: 100, 1: 100}
        )
        == 0
    )


def test_entries_without_a_partition_stay_until_the_reader_passed_its_first_barrier() -> None:
    # Partition 1 was added after snapshot 4: snapshots 0..4 list partition 0 only; their
    # attempts confirm partition 1's records before its first barrier (snapshot 5's, 12).
    first = [entry(n, {0: 10 * n + 9}, offset=n) for n in range(5)]
    later = [entry(n, {0: 10 * n + 9, 1: 2 * n + 2}, offset=n) for n in range(5, 8)]
    index = BarrierIndex(data_topic=T, entries=[*first, *later])
    assert index.needed_from({0: 60, 1: 0}) == 0  # partition 1 not past its first barrier
    assert index.needed_from({0: 70, 1: 13}) == 5
    assert index.drop_before(5) == 5 and len(index.entries) == 3
    assert index.needed_from({0: 100, 1: 100}) == 7  # all behind: the newest stays
    assert BarrierIndex(data_topic=T).needed_from({0: 0}) is None
