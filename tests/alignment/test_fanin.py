"""Planning aligned batches of a topic two upstream apps write (spark_chkpt.alignment.fanin):
pure, no Kafka. A small log stands for the topic; each batch is planned as the source
plans it (report into the next batch's start) and its read tasks are played record by
record through the filters, so every test checks what a reader delivers, batch by batch."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.alignment.cut import plan_topic, record_filters
from spark_chkpt.alignment.fanin import (
    FanInFilter,
    fan_in_filters,
    is_fan_in,
    plan_fan_in,
    previous_pending,
    read_from_report,
    refuse_mode,
)
from spark_chkpt.errors import AlignmentError, ConfigError, RevokedSnapshotError
from spark_chkpt.kafka.source.cuts import TopicRead
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.planner import SourcePlanner, _fan_in_moved
from spark_chkpt.offsets import TopicPartition, from_json, meta_of, to_json

T = "mid"
P0, P1 = TopicPartition(T, 0), TopicPartition(T, 1)
TPS = (P0, P1)


@dataclass
class Log:
    """A two-partition topic: tagged records, untagged ones and barriers of any app."""

    parts: dict[TopicPartition, list[tuple[str | None, str | None]]] = field(
        default_factory=lambda: {tp: [] for tp in TPS}
    )
    entries: list[IndexEntry] = field(default_factory=list)

    def write(
        self, tag: str | None, values: Sequence[str], *, partitions: Sequence[int] = (0, 1)
    ) -> None:
        for i, value in enumerate(values):
            self.parts[TPS[partitions[i % len(partitions)]]].append((tag, value))

    def barrier(self, app: str, snapshot: int, attempts: Sequence[str]) -> IndexEntry:
        positions = {}
        for tp in TPS:
            positions[tp.partition] = len(self.parts[tp])
            self.parts[tp].append((None, None))
        found = IndexEntry(
            kind="complete",
            app_id=app,
            snapshot_id=snapshot,
            topic=T,
            attempts=tuple(attempts),
            positions=positions,
            created_ms=0,
        )
        self.entries.append(found)
        return found

    def latest(self) -> dict[TopicPartition, int]:
        return {tp: len(recs) for tp, recs in self.parts.items()}


@dataclass
class Reader:
    """An aligned downstream query: its start offset (JSON as in Spark's offset log)."""

    log: Log
    start: dict[str, Any] = field(default_factory=lambda: to_json({P0: 0, P1: 0}))
    delivered: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)

    expected: tuple[str, ...] = ()

    def batch(self, *, revocations: Sequence[IndexEntry] = ()) -> list[str]:
        begin = from_json(self.start)
        previous = meta_of(self.start).get("topics", {}).get(T)
        cut = plan_fan_in(
            topic=T,
            start=begin,
            latest=self.log.latest(),
            entries=self.log.entries,
            max_records=None,
            previous=previous,
            revocations=revocations,
            expected=self.expected,
        )
        report: dict[str, Any] = {
            "mode": "aligned",
            "app": None,
            "snapshots": [],
            "apps": cut.report(),
        }
        end_json = json.loads(json.dumps(to_json(cut.end, meta={"topics": {T: report}})))
        # What the read tasks do, from the offset log alone (as on a replay).
        stored = meta_of(end_json)["topics"][T]
        end = from_json(end_json)
        read_from = read_from_report(stored, begin)
        assert read_from == cut.read_from
        filters = fan_in_filters(
            report=stored, start=begin, end=end, entries=self.log.entries, revocations=revocations
        )
        got = []
        for tp in TPS:
            for offset in range(read_from[tp], end[tp]):
                tag, value = self.log.parts[tp][offset]
                if value is None:
                    continue  # a barrier
                verdict = filters[tp].judge(offset, tag)
                if verdict == "deliver":
                    got.append(value)
                elif verdict == "drop":
                    self.dropped.append(value)
                elif verdict == "revoked":
                    self.revoked.append(value)
        self.start = end_json
        self.delivered += got
        return sorted(got)

    def pending(self, app: str) -> dict[str, int]:
        return dict(meta_of(self.start)["topics"][T]["apps"][app]["pending"])


