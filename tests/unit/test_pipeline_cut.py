"""Where a pipeline savepoint cuts (spark_chkpt.savepoint.pipeline.find_cut): the newest
upstream snapshot every downstream job has a batch ending at. Pure: the jobs' batch end
offsets and the barrier index entries are given."""

from __future__ import annotations

import pytest

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.errors import SavepointError
from spark_chkpt.savepoint.pipeline import JobCheckpoint, find_cut, job_tree


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


def test_fan_in_and_unjoined_jobs_are_refused() -> None:
    other = job("x", {0: {"raw2": {0: 1}}}, writes={"mid2": "X"})
    both = job("b", {0: {**at(0), "mid2": {0: 1}}})
    with pytest.raises(SavepointError, match="fan-in"):
        job_tree([A, other, both])
    with pytest.raises(SavepointError, match="2 pipelines"):
        job_tree([A, job("y", {0: {"elsewhere": {0: 1}}})])


def test_jobs_sharing_a_query_name_are_named_by_their_folders() -> None:
    from spark_chkpt.savepoint.pipeline import _distinct_names

    one, two = job("stage_a", {0: {"raw": {0: 1}}}), job("stage_a", {0: at(0)})
    two.checkpoint = "/chk/second/"
    assert [j.name for j in _distinct_names([one, two])] == ["stage_a", "second"]


def test_two_upstreams_writing_one_topic_are_refused_naming_both() -> None:
    # Fan-in into one topic: the cut would need both apps' barriers on every partition.
    # Before, the second writer silently replaced the first (only its barriers joined).
    twin = job("a2", {n: {"raw2": {0: n}} for n in range(6)}, writes={"mid": "A2"})
    b = job("b", {n: at(n) for n in range(4)})
    with pytest.raises(SavepointError) as refused:
        job_tree([A, twin, b])
    for part in ("topic mid", "jobs a and a2", "fan-in", "every partition"):
        assert part in str(refused.value), part
