"""Which recorded point a restarted ``chkpt-kafka`` coordinator reads its control topic
from, and when it reads it from the start instead (pure: a snapshot store under
``tmp_path``, a stand-in for the control topic reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.kafka.sink.control_read import ReadPoint, doubt, recorded_point
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.store import SnapshotStore

POINT = {"control_topic": "__chkpt.t", "offset": 40, "id": "id-1", "generation": 1}


def _store(tmp_path: Path, *records: tuple[int, str, dict[str, Any]]) -> SnapshotStore:
    store = SnapshotStore(checkpoint_location=str(tmp_path))
    for batch_id, app_id, read in records:
        store.put(
            SnapshotRecord(
                batch_id=batch_id,
                app_id=app_id,
                query_name=None,
                sink="chkpt-kafka",
                source_offsets=[],
                table_version=None,
                rows=0,
                files=0,
                bytes=0,
                commit_ms=1.0,
                control_read=read,
            )
        )
    return store


def _point(store: SnapshotStore, *, before: int | None, app_id: str = "app") -> ReadPoint | None:
    return recorded_point(
        store,
        app_id=app_id,
        sink="chkpt-kafka",
        topic="t",
        control_topic="__chkpt.t",
        before=before,
    )


def test_the_newest_record_before_the_batch_holds_the_point(tmp_path: Path) -> None:
    later = {**POINT, "offset": 44}
    store = _store(tmp_path, (6, "app", {"t": POINT}), (7, "app", {"t": later}))
    assert _point(store, before=7) == ReadPoint.of(POINT)
    assert _point(store, before=8) == ReadPoint.of(later)
    assert _point(store, before=None) == ReadPoint.of(later)  # resume: the newest
    assert _point(store, before=6) is None  # no record before: read from 0
    assert SnapshotStore(checkpoint_location=str(tmp_path)).get(7).control_read == {"t": later}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "read",
    [
        {},  # a record of an older release
        {"t": {**POINT, "id": None}},  # a broker without topic ids
        {"t": {**POINT, "control_topic": "__chkpt.other"}},  # the sink's controlTopic changed
        {"t": {**POINT, "offset": -1}},
        {"t": {"offset": 40}},
        {"u": POINT},
    ],
)
def test_no_usable_point_reads_from_the_start(tmp_path: Path, read: dict[str, Any]) -> None:
    assert _point(_store(tmp_path, (6, "app", read)), before=7) is None


def test_a_record_of_another_app_id_is_not_used(tmp_path: Path) -> None:
    assert _point(_store(tmp_path, (6, "other", {"t": POINT})), before=7) is None


class _Index:
    def __init__(self, entries: list[IndexEntry], *, known: str | None = "id-1") -> None:
        self.entries = entries
        self.known = known

    def control_topic_id(self) -> str | None:
        return self.known


def _entry(app_id: str, generation: int, offset: int) -> IndexEntry:
    return IndexEntry(
        kind="complete",
        app_id=app_id,
        snapshot_id=offset,
        topic="t",
        attempts=(),
        positions={},
        generation=generation,
        offset=offset,
    )


def test_an_entry_of_an_older_generation_after_the_point_is_a_doubt() -> None:
    point = ReadPoint.of(POINT)
    assert point is not None
    fine = _Index([_entry("app", 1, 40), _entry("other", 0, 41), _entry("app", 2, 42)])
    assert doubt(fine, point=point, app_id="app") is None  # type: ignore[arg-type]
    stale = _Index([_entry("app", 1, 40), _entry("app", 0, 43)])
    why = doubt(stale, point=point, app_id="app")  # type: ignore[arg-type]
    assert why is not None and "offset 43" in why and "generation 0" in why
    unknown = _Index([], known=None)
    assert doubt(unknown, point=point, app_id="app") == "its Kafka id is unknown now"  # type: ignore[arg-type]
