"""Snapshot N in the plain values a sink's rewind takes, the request's sink options, and
that rewind.

A rewind (:func:`spark_chkpt.savepoint.restore.restore_savepoint`, ``mode="rewind"``)
hands the rewind of the savepoint's sink kind (:mod:`spark_chkpt.sinks`) a
:class:`~spark_chkpt.snapshot.rewind.RewindPoint`.
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_chkpt.errors import SavepointError
from spark_chkpt.savepoint.manifest import Savepoint
from spark_chkpt.sinks import SinkKind, sink_kind
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest, SinkRewind


def rewind_point(point: Savepoint) -> RewindPoint:
    """Snapshot N of the savepoint in the plain values a sink's rewind takes."""
    manifest = point.manifest
    sink = manifest.sink
    return RewindPoint(
        savepoint_id=manifest.savepoint_id,
        app_id=sink.app_id if sink is not None else manifest.query_id,
        batch_id=manifest.batch_id,
        source_offsets=manifest.source_offsets,
        target=sink.target if sink is not None else None,
        version=sink.table_version if sink is not None else None,
        record=manifest.snapshot_record(),
    )


def savepoint_kind(point: Savepoint) -> SinkKind:
    """The kind of the savepoint's sink (an earlier release's savepoint: ``chkpt-delta``)."""
    sink = point.manifest.sink
    return sink_kind(sink.kind if sink is not None else None)


def sink_rewind(point: Savepoint, *, request: RewindRequest) -> SinkRewind:
    """The rewind of the savepoint's sink (a Kafka sink's revocation, a Delta table's
    rollback and its dead-letter table's, a plugin's own) for ``request``."""
    return savepoint_kind(point).rewind(point=rewind_point(point), request=request)


def sink_options_of(
    sink_options: Mapping[str, str] | None,
    *,
    table: str | None,
    dead_letter_table: str | None,
    kafka_bootstrap_servers: str | None,
    control_topic: str | None,
) -> dict[str, str]:
    """``sink_options`` with the built-in sinks' inputs given by keyword (the command
    line's flags of the same names) added under their options' names, which the Delta
    and Kafka kinds parse; one given both ways with two values is refused."""
    options = dict(sink_options or {})
    for name, value in (
        ("table", table),
        ("dead-letter-table", dead_letter_table),
        ("bootstrap-servers", kafka_bootstrap_servers),
        ("control-topic", control_topic),
    ):
        if value is not None and options.setdefault(name, value) != value:
            raise SavepointError(
                f"--{name} {value} and --sink-option {name}={options[name]}: give it once"
            )
    return options
