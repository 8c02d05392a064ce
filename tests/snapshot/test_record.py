"""The snapshot record's JSON: a sink plugin's own part travels, the built-in sinks'
records stay as they were."""

from __future__ import annotations

import json

from spark_chkpt.snapshot.record import SnapshotRecord


def record(**changes: object) -> SnapshotRecord:
    base = dict(
        batch_id=3,
        app_id="app",
        query_name=None,
        sink="chkpt-delta",
        source_offsets=[{"t": {"0": 5}}],
        table_version=7,
        rows=1,
        files=1,
        bytes=10,
        commit_ms=1.0,
        created_ms=1,
    )
    return SnapshotRecord(**{**base, **changes})  # type: ignore[arg-type]


def test_a_plugins_own_part_survives_the_json() -> None:
    mine = record(sink="chkpt-jsonl", sink_state={"files": ["a.jsonl"], "n": 2})
    assert SnapshotRecord.from_json(mine.to_json()) == mine


def test_a_record_without_one_is_written_as_before() -> None:
    doc = json.loads(record().to_json())
    assert "sink_state" not in doc and "control_read" not in doc
    assert SnapshotRecord.from_json(record().to_json()).sink_state == {}