def ids(prefix: str, n: int, first: int = 0) -> list[str]:
    return [f"{prefix}-{i}" for i in range(first, first + n)]


def test_interleaved_apps_each_deliver_at_their_own_barrier_and_in_flight_records_wait() -> None:
    log = Log()
    log.write("a1-s0", ids("a1", 4))
    log.barrier("a1", 0, ["a1-s0"])
    log.write("a2-s0", ids("a2", 4))
    log.barrier("a2", 0, ["a2-s0"])
    reader = Reader(log)
    assert reader.batch() == sorted(ids("a1", 4) + ids("a2", 4))
    # Now interleaved: A2's snapshot 1 is in flight when A1 writes barrier 1.
    log.write("a2-s1", ids("a2", 4, 4))
    log.write("a2-x", ["a2-dup-4", "a2-dup-5"])  # A2's failed attempt of snapshot 1
    log.write("a1-s1", ids("a1", 4, 4))
    log.write(None, ["plain-0", "plain-1"])  # an ordinary producer's records
    log.barrier("a1", 1, ["a1-s1"])
    assert reader.batch() == sorted([*ids("a1", 4, 4), "plain-0", "plain-1"])
    assert reader.dropped == []  # A2's records are neither read nor dropped yet
    log.write("a1-s2", ids("a1", 2, 8))  # A1 in flight now
    log.barrier("a2", 1, ["a2-s1"])
    assert reader.batch() == ids("a2", 4, 4)
    assert sorted(reader.dropped) == ["a2-dup-4", "a2-dup-5"]  # before both apps' barriers
    log.barrier("a1", 2, ["a1-s2"])
    assert reader.batch() == ids("a1", 2, 8)
    assert reader.batch() == []
    everything = ids("a1", 10) + ids("a2", 8) + ["plain-0", "plain-1"]
    assert sorted(reader.delivered) == sorted(everything)  # each exactly once


def test_one_app_ahead_by_several_snapshots_then_the_other_catches_up() -> None:
    log = Log()
    log.write("a2-s0", ids("a2", 2))  # A2's snapshot 0 in flight for a long time
    for snap in range(3):
        log.write(f"a1-s{snap}", ids("a1", 2, 2 * snap))
        log.barrier("a1", snap, [f"a1-s{snap}"])
    log.barrier("a2-never", 0, [])  # a third app, idle since its empty snapshot
    # A2 has no snapshot yet: only upstreamApps tells the reader to keep its records.
    reader = Reader(log, expected=("a1", "a2", "a2-never"))
    assert reader.batch() == ids("a1", 6)  # A1's three snapshots at once
    assert reader.pending("a1") == {"0": 7, "1": 7}
    assert reader.pending("a2-never") == {"0": 8, "1": 8}
    assert reader.pending("a2") == {"0": 0, "1": 0}  # nothing of A2 judged yet
    assert reader.start[T] == {"0": 8, "1": 8}  # Spark's end: the largest pending offset
    log.barrier("a2", 0, ["a2-s0"])
    # A2's barrier lies after Spark's end, its records before it: read from before.
    assert reader.batch() == ids("a2", 2)
    assert reader.pending("a2") == {"0": 9, "1": 9}
    assert reader.batch() == []
    assert sorted(reader.delivered) == sorted(ids("a1", 6) + ids("a2", 2))


