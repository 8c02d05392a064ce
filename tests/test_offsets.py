"""Offset JSON, range splitting (minPartitions) and read-limit allocation."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_chkpt.errors import ChkptError
from spark_chkpt.offsets import (
    OffsetRange,
    TopicPartition,
    allocate_limit,
    from_json,
    split_ranges,
    to_json,
)

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_json_is_sparks_shape_and_round_trips() -> None:
    offsets = {A1: 7, A0: 5, B0: 0}
    doc = to_json(offsets)
    assert doc == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert from_json(doc) == offsets


def test_malformed_offset_names_the_entry() -> None:
    with pytest.raises(ChkptError, match="a-0"):
        from_json({"a": {"0": "x"}})


def test_split_keeps_ranges_whole_without_min_partitions() -> None:
    ranges = [OffsetRange(A0, 0, 100), OffsetRange(A1, 5, 5)]
    assert split_ranges(ranges, min_partitions=None) == [OffsetRange(A0, 0, 100)]


def test_split_gives_large_ranges_more_pieces() -> None:
    ranges = [OffsetRange(A0, 0, 900), OffsetRange(A1, 0, 100)]
    pieces = split_ranges(ranges, min_partitions=10)
    assert len([p for p in pieces if p.tp == A0]) == 9
    assert len([p for p in pieces if p.tp == A1]) == 1
    assert sum(p.size for p in pieces) == 1000


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=6),
    st.integers(1, 40),
)
def test_split_covers_each_range_exactly(spans: list[tuple[int, int]], min_parts: int) -> None:
    ranges = [OffsetRange(TopicPartition("t", i), s, s + n) for i, (s, n) in enumerate(spans)]
    pieces = split_ranges(ranges, min_partitions=min_parts)
    for r in ranges:
        mine = sorted((p for p in pieces if p.tp == r.tp), key=lambda p: p.start)
        if r.size == 0:
            assert mine == []
            continue
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
        assert all(p.size > 0 for p in mine)
    assert len(pieces) >= sum(1 for r in ranges if r.size)


def test_split_follows_sparks_rounding() -> None:
    """Spark 4.2's numbers (tests/kafka/source/test_kafka_parity.py compares the tasks
    with format("kafka")): 3 x 15 records at minPartitions=7 is 2 pieces each, 6 in all,
    the smaller piece first; a range too small to split is left out of the share."""
    ranges = [OffsetRange(TopicPartition("t", p), 0, 15) for p in range(3)]
    pieces = split_ranges(ranges, min_partitions=7)
    assert [(p.tp.partition, p.start, p.end) for p in pieces] == [
        (0, 0, 7), (0, 7, 15), (1, 0, 7), (1, 7, 15), (2, 0, 7), (2, 7, 15),
    ]  # fmt: skip
    skewed = [OffsetRange(A0, 0, 1000), OffsetRange(A1, 0, 10)]
    pieces = split_ranges(skewed, min_partitions=4)
    # A1 rounds to one piece, so A0 alone shares the other 3 of the 4 (not round(3.96))
    assert [p.size for p in pieces if p.tp == A0] == [333, 333, 334]
    assert [p.size for p in pieces if p.tp == A1] == [10]


def test_limit_is_shared_in_proportion_to_lag() -> None:
    start = {A0: 0, A1: 0, B0: 100}
    latest = {A0: 300, A1: 100, B0: 100}
    assert allocate_limit(start, latest, max_records=200) == {A0: 150, A1: 50, B0: 100}


def test_limit_above_lag_reads_everything() -> None:
    start, latest = {A0: 3}, {A0: 10}
    assert allocate_limit(start, latest, max_records=1000) == latest


def test_small_limit_still_makes_progress() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    latest = {A0: 10, A1: 10, B0: 10}
    end = allocate_limit(start, latest, max_records=1)
    assert sum(end.values()) == 1


@given(
    st.dictionaries(
        st.integers(0, 7), st.tuples(st.integers(0, 10**6), st.integers(0, 10**4)), min_size=1
    ),
    st.integers(1, 50_000),
)
def test_limit_never_exceeds_budget_or_lag(parts: dict[int, tuple[int, int]], limit: int) -> None:
    start = {TopicPartition("t", p): s for p, (s, _) in parts.items()}
    latest = {TopicPartition("t", p): s + lag for p, (s, lag) in parts.items()}
    end = allocate_limit(start, latest, max_records=limit)
    read = sum(end[tp] - start[tp] for tp in start)
    assert read == min(limit, sum(latest[tp] - start[tp] for tp in start))
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
