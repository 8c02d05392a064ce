"""Revoked upstream snapshots (a savepoint rewind of a chkpt-kafka sink): the ``revoke``
entry, the index without the revoked snapshots, and the cut, filters and refusal a
reader plans from them. Pure: no Kafka."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.alignment.cut import RecordFilter, plan_topic, record_filters
from spark_chkpt.alignment.index import BarrierIndex
from spark_chkpt.alignment.snapshots import check_not_passed
from spark_chkpt.errors import RevokedSnapshotError
from spark_chkpt.offsets import TopicPartition

T = "mid"
P0, P1 = TopicPartition(T, 0), TopicPartition(T, 1)
LATEST = {P0: 100, P1: 100}


def entry(
    snapshot: int,
    positions: Mapping[int, int],
    *,
    generation: int = 0,
    kind: str = "complete",
    tag: str = "old",
) -> IndexEntry:
    return IndexEntry(
        kind=kind,  # type: ignore[arg-type]
        app_id="A",
        snapshot_id=snapshot,
        topic=T,
        attempts=(f"{tag}-{snapshot}",),
        positions=dict(positions),
        created_ms=0,
        generation=generation,
    )


# Generation 0 wrote snapshots 0..3; a rewind to snapshot 1 revoked 2 and 3 (offsets
# 20..39 on partition 0, 15..34 on partition 1); generation 1 wrote 2 and 3 again after.
OLD = [entry(s, {0: 10 * s + 9, 1: 10 * s + 4}) for s in range(4)]
REVOKE = IndexEntry(
    kind="revoke",
    app_id="A",
    snapshot_id=1,
    topic=T,
    attempts=("old-2", "old-3"),
    positions={0: 40, 1: 35},
    starts={0: 20, 1: 15},
    revoked=(2, 3),
    created_ms=0,
    generation=1,
    offset=8,
)
NEW = [entry(s, {0: 10 * s + 29, 1: 10 * s + 24}, generation=1, tag="new") for s in (2, 3)]


def index() -> BarrierIndex:
    intents = [entry(s, {}, kind="intent") for s in range(4)]
    return BarrierIndex(data_topic=T, entries=[*intents, *OLD, REVOKE, *NEW])


def test_revoke_entry_round_trips() -> None:
    parsed = IndexEntry.parse(REVOKE.value(), topic="__chkpt.mid", partition=0, offset=8)
    assert parsed == REVOKE
    assert parsed.revoked_range(0) == (20, 40)
    assert parsed.revoked_range(1) == (15, 35)
    assert parsed.revoked_range(2) is None


def test_index_answers_without_the_revoked_snapshots() -> None:
    idx = index()
    complete = idx.complete(app_id="A")
    assert [(e.snapshot_id, e.generation) for e in complete] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    # Snapshot 2 written again is keyed by its generation: not the revoked one.
    again = idx.first(app_id="A", snapshot_id=2, kind="complete")
    assert again is not None and again.generation == 1 and again.attempts == ("new-2",)
    assert idx.first(app_id="A", snapshot_id=3, kind="intent") is None
    assert idx.latest_snapshot(app_id="A") == 3
    assert idx.is_revoked(OLD[2]) and idx.is_revoked(OLD[3])
    assert not idx.is_revoked(OLD[1]) and not idx.is_revoked(NEW[0])
    assert idx.revocations() == [REVOKE]


def test_restored_sink_sees_its_next_batch_as_not_committed() -> None:
    """What the sink's coordinator asks before committing batch 2 again."""
    idx = BarrierIndex(data_topic=T, entries=[*OLD, REVOKE])
    assert idx.first(app_id="A", snapshot_id=2, kind="complete") is None
    assert idx.latest_snapshot(app_id="A") == 1


def test_reader_at_the_matching_cut_reads_the_new_timeline_only() -> None:
    idx = index()
    start = {P0: 20, P1: 15}  # right after barrier 1
    cut = plan_topic(
        topic=T,
        mode="aligned",
        start=start,
        latest=LATEST,
        entries=idx.complete(),
        max_records=None,
        revocations=idx.revocations(),
    )
    assert cut.snapshots == (2, 3)
    assert cut.end == {P0: 60, P1: 55}
    assert cut.revoked == 20 + 20
    f0 = cut.filters[P0]
    assert f0.revoked == ((20, 40),)
    assert "new-2" in f0.confirmed and "old-2" not in f0.confirmed
    assert f0.is_revoked(25, None) and f0.is_revoked(45, "old-3")
    assert not f0.is_revoked(45, "new-2") and not f0.is_revoked(19, "old-1")


