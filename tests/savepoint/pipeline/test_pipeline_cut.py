"""Where a pipeline savepoint cuts (spark_chkpt.savepoint.pipeline.find_cut): the newest
upstream snapshot every downstream job has a batch ending at. Pure: the jobs' batch end
offsets and the barrier index entries are given."""

from __future__ import annotations

import pytest

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.errors import SavepointError
from spark_chkpt.savepoint.pipeline.cut import JobCheckpoint, find_cut, job_tree


def barrier(snapshot: int, app: str = "A", topic: str = "mid") -> IndexEntry:
    # Snapshot s ends at offset 10 * s + 9 on both partitions.
    return IndexEntry(
        kind="complete",
        app_id=app,
        snapshot_id=snapshot,
        topic=topic,
        attempts=(f"t{snapshot}",),
        positions={0: 10 * snapshot + 9, 1: 10 * snapshot + 9},
        created_ms=0,
    )


def job(
    name: str,
    batches: dict[int, dict[str, dict[int, int]]],
    writes: dict[str, str] | None = None,
) -> JobCheckpoint:
    return JobCheckpoint(
        name=name,
        checkpoint=f"/chk/{name}",
        query_id=name,
        reads={t for b in batches.values() for t in b},
        writes=writes or {},
        batches=sorted(batches),
        ends=batches,
    )


def at(snapshot: int, topic: str = "mid") -> dict[str, dict[int, int]]:
    return {topic: {0: 10 * snapshot + 10, 1: 10 * snapshot + 10}}


A = job("a", {n: {"raw": {0: n}} for n in range(6)}, writes={"mid": "A"})
MID = {"mid": {s: barrier(s) for s in range(6)}}


def test_the_newest_snapshot_the_downstream_reached() -> None:
    b = job("b", {n: at(n) for n in range(4)})  # B read A's snapshots 0..3; A is at 5
    root, edges = job_tree([A, b])
    found = find_cut(root, edges, MID)
    assert not isinstance(found, str)
    chosen, (join,) = found
    assert chosen == {"a": 3, "b": 3}
    assert (join.snapshot, join.downstream_batch, join.offsets) == (3, 3, {"0": 40, "1": 40})


def test_a_downstream_reading_two_snapshots_per_batch_joins_at_the_last() -> None:
    b = job("b", {0: at(1), 1: at(3), 2: at(5)})
    root, edges = job_tree([b, A])  # the order of the jobs does not matter
    found = find_cut(root, edges, MID)
    assert not isinstance(found, str) and found[0] == {"a": 5, "b": 2}
    revoked = {"mid": {s: e for s, e in MID["mid"].items() if s != 5}}  # 5 not live
    found = find_cut(root, edges, revoked)
    assert not isinstance(found, str) and found[0] == {"a": 3, "b": 1}


def test_a_chain_of_three_and_fan_out() -> None:
    b = job("b", {n: at(n) for n in range(5)}, writes={"t2": "B"})
    c = job("c", {m: at(m, "t2") for m in range(3)})
    d = job("d", {n: at(n) for n in range(3)})  # reads mid too: fan-out of A
    index = {**MID, "t2": {s: barrier(s, "B", "t2") for s in range(5)}}
    root, edges = job_tree([A, b, c, d])
    found = find_cut(root, edges, index)
    assert not isinstance(found, str)
    assert found[0] == {"a": 2, "b": 2, "c": 2, "d": 2}


def test_no_cut_names_the_job_and_the_offsets_it_needs() -> None:
    b = job("b", {0: {"mid": {0: 3, 1: 3}}})  # never ended at a barrier
    root, edges = job_tree([A, b])
    why = find_cut(root, edges, MID)
    assert isinstance(why, str)
    assert "job b (/chk/b)" in why and "barrier 5 of app A in mid" in why and "60" in why


def test_a_job_reading_two_upstream_jobs_topics_is_cut_at_a_barrier_of_each() -> None:
    # X writes mid2 (snapshot s ends at offset 5 * s + 4); B's batches end at a barrier
    # of both A (in mid) and X (in mid2). Before, any fan-in was refused.
    x = job("x", {n: {"raw2": {0: n}} for n in range(8)}, writes={"mid2": "X"})
    mid2 = {
        s: IndexEntry(
            kind="complete",
            app_id="X",
            snapshot_id=s,
            topic="mid2",
            attempts=(f"x{s}",),
            positions={0: 5 * s + 4},
            created_ms=0,
        )
        for s in range(8)
    }

    def ends(a: int, x_snapshot: int) -> dict[str, dict[int, int]]:
        return {**at(a), "mid2": {0: 5 * x_snapshot + 5}}

    b = job("b", {0: ends(0, 1), 1: ends(2, 3), 2: ends(3, 7), 3: {**at(5), "mid2": {0: 33}}})
    root, edges = job_tree([A, x, b])
    found = find_cut(root, edges, {**MID, "mid2": mid2})
    assert not isinstance(found, str)
    chosen, joins = found
    # B's batch 3 ends past X's last barrier (33 is no barrier + 1): batch 2 is the cut.
    assert chosen == {"a": 3, "b": 2, "x": 7}
    assert sorted((j.topic, j.upstream, j.snapshot, j.downstream_batch) for j in joins) == [
        ("mid", "a", 3, 2),
        ("mid2", "x", 7, 2),
    ]
    # X has not committed snapshot 7 (its batches 0..6): no cut at A's 3; A's 2 joins.
    x_behind = job("x", {n: {"raw2": {0: n}} for n in range(7)}, writes={"mid2": "X"})
    root, edges = job_tree([A, x_behind, b])
    found = find_cut(root, edges, {**MID, "mid2": mid2})
    assert not isinstance(found, str) and found[0] == {"a": 2, "b": 1, "x": 3}