def test_an_app_whose_index_entry_comes_late_still_makes_a_batch_of_its_own() -> None:
    log = Log()
    log.write("a1-s0", ids("a1", 2))
    log.barrier("a1", 0, ["a1-s0"])
    log.write("a2-s0", ids("a2", 2))
    log.barrier("a2", 0, ["a2-s0"])
    reader = Reader(log)
    reader.batch()
    log.write("a2-s1", ids("a2", 2, 2))
    late = log.barrier("a2", 1, ["a2-s1"])
    log.entries.remove(late)  # its barriers are written, its index entry not yet
    log.write("a1-s1", ids("a1", 2, 2))
    log.barrier("a1", 1, ["a1-s1"])
    assert reader.batch() == ids("a1", 4)[2:]
    log.entries.append(late)
    before = dict(reader.start)
    assert reader.batch() == ids("a2", 2, 2)
    # Spark's offsets did not move (A2's barriers lie before them), its pending did: the
    # source still makes a batch of it.
    assert from_json(reader.start) == from_json(before)
    previous = meta_of(before)["topics"]
    assert _fan_in_moved(previous, meta_of(reader.start)["topics"])
    assert not _fan_in_moved(meta_of(reader.start)["topics"], meta_of(reader.start)["topics"])


def test_an_idle_app_holds_its_pending_offset_and_nothing_is_lost_or_dropped() -> None:
    log = Log()
    log.write("a2-s0", ids("a2", 2))
    log.barrier("a2", 0, ["a2-s0"])  # A2 then idles for good
    reader = Reader(log)
    for snap in range(3):
        log.write(f"a1-s{snap}", ids("a1", 2, 2 * snap))
        log.write(f"a1-x{snap}", [f"fail-{snap}"])  # each snapshot had a failed attempt
        log.barrier("a1", snap, [f"a1-s{snap}"])
        reader.batch()
    assert sorted(reader.delivered) == sorted(ids("a2", 2) + ids("a1", 6))
    # A failed attempt is dropped once it lies before both apps' pending offsets: A2's
    # stays right after its barrier 0, which every failed attempt here follows.
    assert reader.dropped == []
    assert reader.pending("a2") == {"0": 2, "1": 2}
    log.write("a2-s1", ["a2-late"])
    log.barrier("a2", 1, ["a2-s1"])
    assert reader.batch() == ["a2-late"]
    assert sorted(reader.dropped) == ["fail-0", "fail-1", "fail-2"]


def revoke(
    app: str, keep: int, revoked: Sequence[int], attempts: Sequence[str], log: Log
) -> IndexEntry:
    kept = next(e for e in log.entries if e.app_id == app and e.snapshot_id == keep)
    return IndexEntry(
        kind="revoke",
        app_id=app,
        snapshot_id=keep,
        topic=T,
        attempts=tuple(attempts),
        positions=_positions(log),
        starts={p: o + 1 for p, o in kept.positions.items()},
        revoked=tuple(revoked),
        generation=1,
        created_ms=0,
        offset=99,
    )


def _positions(log: Log) -> dict[int, int]:
    return {tp.partition: n for tp, n in log.latest().items()}


def test_a_revocation_of_one_app_skips_its_records_but_not_the_others_in_the_same_offsets() -> None:
    log = Log()
    log.write("a1-s0", ids("a1", 2))
    log.barrier("a1", 0, ["a1-s0"])
    log.write("a2-s0", ids("a2", 2))
    log.barrier("a2", 0, ["a2-s0"])
    reader = Reader(log)
    assert reader.batch() == sorted(ids("a1", 2) + ids("a2", 2))
    # A1 writes snapshot 1 (old timeline), A2 writes records in between, A1 is rewound to 0.
    log.write("a1-s1", ["a1-old-2", "a1-old-3"])
    log.write("a2-s1", ids("a2", 2, 2))
    old = log.barrier("a1", 1, ["a1-s1"])
    log.write("a1-inflight", ["a1-old-4"])  # in flight at the rewind, never confirmed
    entry = revoke("a1", 0, [1], ["a1-s1"], log)
    log.entries.remove(old)  # the index's live entries leave revoked snapshots out
    # The restored A1 (generation 1) writes snapshot 1 again; A2 commits its snapshot 1.
    log.write("a1-s1-new", ids("a1", 2, 2))
    log.barrier("a1", 1, ["a1-s1-new"])
    log.barrier("a2", 1, ["a2-s1"])
    assert reader.batch(revocations=[entry]) == sorted(ids("a1", 2, 2) + ids("a2", 2, 2))
    assert sorted(reader.revoked) == ["a1-old-2", "a1-old-3"]
    assert reader.dropped == ["a1-old-4"]  # before both apps' barriers: a dead attempt
    assert reader.batch(revocations=[entry]) == []