def test_fresh_reader_from_the_start_skips_the_revoked_offsets() -> None:
    idx = index()
    cut = plan_topic(
        topic=T,
        mode="aligned",
        start={P0: 0, P1: 0},
        latest=LATEST,
        entries=idx.complete(),
        max_records=None,
        revocations=idx.revocations(),
    )
    assert cut.snapshots == (0, 1, 2, 3)
    assert cut.end == {P0: 60, P1: 55}
    assert cut.revoked == 40


def test_reader_that_passed_a_revoked_barrier_fails_naming_the_revocation() -> None:
    idx = index()
    with pytest.raises(RevokedSnapshotError) as err:
        plan_topic(
            topic=T,
            mode="aligned",
            start={P0: 30, P1: 25},  # after the revoked barrier 2
            latest=LATEST,
            entries=idx.complete(),
            max_records=None,
            revocations=idx.revocations(),
        )
    text = str(err.value)
    for part in ("topic mid", "app A", "generation 1", "revoked snapshots 2, 3", "offset 30"):
        assert part in text


@pytest.mark.parametrize(
    ("start", "fails"),
    [
        ({P0: 20, P1: 15}, False),  # the matching cut
        ({P0: 10, P1: 5}, False),  # behind it
        ({P0: 40, P1: 15}, True),  # read every revoked record of partition 0
        ({P0: 21, P1: 15}, True),  # read one of them
        ({P0: 60, P1: 55}, False),  # read past them after the revocation
    ],
)
def test_check_not_passed(start: dict[TopicPartition, int], fails: bool) -> None:
    if fails:
        with pytest.raises(RevokedSnapshotError):
            check_not_passed(topic=T, begin=start, revocations=[REVOKE])
    else:
        check_not_passed(topic=T, begin=start, revocations=[REVOKE])


def test_a_revocation_of_nothing_refuses_no_reader() -> None:
    empty = IndexEntry(
        kind="revoke",
        app_id="A",
        snapshot_id=3,
        topic=T,
        attempts=(),
        positions={0: 45},
        starts={0: 40},
        generation=1,
    )
    check_not_passed(topic=T, begin={P0: 42}, revocations=[empty])


def test_replay_filters_carry_the_revocation() -> None:
    idx = index()
    filters = record_filters(
        topic=T,
        mode="aligned",
        begin={P0: 20, P1: 15},
        end={P0: 60, P1: 55},
        entries=idx.complete(),
        revocations=idx.revocations(),
    )
    assert filters[P1].revoked == ((15, 35),)
    assert filters[P1].revoked_attempts == frozenset({"old-2", "old-3"})
    assert (
        record_filters(
            topic=T,
            mode="none",
            begin={P0: 20},
            end={P0: 60},
            entries=idx.complete(),
            revocations=idx.revocations(),
        )
        == {}
    )


def test_record_filter_without_revocation_revokes_nothing() -> None:
    assert not RecordFilter().is_revoked(5, "old-2")


def test_a_stale_writers_entry_after_the_revocation_is_revoked_with_its_attempts() -> None:
    """An old-generation commit that raced the fence and wrote after the revocation."""
    stale = entry(4, {0: 70, 1: 70}, tag="stale")
    idx = BarrierIndex(data_topic=T, entries=[*OLD, REVOKE, stale, *NEW])
    assert idx.is_revoked(stale)
    assert idx.latest_snapshot(app_id="A") == 3
    (revocation,) = idx.revocations()
    assert revocation.attempts == ("old-2", "old-3", "stale-4")
    f0 = record_filters(
        topic=T,
        mode="aligned",
        begin={P0: 20},
        end={P0: 80},
        entries=idx.complete(),
        revocations=idx.revocations(),
    )[P0]
    assert f0.is_revoked(65, "stale-4") and "stale-4" not in f0.confirmed
