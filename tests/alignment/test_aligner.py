"""The barrier aligner alone: Flink's ``testCheckpointBarriers`` ported, the edge cases of
``CheckpointBarrierAligner`` (subsumption, stale and duplicate barriers, cancellation, end of
channel), the unaligned and at-least-once modes, the alignment timeout, and properties over
random interleavings (no record lost, duplicated or reordered; the aligned cut is exact)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_chkpt.alignment.aligner import (
    Aligner,
    CollectingBarriers,
    Event,
    Forward,
    Mode,
    SnapshotAborted,
    SnapshotCompleted,
    WaitingForFirstBarrier,
)


class FakeClock:
    """A monotonic clock in seconds that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, *, ms: float) -> None:
        self.now += ms / 1000.0


def completed(event: Event[str]) -> SnapshotCompleted[str]:
    assert isinstance(event, SnapshotCompleted)
    return event


def ms(value: float) -> float:
    """An alignment time as the fake clock yields it, up to float rounding."""
    return pytest.approx(value)  # type: ignore[return-value]


def fwd(channel: Hashable, *records: str) -> list[Event[str]]:
    return [Forward(channel, r) for r in records]


# -- Flink's OneInputStreamTaskTest#testCheckpointBarriers ----------------------------------


def test_checkpoint_barriers_flink_port() -> None:
    clock = FakeClock()
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=clock)

    assert aligner.on_barrier(channel=0, snapshot_id=0) == []
    assert aligner.current_snapshot == 0
    assert aligner.is_blocked(0) and not aligner.is_blocked(1)

    # These elements should be buffered until we receive barriers from all inputs.
    assert aligner.on_record(channel=0, record="Hello-0-0") == []
    assert aligner.on_record(channel=0, record="Ciao-0-0") == []
    assert aligner.buffered == 2

    # These elements should be forwarded, since we did not yet receive a barrier on that input.
    assert aligner.on_record(channel=1, record="Hello-1-1") == fwd(1, "Hello-1-1")
    assert aligner.on_record(channel=1, record="Ciao-1-1") == fwd(1, "Ciao-1-1")

    clock.advance(ms=7)
    # Now we should see the snapshot and after that the buffered elements.
    assert aligner.on_barrier(channel=1, snapshot_id=0) == [
        SnapshotCompleted(0, "aligned", (), ms(7.0)),
        *fwd(0, "Hello-0-0", "Ciao-0-0"),
    ]
    assert aligner.current_snapshot is None
    assert aligner.last_completed == 0
    assert aligner.buffered == 0
    assert not aligner.is_blocked(0) and not aligner.is_blocked(1)
    assert isinstance(aligner.state, WaitingForFirstBarrier)
    assert aligner.on_record(channel=0, record="after") == fwd(0, "after")


def test_single_channel_completes_on_first_barrier() -> None:
    aligner: Aligner[str] = Aligner(channels=["p0"], clock=FakeClock())
    assert aligner.on_record(channel="p0", record="a") == fwd("p0", "a")
    assert aligner.on_barrier(channel="p0", snapshot_id=1) == [
        SnapshotCompleted(1, "aligned", (), 0.0)
    ]
    assert aligner.on_record(channel="p0", record="b") == fwd("p0", "b")
    assert aligner.on_barrier(channel="p0", snapshot_id=1) == []  # stale
    assert aligner.on_barrier(channel="p0", snapshot_id=2) == [
        SnapshotCompleted(2, "aligned", (), 0.0)
    ]
    assert aligner.last_completed == 2


def test_held_records_released_in_arrival_order_across_channels() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1, 2], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=0, record="a0")
    aligner.on_barrier(channel=1, snapshot_id=1)
    aligner.on_record(channel=1, record="b0")
    aligner.on_record(channel=0, record="a1")
    assert aligner.on_record(channel=2, record="c0") == fwd(2, "c0")
    events = aligner.on_barrier(channel=2, snapshot_id=1)
    assert events[1:] == [Forward(0, "a0"), Forward(1, "b0"), Forward(0, "a1")]
    assert completed(events[0]).snapshot_id == 1