def test_a_reader_past_one_apps_revoked_snapshot_fails_naming_the_revocation() -> None:
    log = Log()
    log.write("a1-s0", ids("a1", 2))
    log.barrier("a1", 0, ["a1-s0"])
    log.write("a2-s0", ids("a2", 2))
    log.barrier("a2", 0, ["a2-s0"])
    log.write("a1-s1", ["a1-old"])
    log.barrier("a1", 1, ["a1-s1"])
    reader = Reader(log)
    reader.batch()  # read A1's snapshot 1, then A1 is rewound to 0
    entry = revoke("a1", 0, [1], ["a1-s1"], log)
    with pytest.raises(RevokedSnapshotError, match="upstream app a1"):
        reader.batch(revocations=[entry])


def test_an_offset_json_written_before_fan_in_still_parses_and_plans_single_app() -> None:
    # As a 0.x reader of one upstream app logged it (no "apps" in its report).
    old = json.loads(
        '{"mid":{"0":10,"1":12},"__chkpt__":{"topics":{"mid":{"mode":"aligned","app":"a1",'
        '"snapshots":[3],"barriers":2,"waited_ms":0,"span":22}}}}'
    )
    assert from_json(old) == {P0: 10, P1: 12}
    report = meta_of(old)["topics"][T]
    one = [
        IndexEntry(
            kind="complete",
            app_id="a1",
            snapshot_id=4,
            topic=T,
            attempts=("t",),
            positions={0: 20, 1: 20},
            created_ms=0,
        )
    ]
    assert not is_fan_in(one, report)  # the single-app path and its offsets stay
    cut = plan_topic(
        topic=T,
        mode="aligned",
        start=from_json(old),
        latest={P0: 30, P1: 30},
        entries=one,
        max_records=None,
    )
    assert cut.end == {P0: 21, P1: 21} and cut.app_id == "a1"
    # A second app appears: the first fan-in batch takes a1's pending from Spark's start.
    assert previous_pending(report, from_json(old)) == {"a1": {0: 10, 1: 12}}
    two = [*one, IndexEntry(**{**one[0].__dict__, "app_id": "a2", "snapshot_id": 0})]
    assert is_fan_in(two, report)


def test_at_least_once_filters_of_two_apps_judge_only_before_the_earliest_last_barrier() -> None:
    log = Log()
    log.barrier("a2", 0, [])  # offset 0 on both partitions
    log.write("a2-s1", ["a2-inflight"], partitions=(0,))  # 0-1: A2's snapshot 1 in flight
    log.write("a1-s0", ["a1-0"], partitions=(0,))  # 0-2
    log.barrier("a1", 0, ["a1-s0"])  # 0-3
    filters = record_filters(
        topic=T, mode="at-least-once", begin={P0: 0, P1: 0}, end=log.latest(), entries=log.entries
    )
    # One app's last barrier (3) would drop A2's in-flight record at 1; A2's (0) keeps it.
    assert filters[P0].confirm_until == 1


def test_modes_other_than_aligned_are_refused_naming_topic_apps_and_option() -> None:
    error = refuse_mode(topic=T, apps=["a1", "a2"], option="alignment", value="unaligned")
    assert isinstance(error, AlignmentError)
    text = str(error)
    assert "mid" in text and "a1, a2" in text and "alignment=unaligned" in text


def test_a_mapping_report_without_apps_is_not_fan_in() -> None:
    assert not is_fan_in([], None)
    assert not is_fan_in([], {"app": "a1"})
    assert is_fan_in([], {"apps": {}})


