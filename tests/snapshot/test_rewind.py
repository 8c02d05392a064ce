"""A fork's check for a sink writing a table and a dead-letter table
(``check_fork_targets``, asked through the Delta and Kafka kinds): new ones only."""

from __future__ import annotations

import pytest

from spark_chkpt.errors import SavepointError
from spark_chkpt.sinks import sink_kind
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest

POINT = RewindPoint(
    savepoint_id="sp",
    app_id="app",
    batch_id=4,
    source_offsets=[],
    target="/data/events",
    dead_letters="/data/events_dlq",
)


@pytest.mark.parametrize("kind", ["chkpt-delta", "delta-upsert", "chkpt-kafka"])
def test_a_fork_into_the_savepoints_tables_is_refused(kind: str) -> None:
    check = sink_kind(kind).check_fork
    with pytest.raises(SavepointError, match="--table /data/events/ is the table"):
        check(point=POINT, request=RewindRequest(table="/data/events/"))
    with pytest.raises(SavepointError, match="--dead-letter-table file:///data/events_dlq is"):
        check(point=POINT, request=RewindRequest(dead_letter_table="file:///data/events_dlq"))
    check(point=POINT, request=RewindRequest(table="/data/fork", dead_letter_table="/data/d2"))
    check(point=POINT, request=RewindRequest())