# -- CheckpointBarrierAligner's other branches ----------------------------------------------


def test_newer_barrier_subsumes_the_pending_alignment() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=0, record="x")
    assert aligner.on_barrier(channel=1, snapshot_id=2) == [
        SnapshotAborted(1, "subsumed by 2"),
        Forward(0, "x"),
    ]
    assert aligner.current_snapshot == 2
    assert aligner.is_blocked(1) and not aligner.is_blocked(0)
    assert aligner.on_record(channel=1, record="y") == []
    assert aligner.on_record(channel=0, record="z") == fwd(0, "z")
    assert aligner.on_barrier(channel=0, snapshot_id=1) == []  # trailing barrier of 1
    events = aligner.on_barrier(channel=0, snapshot_id=2)
    assert events == [SnapshotCompleted(2, "aligned", (), 0.0), Forward(1, "y")]


def test_stale_barriers_are_ignored() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=3)
    aligner.on_barrier(channel=1, snapshot_id=3)
    assert aligner.last_completed == 3
    for old in (0, 2, 3):
        assert aligner.on_barrier(channel=0, snapshot_id=old) == []
        assert aligner.current_snapshot is None
        assert not aligner.is_blocked(0)
    aligner.on_barrier(channel=1, snapshot_id=5)
    assert aligner.on_barrier(channel=0, snapshot_id=4) == []  # older than the one aligning
    assert aligner.current_snapshot == 5
    assert not aligner.is_blocked(0)


def test_duplicate_barrier_is_ignored() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=0, record="held")
    assert aligner.on_barrier(channel=0, snapshot_id=1) == []
    assert aligner.current_snapshot == 1
    assert aligner.buffered == 1
    events = aligner.on_barrier(channel=1, snapshot_id=1)
    assert events == [SnapshotCompleted(1, "aligned", (), 0.0), Forward(0, "held")]


def test_cancel_aborts_the_pending_alignment_and_releases() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=0, record="held")
    assert aligner.on_cancel(snapshot_id=1) == [
        SnapshotAborted(1, "cancelled"),
        Forward(0, "held"),
    ]
    assert aligner.current_snapshot is None
    assert not aligner.is_blocked(0)
    # The cancelled snapshot's remaining barriers are stale.
    assert aligner.on_barrier(channel=1, snapshot_id=1) == []
    assert aligner.current_snapshot is None
    assert aligner.last_completed is None


def test_cancel_of_an_old_snapshot_is_ignored() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_barrier(channel=1, snapshot_id=1)
    aligner.on_barrier(channel=0, snapshot_id=2)
    assert aligner.on_cancel(snapshot_id=1) == []
    assert aligner.on_cancel(snapshot_id=0) == []
    assert aligner.current_snapshot == 2


def test_cancel_before_the_first_barrier_makes_its_barriers_stale() -> None:
    # Flink: "first barrier of a new checkpoint is directly a cancellation".
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    assert aligner.on_cancel(snapshot_id=4) == [SnapshotAborted(4, "cancelled")]
    assert aligner.on_cancel(snapshot_id=4) == []
    assert aligner.on_barrier(channel=0, snapshot_id=4) == []
    assert aligner.current_snapshot is None
    assert aligner.on_barrier(channel=0, snapshot_id=5) == []
    assert aligner.current_snapshot == 5


def test_cancel_of_a_newer_snapshot_gives_up_the_pending_one() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=0, record="held")
    assert aligner.on_cancel(snapshot_id=2) == [
        SnapshotAborted(1, "subsumed by 2"),
        Forward(0, "held"),
        SnapshotAborted(2, "cancelled"),
    ]
    assert aligner.current_snapshot is None
    assert aligner.on_barrier(channel=1, snapshot_id=2) == []