def test_an_app_not_in_upstream_apps_is_refused_naming_it_and_the_option() -> None:
    log = Log()
    log.write("a3-s0", ["a3-0"])
    log.barrier("a3", 0, ["a3-s0"])
    with pytest.raises(AlignmentError, match=r"a3.*upstreamApps"):
        Reader(log, expected=("a1", "a2")).batch()


def _planner(**options: str) -> SourcePlanner:
    config = SourceConfig.from_options(
        {"kafka.bootstrap.servers": "localhost:1", "subscribe": T, **options}
    )
    return SourcePlanner(config=config)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"alignment": "unaligned"}, "alignment=unaligned"),
        ({"alignment": "at-least-once"}, "alignment=at-least-once"),
        ({"alignmentTimeout": "5s"}, "alignmentTimeout=5000ms"),
    ],
)
def test_the_source_refuses_fan_in_in_other_modes_naming_topic_apps_and_option(
    options: dict[str, str], named: str
) -> None:
    log = Log()
    log.write("a1-s0", ["a1-0"])
    log.barrier("a1", 0, ["a1-s0"])
    log.barrier("a2", 0, [])
    with pytest.raises(AlignmentError, match="a1, a2") as info:
        read = TopicRead(
            topic=T,
            begin={P0: 0, P1: 0},
            latest=log.latest(),
            entries=log.entries,
            revocations=[],
            max_rows=None,
        )
        _planner(**options)._align_fan_in(read, previous=None, end={})
    assert named in str(info.value) and T in str(info.value)


def test_upstream_apps_needs_aligned_mode() -> None:
    with pytest.raises(ConfigError, match="upstreamApps"):
        _planner(upstreamApps="a1,a2", alignment="none")
    with pytest.raises(ConfigError, match="alignmentTimeout"):
        _planner(upstreamApps="a1,a2", alignmentTimeout="5s")
    assert _planner(upstreamApps=" a2, a1 ").config.upstream_apps == ("a1", "a2")


Step = tuple[str, int]  # ("write" | "fail" | "commit" | "batch", app)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["write", "fail", "commit", "batch"]), st.integers(0, 2)),
        max_size=40,
    )
)
def test_any_interleaving_of_three_apps_delivers_each_committed_record_once(
    steps: list[Step],
) -> None:
    """Three apps write, fail attempts and commit in any order, the reader plans batches
    in between: at the end every committed record was delivered exactly once and no
    record of a failed attempt was."""
    log = Log()
    apps = ("a0", "a1", "a2")
    reader = Reader(log, expected=apps)
    snapshot = dict.fromkeys(apps, 0)
    open_attempts: dict[str, list[str]] = {a: [] for a in apps}
    committed: list[str] = []
    in_flight: dict[str, list[str]] = {a: [] for a in apps}
    counter = iter(range(10_000))

    def commit(app: str) -> None:
        log.barrier(app, snapshot[app], open_attempts[app])
        snapshot[app] += 1
        open_attempts[app] = []
        committed.extend(in_flight[app])
        in_flight[app] = []

    for kind, i in steps:
        app = apps[i]
        if kind == "write":
            tag = f"{app}-t{next(counter)}"
            values = [f"{tag}-{k}" for k in range(3)]
            log.write(tag, values, partitions=(i % 2, (i + 1) % 2))
            open_attempts[app].append(tag)
            in_flight[app].extend(values)
        elif kind == "fail":
            log.write(f"{app}-x{next(counter)}", [f"{app}-failed-{next(counter)}"])
        elif kind == "commit":
            commit(app)
        else:
            reader.batch()
    for app in apps:
        commit(app)
    reader.batch()
    assert reader.batch() == []
    assert sorted(reader.delivered) == sorted(committed)
    assert not any("failed" in v for v in reader.delivered)
    failed = [v for _, v in (r for part in log.parts.values() for r in part) if v and "failed" in v]
    assert sorted(reader.dropped) == sorted(failed)  # each counted once, when it is sure


