"""The lineage walk's pure parts: which upstream snapshots a batch's offsets cover
(barriers inside ``[start, end)``), the reads of a record's source offsets and their
alignment report, the previous entry of an upstream snapshot, the text and JSON."""

from __future__ import annotations

import json

import pytest

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.errors import ChkptError
from spark_chkpt.lineage.model import (
    Lineage,
    SnapshotNode,
    SourceRead,
    check_version,
    covered,
    previous_entry,
    reads_of,
    topic_offsets,
)


def complete(snapshot: int, positions: dict[int, int], *, app: str = "A") -> IndexEntry:
    return IndexEntry(
        kind="complete",
        app_id=app,
        snapshot_id=snapshot,
        topic="mid",
        attempts=(f"t{snapshot}",),
        positions=positions,
        counts={p: 10 for p in positions},
        sources=({"in": {"0": 100 * (snapshot + 1)}},),
    )


ENTRIES = [
    IndexEntry(kind="intent", app_id="A", snapshot_id=0, topic="mid", attempts=("t0",)),
    complete(0, {0: 10, 1: 10}),
    complete(1, {0: 21, 1: 21}),
    complete(1, {0: 21, 1: 21}),  # a re-run's duplicate entry
    complete(2, {0: 32, 1: 32}),
]


def test_a_batch_covers_the_snapshots_whose_barriers_it_read() -> None:
    read = SourceRead(topic="mid", start={0: 11, 1: 11}, end={0: 33, 1: 33})
    assert [e.snapshot_id for e in covered(ENTRIES, read)] == [1, 2]
    # An end offset is exclusive: a batch ending at a barrier's offset has not read it.
    before = SourceRead(topic="mid", start={}, end={0: 21, 1: 21})
    assert [e.snapshot_id for e in covered(ENTRIES, before)] == [0]
    # Unaligned: one partition past a barrier is enough to have read it.
    uneven = SourceRead(topic="mid", start={0: 11, 1: 11}, end={0: 22, 1: 12})
    assert [e.snapshot_id for e in covered(ENTRIES, uneven)] == [1]
    assert covered(ENTRIES, SourceRead(topic="other", start={}, end={0: 99})) == []


def test_the_previous_entry_is_the_same_apps_snapshot_before() -> None:
    entry = ENTRIES[-1]
    previous = previous_entry(ENTRIES, entry)
    assert previous is not None and previous.snapshot_id == 1
    assert previous_entry(ENTRIES, ENTRIES[1]) is None


def test_reads_of_a_record_keep_the_alignment_report_and_set_aside_other_sources() -> None:
    sources = [
        {
            "mid": {"0": 22, "1": 22},
            "__chkpt__": {"topics": {"mid": {"mode": "aligned", "app": "A", "snapshots": [1]}}},
        },
        {"logOffset": 3},
    ]
    reads, others = reads_of(sources, previous=[{"mid": {"0": 11, "1": 11}}])
    assert reads == [
        SourceRead(
            topic="mid",
            start={0: 11, 1: 11},
            end={0: 22, 1: 22},
            mode="aligned",
            upstream_app="A",
            upstream_snapshots=[1],
        )
    ]
    assert others == [{"logOffset": 3}]
    assert topic_offsets({"t": {"0": "x"}}) is None


def test_text_and_json_list_the_stages() -> None:
    lineage = Lineage(
        table="/t",
        version=4,
        snapshots=[
            SnapshotNode(
                stage=0,
                app_id="B",
                snapshot_id=3,
                writes="/t",
                table_version=4,
                rows=20,
                sources=reads_of([{"mid": {"0": 22}}], previous=[{"mid": {"0": 11}}])[0],
            ),
            SnapshotNode(
                stage=1,
                app_id="A",
                snapshot_id=1,
                writes="mid",
                barriers={0: 21},
                rows=20,
                read_by="B#3",
                sources=reads_of([{"in": {"0": 200}}], previous=[{"in": {"0": 100}}])[0],
            ),
        ],
    )
    text = lineage.to_text()
    assert "stage 0 (the table's writer)\n  snapshot 3 of query B -> /t version 4, 20 rows" in text
    assert "stage 1\n  snapshot 1 of query A -> mid, 20 rows (read by B#3)" in text
    assert "barriers at {0: 21}" in text and "read in: {0: 100} .. {0: 200}" in text
    doc = json.loads(lineage.to_json())
    assert doc["snapshots"][1]["barriers"] == {"0": 21}
    assert doc["snapshots"][1]["sources"][0]["end"] == {"0": 200}


def test_a_version_outside_the_history_is_named() -> None:
    with pytest.raises(ChkptError, match=r"has no version 9 in its history \(versions 0\.\.4\)"):
        check_version(9, [0, 1, 2, 3, 4], table="/t")
