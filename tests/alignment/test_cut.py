"""Planning a batch's end on a topic with barriers (spark_chkpt.alignment.cut): pure, no Kafka."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.alignment.cut import (
    AlignmentError,
    RecordFilter,
    TopicCut,
    plan_topic,
    record_filters,
)
from spark_chkpt.alignment.snapshots import completed_snapshots, entries_ahead
from spark_chkpt.errors import ChkptError
from spark_chkpt.offsets import TopicPartition

T = "events"
P0, P1 = TopicPartition(T, 0), TopicPartition(T, 1)
ZERO = {P0: 0, P1: 0}
LATEST = {P0: 100, P1: 100}


def entry(
    snapshot: int,
    positions: Mapping[int, int],
    *,
    attempts: Sequence[str] | None = None,
    app: str = "up",
) -> IndexEntry:
    return IndexEntry(
        kind="complete",
        app_id=app,
        snapshot_id=snapshot,
        topic=T,
        attempts=tuple(attempts if attempts is not None else (f"t-{snapshot}-0",)),
        positions=dict(positions),
        created_ms=0,
    )


# Snapshot 0 spans 10 + 5 offsets, snapshot 1 another 10 + 10, snapshot 2 another 10 + 10.
THREE = [entry(0, {0: 9, 1: 4}), entry(1, {0: 19, 1: 14}), entry(2, {0: 29, 1: 24})]


def plan(
    mode: str = "aligned",
    *,
    start: Mapping[TopicPartition, int] = ZERO,
    latest: Mapping[TopicPartition, int] = LATEST,
    entries: Sequence[IndexEntry] = THREE,
    max_records: int | None = None,
    force_unaligned: bool = False,
) -> TopicCut:
    return plan_topic(
        topic=T,
        mode=mode,  # type: ignore[arg-type]
        start=start,
        latest=latest,
        entries=entries,
        max_records=max_records,
        force_unaligned=force_unaligned,
    )


# -- aligned ---------------------------------------------------------------------------------


def test_aligned_ends_right_after_the_newest_complete_snapshot() -> None:
    cut = plan()
    assert cut.mode == "aligned"
    assert cut.end == {P0: 30, P1: 25}
    assert cut.snapshots == (0, 1, 2)
    assert cut.barriers == 6
    assert cut.app_id == "up"
    assert cut.note is None
    assert not cut.waiting


def test_aligned_order_of_entries_does_not_matter() -> None:
    assert plan(entries=list(reversed(THREE))) == plan()


def test_aligned_filters_confirm_everything_up_to_the_end() -> None:
    cut = plan()
    confirmed = frozenset({"t-0-0", "t-1-0", "t-2-0"})
    assert cut.filters == {
        P0: RecordFilter(confirmed=confirmed, confirm_until=30),
        P1: RecordFilter(confirmed=confirmed, confirm_until=25),
    }


def test_aligned_respects_max_records_across_snapshots() -> None:
    # snapshot 0 spans 15, 0..1 span 35, 0..2 span 55.
    cut = plan(max_records=40)
    assert cut.snapshots == (0, 1)
    assert cut.end == {P0: 20, P1: 15}
    assert cut.barriers == 4
    assert cut.note is None
    assert plan(max_records=35).snapshots == (0, 1)
    assert plan(max_records=34).snapshots == (0,)
    assert plan(max_records=55).snapshots == (0, 1, 2)


def test_aligned_reads_a_single_oversized_snapshot_whole() -> None:
    cut = plan(max_records=10)
    assert cut.snapshots == (0,)
    assert cut.end == {P0: 10, P1: 5}
    assert cut.note is not None
    assert "snapshot 0 alone spans 15" in cut.note
    assert "maxOffsetsPerTrigger=10" in cut.note


def test_aligned_oversized_later_snapshot_after_start() -> None:
    cut = plan(start={P0: 10, P1: 5}, max_records=3)
    assert cut.snapshots == (1,)
    assert cut.end == {P0: 20, P1: 15}
    assert cut.note is not None and "snapshot 1 alone spans 20" in cut.note


def test_aligned_waits_without_any_snapshot() -> None:
    cut = plan(entries=[])
    assert cut.waiting
    assert cut.end == ZERO
    assert cut.snapshots == ()
    assert cut.filters == {}
    assert cut.app_id is None


def test_aligned_waits_when_a_snapshot_misses_a_partition() -> None:
    cut = plan(entries=[entry(0, {0: 9})])
    assert cut.waiting
    assert cut.end == ZERO
    assert cut.barriers == 0


def test_aligned_completes_a_snapshot_a_partition_already_passed() -> None:
    # Partition 0 is past snapshot 0's barrier (an unaligned batch took it further):
    # it has delivered that barrier, so the batch reads partition 1 up to its barrier
    # and the cut is consistent again.
    start = {P0: 10, P1: 0}
    cut = plan(start=start, entries=[entry(0, {0: 9, 1: 4})])
    assert not cut.waiting
    assert cut.snapshots == (0,)
    assert cut.end == {P0: 10, P1: 5}


def test_aligned_cut_from_a_start_past_some_barriers() -> None:
    cut = plan(start={P0: 10, P1: 0})
    assert cut.snapshots == (0, 1, 2)
    assert cut.end == {P0: 30, P1: 25}
    # With a limit: snapshot 0 costs nothing on partition 0, 5 on partition 1.
    cut = plan(start={P0: 10, P1: 0}, max_records=5)
    assert cut.snapshots == (0,)
    assert cut.end == {P0: 10, P1: 5}


def test_aligned_skips_an_incomplete_snapshot_before_a_complete_one() -> None:
    entries = [entry(0, {0: 9}), entry(1, {0: 19, 1: 14})]
    cut = plan(entries=entries)
    assert cut.snapshots == (1,)
    assert cut.end == {P0: 20, P1: 15}


def test_consumed_barriers_are_not_candidates() -> None:
    cut = plan(start={P0: 20, P1: 15})
    assert cut.snapshots == (2,)
    assert cut.end == {P0: 30, P1: 25}
    assert cut.barriers == 2
    # Only snapshot 2's attempts can be in [20, 30) and [15, 25).
    assert cut.filters[P0].confirmed == frozenset({"t-2-0"})


def test_all_snapshots_consumed_waits() -> None:
    start = {P0: 30, P1: 25}
    cut = plan(start=start)
    assert cut.waiting
    assert cut.end == start


def test_new_partition_starts_at_latest() -> None:
    # A partition missing from start begins at latest: its older barriers are behind it,
    # delivered; partition 0 reads on to the newest snapshot.
    cut = plan(start={P0: 0}, latest={P0: 100, P1: 30})
    assert cut.snapshots == (0, 1, 2)
    assert cut.end == {P0: 30, P1: 30}


def test_aligned_never_ends_beyond_latest() -> None:
    # The index was read after the log ends (or latest is Trigger.AvailableNow's bound):
    # snapshot 2's barrier on partition 0 is past latest.
    latest = {P0: 25, P1: 25}
    cut = plan(latest=latest)
    assert all(cut.end[tp] <= latest[tp] for tp in latest)
    assert cut.snapshots == (0, 1)
    assert cut.end == {P0: 20, P1: 15}


# -- unaligned -------------------------------------------------------------------------------


def test_unaligned_ends_each_partition_after_its_own_newest_barrier() -> None:
    # Snapshot 2's barrier on partition 1 is not in the log yet (24 >= latest 20):
    # aligned stops both partitions at snapshot 1; unaligned takes partition 0 on to 2.
    latest = {P0: 35, P1: 20}
    assert plan(latest=latest).end == {P0: 20, P1: 15}
    cut = plan("unaligned", latest=latest)
    assert cut.mode == "unaligned" and not cut.waiting
    assert cut.end == {P0: 30, P1: 15}
    assert cut.reached == {0: 2, 1: 1}
    assert cut.snapshots == (0, 1)  # complete on every partition within the cut
    confirmed = frozenset({"t-0-0", "t-1-0", "t-2-0"})
    # Every tagged record in the range must be confirmed: nothing in flight is read.
    assert cut.filters == {
        P0: RecordFilter(confirmed=confirmed, confirm_until=30),
        P1: RecordFilter(confirmed=confirmed, confirm_until=15),
    }


def test_unaligned_respects_the_limit_per_partition() -> None:
    cut = plan("unaligned", max_records=40)
    # The limit's share is 20 per partition: barriers 19 and 14 fit, 29 and 24 do not.
    assert cut.end == {P0: 20, P1: 15}
    assert cut.reached == {0: 1, 1: 1}


def test_unaligned_reads_a_first_snapshot_whole_beyond_the_limit() -> None:
    cut = plan("unaligned", max_records=4)
    assert cut.end == {P0: 10, P1: 5}
    assert cut.reached == {0: 0, 1: 0}


def test_unaligned_without_barriers_reads_nothing() -> None:
    cut = plan("unaligned", entries=[])
    assert cut.end == ZERO
    assert cut.reached == {}


def test_force_unaligned_falls_back_to_unaligned_not_at_least_once() -> None:
    # Snapshot 0 misses partition 1: aligned waits; the timeout reads partition 0 up to
    # its barrier and nothing unconfirmed.
    cut = plan(entries=[entry(0, {0: 9})], force_unaligned=True)
    assert cut.mode == "unaligned"
    assert not cut.waiting
    assert cut.end == {P0: 10, P1: 0}
    assert cut.note is not None and "alignment timeout" in cut.note
    assert cut.snapshots == ()
    assert cut.reached == {0: 0}
    assert cut.barriers == 1
    assert cut.filters[P0] == RecordFilter(confirmed=frozenset({"t-0-0"}), confirm_until=10)
    assert cut.filters[P1] == RecordFilter(confirmed=frozenset({"t-0-0"}), confirm_until=0)


# -- unaligned -------------------------------------------------------------------------------


def test_at_least_once_filters_stop_after_the_last_barrier() -> None:
    cut = plan("at-least-once")
    assert cut.mode == "at-least-once"
    assert cut.note is None
    assert cut.end == LATEST
    assert cut.snapshots == (0, 1, 2)
    assert cut.barriers == 6
    confirmed = frozenset({"t-0-0", "t-1-0", "t-2-0"})
    assert cut.filters == {
        P0: RecordFilter(confirmed=confirmed, confirm_until=30),
        P1: RecordFilter(confirmed=confirmed, confirm_until=25),
    }


def test_at_least_once_is_limited_and_filters_below_the_limited_end() -> None:
    cut = plan("at-least-once", max_records=40)
    assert cut.end == {P0: 20, P1: 20}
    # Last barrier below 20: 19 on partition 0, 14 on partition 1 (24 is past the end).
    assert cut.filters[P0].confirm_until == 20
    assert cut.filters[P1].confirm_until == 15
    assert cut.filters[P0].confirmed == frozenset({"t-0-0", "t-1-0", "t-2-0"})
    assert cut.snapshots == (0, 1)
    assert cut.barriers == 4


def test_at_least_once_without_barriers_filters_nothing() -> None:
    cut = plan("at-least-once", entries=[])
    assert cut.end == LATEST
    assert cut.filters == {
        P0: RecordFilter(confirmed=frozenset(), confirm_until=0),
        P1: RecordFilter(confirmed=frozenset(), confirm_until=0),
    }
    assert cut.snapshots == ()


def test_at_least_once_confirmed_set_holds_only_entries_ahead() -> None:
    cut = plan("at-least-once", start={P0: 20, P1: 15})
    assert cut.filters[P0].confirmed == frozenset({"t-2-0"})
    assert cut.snapshots == (2,)
    assert cut.barriers == 2


# -- none ------------------------------------------------------------------------------------


def test_none_returns_latest_without_filters() -> None:
    cut = plan("none")
    assert cut == TopicCut(topic=T, mode="none", end=LATEST)
    assert cut.filters == {}
    assert cut.snapshots == ()
    assert cut.barriers == 0
    assert not cut.waiting


def test_none_is_limited() -> None:
    cut = plan("none", max_records=40)
    assert cut.end == {P0: 20, P1: 20}


def test_none_ignores_several_apps() -> None:
    entries = [entry(0, {0: 9, 1: 4}, app="a"), entry(0, {0: 19, 1: 14}, app="b")]
    assert plan("none", entries=entries).end == LATEST


# -- replay ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "start", "max_records"),
    [
        ("aligned", ZERO, None),
        ("aligned", ZERO, 40),
        ("aligned", ZERO, 10),
        ("aligned", {P0: 20, P1: 15}, None),
        ("unaligned", ZERO, None),
        ("unaligned", ZERO, 40),
        ("unaligned", {P0: 10, P1: 0}, 7),
        ("at-least-once", ZERO, None),
        ("at-least-once", ZERO, 40),
        ("at-least-once", {P0: 10, P1: 0}, 7),
        ("none", ZERO, None),
    ],
)
def test_replay_filters_match_the_plan(
    mode: str, start: dict[TopicPartition, int], max_records: int | None
) -> None:
    cut = plan(mode, start=start, max_records=max_records)
    replayed = record_filters(
        topic=T,
        mode=cut.mode,
        begin=start,
        end=cut.end,
        entries=THREE,
    )
    assert replayed == cut.filters


# -- two apps, helpers -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["aligned", "unaligned", "at-least-once"])
def test_two_apps_in_one_topic_are_an_error(mode: str) -> None:
    entries = [entry(0, {0: 9, 1: 4}, app="up-a"), entry(0, {0: 19, 1: 14}, app="up-b")]
    with pytest.raises(AlignmentError, match="up-a, up-b") as info:
        plan(mode, entries=entries)
    assert T in str(info.value)
    assert "alignment=none" in str(info.value)
    assert isinstance(info.value, ChkptError)


def test_entries_ahead() -> None:
    begin = {P0: 20, P1: 10}
    ahead = entries_ahead(THREE, begin, T)
    # Snapshot 0 lies wholly behind; snapshot 1 is behind on partition 0 but ahead on 1.
    assert [e.snapshot_id for e in ahead] == [1, 2]


def test_completed_snapshots_in_snapshot_order() -> None:
    entries = [entry(3, {0: 29, 1: 24}), entry(1, {0: 9}), entry(2, {0: 19, 1: 14})]
    done = completed_snapshots(entries, ZERO, [P0, P1])
    assert [e.snapshot_id for e in done] == [2, 3]


def test_completed_snapshots_need_barriers_at_or_after_start() -> None:
    done = completed_snapshots(THREE, {P0: 19, P1: 14}, [P0, P1])
    assert [e.snapshot_id for e in done] == [1, 2]


# -- property --------------------------------------------------------------------------------


@st.composite
def histories(
    draw: st.DrawFn,
) -> tuple[list[TopicPartition], list[IndexEntry], int, dict[TopicPartition, int]]:
    """Snapshots with strictly increasing barrier positions per partition, and the index
    of the snapshot right after whose barriers the batch starts (-1: before the first)."""
    n_parts = draw(st.integers(1, 4))
    n_snaps = draw(st.integers(0, 6))
    tps = [TopicPartition(T, p) for p in range(n_parts)]
    base = {tp: draw(st.integers(0, 50)) for tp in tps}
    ids = sorted(draw(st.sets(st.integers(0, 1000), min_size=n_snaps, max_size=n_snaps)))
    pos = {tp: base[tp] - 1 for tp in tps}
    entries = []
    for sid in ids:
        for tp in tps:
            pos[tp] += draw(st.integers(1, 30))
        entries.append(entry(sid, {tp.partition: pos[tp] for tp in tps}))
    latest = {tp: pos[tp] + 1 + draw(st.integers(0, 20)) for tp in tps}
    k = draw(st.integers(-1, n_snaps - 1))
    entries = draw(st.permutations(entries))
    return tps, entries, k, latest


@given(histories(), st.one_of(st.none(), st.integers(1, 200)))
def test_aligned_end_is_always_right_after_a_snapshot(
    history: tuple[list[TopicPartition], list[IndexEntry], int, dict[TopicPartition, int]],
    max_records: int | None,
) -> None:
    tps, entries, k, latest = history
    ordered = sorted(entries, key=lambda e: e.snapshot_id)
    if k < 0:
        start = {tp: min([0, *(e.positions[tp.partition] for e in ordered)]) for tp in tps}
    else:
        start = {tp: ordered[k].positions[tp.partition] + 1 for tp in tps}
    cut = plan_topic(
        topic=T,
        mode="aligned",
        start=start,
        latest=latest,
        entries=entries,
        max_records=max_records,
    )
    candidates = ordered[k + 1 :]
    assert all(start[tp] <= cut.end[tp] <= latest[tp] for tp in tps)
    if not candidates:
        assert cut.waiting
        assert cut.end == start
        return
    assert not cut.waiting
    by_id = {e.snapshot_id: e for e in ordered}
    last = by_id[cut.snapshots[-1]]
    assert cut.end == {tp: last.positions[tp.partition] + 1 for tp in tps}
    assert cut.snapshots == tuple(e.snapshot_id for e in candidates[: len(cut.snapshots)])
    assert cut.barriers == len(cut.snapshots) * len(tps)
    span = sum(cut.end[tp] - start[tp] for tp in tps)
    if max_records is None:
        assert cut.snapshots[-1] == candidates[-1].snapshot_id
        assert cut.note is None
        return
    if len(cut.snapshots) > 1:
        assert span <= max_records
    assert (cut.note is not None) == (span > max_records)
    if len(cut.snapshots) < len(candidates):
        after = candidates[len(cut.snapshots)]
        assert sum(after.positions[tp.partition] + 1 - start[tp] for tp in tps) > max_records
    assert record_filters(
        topic=T, mode="aligned", begin=start, end=cut.end, entries=entries
    ) == dict(cut.filters)


def _completed_by_the_aligner(
    entries: Sequence[IndexEntry],
    start: Mapping[TopicPartition, int],
    partitions: Sequence[TopicPartition],
) -> list[IndexEntry]:
    """completed_snapshots as it was written before it ran the aligner's states inline:
    every barrier through :class:`Aligner` (the reference)."""
    from spark_chkpt.alignment.aligner import Aligner, SnapshotCompleted

    aligner: Aligner[None] = Aligner(channels=partitions, mode="at-least-once")
    by_id = {}
    done: list[IndexEntry] = []
    for entry in sorted(entries, key=lambda e: e.snapshot_id):
        by_id[entry.snapshot_id] = entry
        events = []
        if not any(entry.positions.get(tp.partition, -1) >= start.get(tp, 0) for tp in partitions):
            continue
        for tp in partitions:
            if entry.positions.get(tp.partition) is not None:
                events += aligner.on_barrier(channel=tp, snapshot_id=entry.snapshot_id)
        done += [by_id[e.snapshot_id] for e in events if isinstance(e, SnapshotCompleted)]
    return done


@given(
    parts=st.integers(min_value=1, max_value=4),
    snapshots=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=5),  # snapshot id (repeats allowed)
            st.dictionaries(
                st.integers(min_value=0, max_value=3), st.integers(min_value=0, max_value=30)
            ),
        ),
        max_size=7,
    ),
    starts=st.lists(st.integers(min_value=0, max_value=30), min_size=4, max_size=4),
)
def test_completed_snapshots_agree_with_the_aligner_fed_barrier_by_barrier(
    parts: int, snapshots: list[tuple[int, dict[int, int]]], starts: list[int]
) -> None:
    from spark_chkpt.alignment.snapshots import completed_snapshots

    partitions = [TopicPartition("t", p) for p in range(parts)]
    entries = [
        IndexEntry(
            kind="complete",
            app_id="a",
            snapshot_id=sid,
            topic="t",
            attempts=(f"a.{sid}.0.0",),
            positions={p: o for p, o in positions.items() if p < parts},
        )
        for sid, positions in snapshots
    ]
    start = {tp: starts[tp.partition] for tp in partitions}
    got = completed_snapshots(entries, start, partitions)
    expected = _completed_by_the_aligner(entries, start, partitions)
    assert [id(e) for e in got] == [id(e) for e in expected]