@dataclass(frozen=True)
class _Record:
    offset: int
    value: bytes | None
    headers: list[tuple[str, bytes]]
    key: bytes | None = None


def test_a_read_task_judges_a_fan_in_partitions_records_by_the_filter() -> None:
    from spark_chkpt.alignment.barrier import ATTEMPT_HEADER, Barrier
    from spark_chkpt.kafka.source.fetcher import RangeFetcher
    from spark_chkpt.kafka.source.intake import Channel, ReadSpec, ReadStats
    from spark_chkpt.offsets import OffsetRange

    def tagged(offset: int, tag: str) -> _Record:
        return _Record(offset, tag.encode(), [(ATTEMPT_HEADER, tag.encode())])

    barrier = Barrier(app_id="a1", snapshot_id=1, attempts=("a1-s1",))
    records = [
        tagged(3, "a1-s0"),  # A1's, delivered by an earlier batch
        tagged(4, "a2-s1"),  # A2's, delivered now
        tagged(5, "dead"),  # a failed attempt before both apps' new pending offsets
        _Record(6, barrier.value(), Barrier.headers()),
        tagged(7, "a1-s1"),  # A1's, delivered now
        _Record(8, b"plain", []),  # an ordinary producer's, in Spark's range
        tagged(9, "a2-s2"),  # A2's next snapshot: later
        tagged(10, "a1-old"),  # revoked
        tagged(11, "unknown"),  # in flight: later
    ]
    judge = FanInFilter(
        plain_from=8,
        drop_below=6,
        apps={"a1": (6, 9), "a2": (4, 6)},
        confirmed={"a1-s0": "a1", "a2-s1": "a2", "a1-s1": "a1"},
        later=frozenset({"a2-s2"}),
        revoked_attempts=frozenset({"a1-old"}),
    )
    fetcher = object.__new__(RangeFetcher)
    fetcher._columnar = False
    fetcher._learned = set()
    fetcher._resize = False
    fetcher.stats = ReadStats()
    spec = ReadSpec(range=OffsetRange(P0, 3, 12), markers=True, fan_in=judge)
    channel = Channel(spec, 3)
    fetcher._take(channel, records, None, {P0: channel})
    assert [r.value for r in channel.pending] == [b"a2-s1", b"a1-s1", b"plain"]
    assert (fetcher.stats.dropped, fetcher.stats.dropped_attempts) == (1, {"dead"})
    assert (fetcher.stats.barriers, fetcher.stats.revoked) == (1, 1)


def test_an_app_appearing_after_a_single_app_batch_fails_loudly_instead_of_losing_records() -> None:
    """Without upstreamApps a reader first reads one app's topic single-app: A2's records
    written before A2's first snapshot completed, lying before A1's barrier, were judged
    a failed attempt's and dropped. When A2's snapshot then completes the reader cannot
    bring them back; before this check it went on fan-in and they were silently lost.
    Red before: no error, and a2-0 / a2-1 never delivered."""
    log = Log()
    log.write("a1-s0", ids("a1", 2))
    log.write("a2-s0", ids("a2", 2))  # A2 in flight, no snapshot of its own yet
    log.barrier("a1", 0, ["a1-s0"])
    # The single-app batch ended right after A1's barrier (what plan_topic did).
    single = {"mode": "aligned", "app": "a1", "snapshots": [0]}
    reader = Reader(log, start=to_json(log.latest(), meta={"topics": {T: single}}))
    log.barrier("a2", 0, ["a2-s0"])
    with pytest.raises(AlignmentError, match=r"a2.*upstreamApps=a1,a2"):
        reader.batch()
    # Named from the first batch, the same topic reads every record once.
    fresh = Reader(log, expected=("a1", "a2"))
    assert fresh.batch() == sorted(ids("a1", 2) + ids("a2", 2))
