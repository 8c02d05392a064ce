"""The Kafka -> Kafka shape rows' data and the Quix row's figures: the values are JSON
of the size the row names, with the fields the JSON step reads; a Quix run's parts add
up to its whole and the spread is the fastest over the slowest."""

from __future__ import annotations

import json

import pytest

from bench.k2k_shapes import SHAPES, _values
from bench.quix_row import report_lines, spread


@pytest.mark.parametrize("shape", [s for s in SHAPES if s != "bench"])
def test_padded_values_are_json_of_the_named_size_with_the_fields_read(shape: str) -> None:
    pairs = _values(shape, 50)
    assert len(pairs) == 50
    for key, value in pairs:
        assert len(value) == int(shape)
        record = json.loads(value)
        assert {"app", "user_id", "ts"} <= set(record)
        assert key == record["app"].encode()


def test_the_bench_shape_is_the_page_views() -> None:
    pairs = _values("bench", 10)
    assert all(json.loads(v)["app"].encode() == k for k, v in pairs)
    assert 150 < sum(len(v) for _, v in pairs) / 10 < 300


def test_quix_report_gives_each_run_and_the_spread_per_commit_interval() -> None:
    runs = [
        {
            "commit_interval": 5.0,
            "run": i + 1,
            "seconds": s,
            "startup_s": 1.0,
            "steady_s": s - 1.5,
            "close_s": 0.5,
            "steady_rps": 99_999 / (s - 1.5),
        }
        for i, s in enumerate((6.5, 7.0, 7.5))
    ]
    lines = report_lines(runs, 100_000)
    assert len(lines) == 2 + 3 + 1
    assert "spread 20%" in lines[-1]  # steady: 5.0 s and 6.0 s -> 6/5 - 1
    assert spread([10.0, 11.5]) == pytest.approx(0.15)


def test_ours_steady_rate_leaves_out_the_first_batches_and_empty_ones() -> None:
    from bench.k2k_shapes import steady_rate

    def event(second: int, rows: int, ms: int) -> dict[str, object]:
        stamp = f"2026-11-28T07:00:{second:02d}.000Z"
        return {"timestamp": stamp, "numInputRows": rows, "durationMs": {"triggerExecution": ms}}

    events = [
        event(0, 10_000, 4000),  # the start: left out
        event(4, 10_000, 1000),  # left out
        event(5, 0, 10),  # no records: not a batch
        event(6, 10_000, 1000),
        event(7, 10_000, 1000),
        event(8, 5_000, 500),
    ]
    rate = steady_rate(events, skip=2)
    assert rate["batches"] == 5 and rate["records"] == 45_000
    assert rate["steady_records"] == 25_000
    assert rate["steady_s"] == pytest.approx(2.5)  # 07:00:06 to 07:00:08.5
    assert rate["steady_rps"] == 10_000
    with pytest.raises(RuntimeError, match="none after 5"):
        steady_rate(events, skip=5)


def test_a_short_querys_split_gives_its_start_apart_from_its_later_batches() -> None:
    from bench.k2k_shapes import split

    def event(second: float, rows: int, ms: int) -> dict[str, object]:
        stamp = f"2026-11-28T07:00:{second:06.3f}Z"
        return {"timestamp": stamp, "numInputRows": rows, "durationMs": {"triggerExecution": ms}}

    # A 5.0 s query: its first batch (with the start) ends at 2.5 s, then two batches
    # of 10,000 records from 2.5 s to 4.5 s, then an empty batch and the stop.
    events = [
        event(1.0, 10_000, 1500),
        event(2.5, 10_000, 1000),
        event(3.5, 10_000, 1000),
        event(4.5, 0, 10),
    ]
    parts = split(events, seconds=5.0)
    assert parts == {"start_s": 3.0, "after_first_rps": 10_000}
    # One batch: nothing after the first; the whole query is its start.
    assert split(events[:1], seconds=2.0) == {"start_s": 2.0, "after_first_rps": 0}