def test_end_of_channel_completes_an_alignment() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1, 2], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=0, record="held")
    aligner.on_barrier(channel=1, snapshot_id=1)
    assert aligner.on_end_of_channel(channel=2) == [
        SnapshotCompleted(1, "aligned", (), 0.0),
        Forward(0, "held"),
    ]
    assert aligner.on_end_of_channel(channel=2) == []  # repeated: ignored
    assert aligner.open_channels == frozenset({0, 1})
    # An ended channel counts as aligned for later snapshots too.
    aligner.on_barrier(channel=1, snapshot_id=2)
    assert aligner.on_barrier(channel=0, snapshot_id=2) == [
        SnapshotCompleted(2, "aligned", (), 0.0)
    ]


def test_end_of_a_blocked_channel_keeps_its_held_records() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=0, record="held")
    assert aligner.on_end_of_channel(channel=0) == []
    assert aligner.buffered == 1
    assert aligner.on_barrier(channel=1, snapshot_id=1) == [
        SnapshotCompleted(1, "aligned", (), 0.0),
        Forward(0, "held"),
    ]


def test_all_channels_ended_completes() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_end_of_channel(channel=0)
    events = aligner.on_end_of_channel(channel=1)
    assert [type(e) for e in events] == [SnapshotCompleted]


def test_a_snapshot_of_many_channels_completes_on_its_last_open_barrier_only() -> None:
    """The driver's cut feeds 1,000 partitions' barriers one by one: no completion until
    every open channel has brought its barrier, counting channels that ended after theirs."""
    channels = list(range(500))
    aligner: Aligner[str] = Aligner(channels=channels, clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    assert aligner.on_end_of_channel(channel=0) == []  # brought its barrier, then ended
    assert aligner.on_end_of_channel(channel=1) == []  # ended without one
    for channel in channels[2:-1]:
        assert aligner.on_barrier(channel=channel, snapshot_id=1) == []
    assert aligner.on_barrier(channel=channels[-1], snapshot_id=1) == [
        SnapshotCompleted(1, "aligned", (), 0.0)
    ]


def test_unknown_channel_and_record_after_end_raise() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], clock=FakeClock())
    with pytest.raises(ValueError, match="unknown channel 7"):
        aligner.on_record(channel=7, record="x")
    with pytest.raises(ValueError, match="unknown channel 7"):
        aligner.on_barrier(channel=7, snapshot_id=1)
    with pytest.raises(ValueError, match="unknown channel 7"):
        aligner.on_end_of_channel(channel=7)
    with pytest.raises(ValueError, match="unknown channel 7"):
        aligner.is_blocked(7)
    aligner.on_end_of_channel(channel=1)
    with pytest.raises(ValueError, match="record on channel 1 after its end-of-channel"):
        aligner.on_record(channel=1, record="x")
    with pytest.raises(ValueError, match="barrier on channel 1 after its end-of-channel"):
        aligner.on_barrier(channel=1, snapshot_id=1)
    with pytest.raises(ValueError, match="snapshot_id"):
        aligner.on_barrier(channel=0, snapshot_id=-1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"channels": []}, "at least one channel"),
        ({"channels": [0], "mode": "exactly-once"}, "mode 'exactly-once'"),
        ({"channels": [0], "alignment_timeout_ms": -1.0}, "must be >= 0"),
        ({"channels": [0], "mode": "unaligned", "alignment_timeout_ms": 5.0}, "only allowed"),
    ],
)
def test_constructor_rejects_bad_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Aligner(**kwargs)  # type: ignore[arg-type]


# -- unaligned and at-least-once -----------------------------------------------------------


