"""A fork's check for a sink writing a table and a dead-letter table
(``check_fork_target``, asked through the Delta and Kafka kinds with their own
options ``table`` and ``dead-letter-table``): new ones only."""

from __future__ import annotations

import pytest

from spark_chkpt.errors import SavepointError
from spark_chkpt.sinks import sink_kind
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest

POINT = RewindPoint(
    savepoint_id="sp",
    app_id="app",
    batch_id=4,
    source_offsets=[],
    target="/data/events",
    record=SnapshotRecord(
        batch_id=4,
        app_id="app",
        query_name=None,
        sink="chkpt-delta",
        source_offsets=[],
        table_version=None,
        rows=0,
        files=0,
        bytes=0,
        commit_ms=0.0,
        target="/data/events",
        dead_letter_target="/data/events_dlq",
    ),
)


@pytest.mark.parametrize("kind", ["chkpt-delta", "delta-upsert", "chkpt-kafka"])
def test_a_fork_into_the_savepoints_tables_is_refused(kind: str) -> None:
    check = sink_kind(kind).check_fork
    with pytest.raises(SavepointError, match="--table /data/events/ is the table"):
        check(point=POINT, request=RewindRequest(sink_options={"table": "/data/events/"}))
    with pytest.raises(SavepointError, match="--dead-letter-table file:///data/events_dlq is"):
        check(
            point=POINT,
            request=RewindRequest(sink_options={"dead-letter-table": "file:///data/events_dlq"}),
        )
    check(
        point=POINT,
        request=RewindRequest(
            sink_options={"table": "/data/fork", "dead-letter-table": "/data/d2"}
        ),
    )
    check(point=POINT, request=RewindRequest())


def test_each_kind_parses_its_own_request_from_the_sink_options() -> None:
    from spark_chkpt.delta.rewind import DeltaRewindRequest
    from spark_chkpt.kafka.sink.rewind import KafkaRewindRequest

    request = RewindRequest(
        storage_options={"AWS_REGION": "x"},
        discard_other_writers=["no-app-id"],
        sink_options={"table": "/t", "dead-letter-table": "/d", "control-topic": "c"},
    )
    assert DeltaRewindRequest.of(request) == DeltaRewindRequest(
        table="/t",
        dead_letter_table="/d",
        storage_options={"AWS_REGION": "x"},
        discard_other_writers=("no-app-id",),
    )
    kafka = KafkaRewindRequest.of(RewindRequest(sink_options={"bootstrap-servers": "b:9092"}))
    assert (kafka.bootstrap_servers, kafka.control_topic, kafka.table) == ("b:9092", None, None)
    with pytest.raises(SavepointError, match="--table /t: savepoint sp's query writes Kafka"):
        sink_kind("chkpt-kafka").rewind(point=POINT, request=request)


def test_the_built_in_flags_travel_as_the_kinds_options() -> None:
    from spark_chkpt.savepoint.rewind import sink_options_of

    given = {"table": None, "dead_letter_table": None, "control_topic": None}
    assert sink_options_of({"path": "/p"}, kafka_bootstrap_servers="b:1", **given) == {
        "path": "/p",
        "bootstrap-servers": "b:1",
    }
    assert sink_options_of({"table": "/t"}, kafka_bootstrap_servers=None, **given) == {
        "table": "/t"
    }
    with pytest.raises(SavepointError, match="--table /a and --sink-option table=/b: give"):
        sink_options_of(
            {"table": "/b"},
            table="/a",
            dead_letter_table=None,
            kafka_bootstrap_servers=None,
            control_topic=None,
        )