def test_unjoined_jobs_and_cycles_are_refused() -> None:
    with pytest.raises(SavepointError, match="2 pipelines"):
        job_tree([A, job("y", {0: {"elsewhere": {0: 1}}})])
    one = job("one", {0: {"t2": {0: 1}}}, writes={"t1": "ONE"})
    two = job("two", {0: {"t1": {0: 1}}}, writes={"t2": "TWO"})
    with pytest.raises(SavepointError, match="in a cycle"):
        job_tree([one, two])


def test_jobs_sharing_a_query_name_are_named_by_their_folders() -> None:
    from spark_chkpt.savepoint.pipeline.create import _distinct_names

    one, two = job("stage_a", {0: {"raw": {0: 1}}}), job("stage_a", {0: at(0)})
    two.checkpoint = "/chk/second/"
    assert [j.name for j in _distinct_names([one, two])] == ["stage_a", "second"]


def _a2_barrier(snapshot: int) -> IndexEntry:
    # A2's snapshot s ends at offset 10 * s + 5 on both partitions (between A's barriers).
    return IndexEntry(
        kind="complete",
        app_id="A2",
        snapshot_id=snapshot,
        topic="mid",
        attempts=(f"u{snapshot}",),
        positions={0: 10 * snapshot + 5, 1: 10 * snapshot + 5},
        created_ms=0,
    )


def _pending(offset: int) -> dict[int, int]:
    return {0: offset, 1: offset}


def test_two_upstreams_writing_one_topic_are_cut_at_each_apps_pending_offsets() -> None:
    # Fan-in into one topic: B's aligned reader cuts mid per app, and its batches' reports
    # hold each app's pending offsets (right after that app's last delivered barrier).
    # Before, a pipeline with two jobs writing one topic was refused.
    b = job("b", {0: at(1), 1: at(2), 2: at(3)})  # Spark's ends: the largest pending
    b.app_ends = {
        0: {"mid": {"A": _pending(20), "A2": _pending(6)}},  # A at 1, A2 at 0
        1: {"mid": {"A": _pending(30), "A2": _pending(16)}},  # A at 2, A2 at 1
        2: {"mid": {"A": _pending(40), "A2": _pending(36)}},  # A at 3, A2 at 3
    }
    mid2 = {"mid A": MID["mid"], "mid A2": {s: _a2_barrier(s) for s in range(4)}}
    twin = job("a2", {n: {"raw2": {0: n}} for n in range(4)}, writes={"mid": "A2"})
    root, edges = job_tree([A, twin, b])
    assert sorted(e.key for e in edges) == ["mid A", "mid A2"]
    found = find_cut(root, edges, mid2)
    assert not isinstance(found, str)
    chosen, joins = found
    assert chosen == {"a": 3, "a2": 3, "b": 2}
    assert sorted((j.app_id, j.snapshot, j.downstream_batch, j.offsets["0"]) for j in joins) == [
        ("A", 3, 2, 40),
        ("A2", 3, 2, 36),
    ]
    # A2 has not committed snapshot 3 (its batches 0..2): B's batch 2 joins no snapshot
    # of A2; the cut falls back to A's snapshot 2, B's batch 1 and A2's snapshot 1.
    behind = job("a2", {n: {"raw2": {0: n}} for n in range(3)}, writes={"mid": "A2"})
    root, edges = job_tree([A, behind, b])
    found = find_cut(root, edges, mid2)
    assert not isinstance(found, str) and found[0] == {"a": 2, "a2": 1, "b": 1}


def test_two_jobs_writing_one_topic_under_one_app_id_are_refused() -> None:
    twin = job("a2", {n: {"raw2": {0: n}} for n in range(6)}, writes={"mid": "A"})
    b = job("b", {n: at(n) for n in range(4)})
    with pytest.raises(SavepointError) as refused:
        job_tree([A, twin, b])
    for part in ("topic mid", "jobs a and a2", "one app id A", "txnAppId"):
        assert part in str(refused.value), part


def test_a_fan_in_batchs_pending_offsets_are_read_from_its_offset_log_entry() -> None:
    from spark_chkpt.savepoint.pipeline.create import _fan_in_pending

    logged = {
        "mid": {"0": 40, "1": 40},
        "__chkpt__": {
            "topics": {
                "mid": {
                    "mode": "aligned",
                    "app": None,
                    "snapshots": [],
                    "apps": {
                        "A": {"snapshots": [3], "from": {"0": 30}, "pending": {"0": 40, "1": 40}},
                        "A2": {"snapshots": [], "from": {"0": 36}, "pending": {"0": 36, "1": 36}},
                    },
                },
                "single": {"mode": "aligned", "app": "S", "snapshots": [1]},
            }
        },
    }
    assert _fan_in_pending(logged) == {"mid": {"A": {0: 40, 1: 40}, "A2": {0: 36, 1: 36}}}
    assert _fan_in_pending({"mid": {"0": 1}}) == {}