def test_unaligned_reports_overtaken_records_and_blocks_nothing() -> None:
    clock = FakeClock()
    aligner: Aligner[str] = Aligner(channels=[0, 1, 2], mode="unaligned", clock=clock)
    assert aligner.on_record(channel=1, record="before") == fwd(1, "before")
    assert aligner.on_barrier(channel=0, snapshot_id=1) == []
    assert not aligner.is_blocked(0)
    assert aligner.on_record(channel=0, record="post-0") == fwd(0, "post-0")
    assert aligner.on_record(channel=1, record="in-flight-1") == fwd(1, "in-flight-1")
    assert aligner.on_record(channel=2, record="in-flight-2") == fwd(2, "in-flight-2")
    assert aligner.on_barrier(channel=1, snapshot_id=1) == []
    assert aligner.on_record(channel=1, record="post-1") == fwd(1, "post-1")
    assert aligner.on_record(channel=2, record="in-flight-2b") == fwd(2, "in-flight-2b")
    assert aligner.buffered == 0
    clock.advance(ms=3)
    assert aligner.on_barrier(channel=2, snapshot_id=1) == [
        SnapshotCompleted(
            1,
            "unaligned",
            (Forward(1, "in-flight-1"), Forward(2, "in-flight-2"), Forward(2, "in-flight-2b")),
            ms(3.0),
        )
    ]
    # The next snapshot starts with nothing overtaken.
    aligner.on_barrier(channel=2, snapshot_id=2)
    aligner.on_barrier(channel=1, snapshot_id=2)
    assert aligner.on_barrier(channel=0, snapshot_id=2) == [
        SnapshotCompleted(2, "unaligned", (), 0.0)
    ]


def test_unaligned_subsumed_snapshot_drops_its_overtaken_records() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], mode="unaligned", clock=FakeClock())
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=1, record="r")
    assert aligner.on_barrier(channel=0, snapshot_id=2) == [SnapshotAborted(1, "subsumed by 2")]
    assert aligner.on_barrier(channel=1, snapshot_id=2) == [
        SnapshotCompleted(2, "unaligned", (), 0.0)
    ]


def test_at_least_once_never_blocks() -> None:
    aligner: Aligner[str] = Aligner(channels=[0, 1], mode="at-least-once", clock=FakeClock())
    assert aligner.on_barrier(channel=0, snapshot_id=1) == []
    assert not aligner.is_blocked(0)
    assert aligner.on_record(channel=0, record="a") == fwd(0, "a")
    assert aligner.on_record(channel=1, record="b") == fwd(1, "b")
    assert aligner.buffered == 0
    assert aligner.on_barrier(channel=0, snapshot_id=2) == [SnapshotAborted(1, "subsumed by 2")]
    aligner.on_barrier(channel=1, snapshot_id=1)  # trailing
    assert aligner.on_barrier(channel=1, snapshot_id=2) == [
        SnapshotCompleted(2, "at-least-once", (), 0.0)
    ]


# -- alignment timeout -------------------------------------------------------------------


def test_alignment_timeout_switches_the_snapshot_to_unaligned() -> None:
    clock = FakeClock()
    aligner: Aligner[str] = Aligner(channels=[0, 1], alignment_timeout_ms=50, clock=clock)
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=0, record="held-a")
    aligner.on_record(channel=0, record="held-b")
    clock.advance(ms=49)
    assert aligner.poll_timeout() == []
    assert aligner.is_blocked(0)

    clock.advance(ms=1)
    assert aligner.poll_timeout() == fwd(0, "held-a", "held-b")
    assert not aligner.is_blocked(0)
    assert aligner.buffered == 0
    assert isinstance(aligner.state, CollectingBarriers)
    assert aligner.state.mode == "unaligned"
    assert aligner.on_record(channel=0, record="post") == fwd(0, "post")
    assert aligner.on_record(channel=1, record="in-flight") == fwd(1, "in-flight")

    clock.advance(ms=10)
    assert aligner.on_barrier(channel=1, snapshot_id=1) == [
        SnapshotCompleted(
            1,
            "unaligned",
            (Forward(0, "held-a"), Forward(0, "held-b"), Forward(1, "in-flight")),
            ms(60.0),
        )
    ]

    # The next snapshot is aligned again.
    aligner.on_barrier(channel=1, snapshot_id=2)
    assert aligner.on_record(channel=1, record="held-c") == []
    assert aligner.is_blocked(1)
    clock.advance(ms=20)
    assert aligner.on_barrier(channel=0, snapshot_id=2) == [
        SnapshotCompleted(2, "aligned", (), ms(20.0)),
        Forward(1, "held-c"),
    ]


def test_alignment_timeout_is_checked_on_record_and_barrier() -> None:
    clock = FakeClock()
    aligner: Aligner[str] = Aligner(channels=[0, 1, 2], alignment_timeout_ms=10, clock=clock)
    aligner.on_barrier(channel=0, snapshot_id=1)
    aligner.on_record(channel=0, record="held")
    clock.advance(ms=11)
    # The switch releases the held record before this one, so channel order holds.
    assert aligner.on_record(channel=0, record="next") == fwd(0, "held", "next")
    aligner.on_barrier(channel=1, snapshot_id=2)  # subsumes the switched snapshot
    assert aligner.current_snapshot == 2
    aligner.on_record(channel=1, record="held-2")
    clock.advance(ms=10)
    assert aligner.on_barrier(channel=2, snapshot_id=2) == fwd(1, "held-2")
    assert aligner.on_barrier(channel=0, snapshot_id=2) == [
        SnapshotCompleted(2, "unaligned", (Forward(1, "held-2"),), ms(10.0))
    ]


# -- properties over random interleavings --------------------------------------------------


@dataclass
class Scenario:
    """One random run: the inputs in order and, per record, what the test must check."""

    channels: int
    ops: list[tuple[str, int, object]] = field(default_factory=list)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n = draw(st.integers(min_value=1, max_value=4))
    scenario = Scenario(channels=n)
    last_barrier = dict.fromkeys(range(n), -1)
    ended: set[int] = set()
    counter = 0
    for _ in range(draw(st.integers(min_value=0, max_value=60))):
        open_channels = [c for c in range(n) if c not in ended]
        kind = draw(
            st.sampled_from(["record"] * 6 + ["barrier"] * 3 + ["cancel", "end"])
            if open_channels
            else st.just("cancel")
        )
        if kind == "cancel":
            scenario.ops.append(("cancel", -1, draw(st.integers(min_value=0, max_value=8))))
            continue
        channel = draw(st.sampled_from(open_channels))
        if kind == "record":
            scenario.ops.append(("record", channel, f"r{channel}-{counter}"))
            counter += 1
        elif kind == "barrier":
            last_barrier[channel] += draw(st.integers(min_value=1, max_value=2))
            scenario.ops.append(("barrier", channel, last_barrier[channel]))
        else:
            ended.add(channel)
            scenario.ops.append(("end", channel, None))
    return scenario


@dataclass
class Run:
    """The events a scenario produced, with the index in ``events`` of each input op."""

    events: list[Event[str]]
    marks: list[int]
    immediate: set[str]


def run(scenario: Scenario, mode: Mode, clock: FakeClock | None = None) -> Run:
    aligner: Aligner[str] = Aligner(
        channels=range(scenario.channels),
        mode=mode,
        alignment_timeout_ms=25 if clock is not None else None,
        clock=clock or FakeClock(),
    )
    events: list[Event[str]] = []
    marks: list[int] = []
    immediate: set[str] = set()
    for kind, channel, arg in scenario.ops:
        if clock is not None:
            clock.advance(ms=10)
        marks.append(len(events))
        if kind == "record":
            assert isinstance(arg, str)
            out = aligner.on_record(channel=channel, record=arg)
            if Forward(channel, arg) in out:
                immediate.add(arg)
        elif kind == "barrier":
            assert isinstance(arg, int)
            out = aligner.on_barrier(channel=channel, snapshot_id=arg)
        elif kind == "cancel":
            assert isinstance(arg, int)
            out = aligner.on_cancel(snapshot_id=arg)
        else:
            out = aligner.on_end_of_channel(channel=channel)
        events.extend(out)
        assert aligner.buffered == 0 or mode == "aligned"
    for channel in range(scenario.channels):
        events.extend(aligner.on_end_of_channel(channel=channel))
    assert aligner.buffered == 0
    assert aligner.current_snapshot is None
    return Run(events=events, marks=marks, immediate=immediate)


def inputs_per_channel(scenario: Scenario) -> dict[int, list[str]]:
    per: dict[int, list[str]] = {c: [] for c in range(scenario.channels)}
    for kind, channel, arg in scenario.ops:
        if kind == "record":
            assert isinstance(arg, str)
            per[channel].append(arg)
    return per


def forwarded_per_channel(events: list[Event[str]], channels: int) -> dict[int, list[str]]:
    per: dict[int, list[str]] = {c: [] for c in range(channels)}
    for event in events:
        if isinstance(event, Forward):
            assert isinstance(event.channel, int)
            per[event.channel].append(event.record)
    return per


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios(), mode=st.sampled_from(["aligned", "unaligned", "at-least-once"]))
def test_no_record_lost_duplicated_or_reordered(scenario: Scenario, mode: Mode) -> None:
    result = run(scenario, mode)
    assert forwarded_per_channel(result.events, scenario.channels) == inputs_per_channel(scenario)
    if mode != "aligned":
        # Nothing is ever held back.
        assert result.immediate == {r for rs in inputs_per_channel(scenario).values() for r in rs}
    if mode == "at-least-once":
        assert all(not completed(e).overtaken for e in result.events if _is_completion(e))


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios())
def test_no_record_lost_with_alignment_timeouts(scenario: Scenario) -> None:
    result = run(scenario, "aligned", clock=FakeClock())
    assert forwarded_per_channel(result.events, scenario.channels) == inputs_per_channel(scenario)


def _is_completion(event: Event[str]) -> bool:
    return isinstance(event, SnapshotCompleted)


def _resolution_index(events: list[Event[str]]) -> dict[int, int]:
    """Index of the first completion or abort event of each snapshot."""
    found: dict[int, int] = {}
    for i, event in enumerate(events):
        if isinstance(event, SnapshotCompleted | SnapshotAborted):
            found.setdefault(event.snapshot_id, i)
    return found


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios())
def test_aligned_cut_is_consistent(scenario: Scenario) -> None:
    result = run(scenario, "aligned")
    events = result.events
    resolved = _resolution_index(events)
    forward_index = {e.record: i for i, e in enumerate(events) if isinstance(e, Forward)}

    # (1) A record that came after its channel's barrier S is not forwarded before S resolves.
    seen: dict[int, list[int]] = {c: [] for c in range(scenario.channels)}
    for kind, channel, arg in scenario.ops:
        if kind == "barrier":
            assert isinstance(arg, int)
            seen[channel].append(arg)
        elif kind == "record":
            assert isinstance(arg, str)
            for snapshot_id in seen[channel]:
                if snapshot_id in resolved:
                    assert forward_index[arg] > resolved[snapshot_id]

    # (2) At SnapshotCompleted(S), each channel that delivered S has had forwarded exactly its
    # records before barrier S; a channel that ended without it, all its records.
    for i, event in enumerate(events):
        if not isinstance(event, SnapshotCompleted):
            continue
        assert event.mode == "aligned" and event.overtaken == ()
        out = forwarded_per_channel(events[:i], scenario.channels)
        for channel in range(scenario.channels):
            expected: list[str] = []
            for kind, c, arg in scenario.ops:
                if c != channel:
                    continue
                if kind == "barrier" and arg == event.snapshot_id:
                    break
                if kind == "record":
                    assert isinstance(arg, str)
                    expected.append(arg)
            assert out[channel] == expected, (event.snapshot_id, channel)


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios())
def test_unaligned_overtaken_records_precede_their_barrier(scenario: Scenario) -> None:
    result = run(scenario, "unaligned")
    events = result.events
    for i, event in enumerate(events):
        if not isinstance(event, SnapshotCompleted):
            continue
        assert event.mode == "unaligned"
        earlier = {e for e in events[:i] if isinstance(e, Forward)}
        for forward in event.overtaken:
            assert forward in earlier
            # In its channel's input, the record comes before barrier S.
            for kind, c, arg in scenario.ops:
                if c != forward.channel:
                    continue
                if kind == "record" and arg == forward.record:
                    break
                assert not (kind == "barrier" and arg == event.snapshot_id)
