"""Which rewind a savepoint's sink takes, and snapshot N in the plain values it takes.

A rewind (:func:`spark_chkpt.savepoint.restore.restore_savepoint`, ``mode="rewind"``)
hands the sink's own :class:`~spark_chkpt.snapshot.rewind.SinkRewind` a
:class:`~spark_chkpt.snapshot.rewind.RewindPoint`: a ``chkpt-kafka`` sink's is
:class:`~spark_chkpt.kafka.sink.rewind.KafkaRewind` (revocation), every other sink's (a
Delta table's) :class:`~spark_chkpt.delta.sink.rewind.DeltaRewind`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spark_chkpt.delta.sink.rewind import DeltaRewind
from spark_chkpt.errors import SavepointError
from spark_chkpt.kafka.sink.rewind import KafkaRewind
from spark_chkpt.savepoint.manifest import Savepoint
from spark_chkpt.snapshot.rewind import RewindPoint, SinkRewind


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
        dead_letters=sink.dead_letters if sink is not None else None,
        dead_letter_version=sink.dead_letter_version if sink is not None else None,
        record=manifest.snapshot_record(),
    )


def sink_rewind(
    point: Savepoint,
    *,
    table: str | None,
    storage_options: Mapping[str, str] | None,
    discard_other_writers: Sequence[str],
    dead_letter_table: str | None,
    kafka_bootstrap_servers: str | None,
    control_topic: str | None,
) -> SinkRewind:
    """The rewind of the savepoint's sink: a Kafka sink's revocation, else a Delta
    table's rollback (and its dead-letter table's)."""
    manifest = point.manifest
    sink = manifest.sink
    if sink is not None and sink.kind == "chkpt-kafka":
        if table is not None:
            raise SavepointError(
                f"--table {table}: savepoint {manifest.savepoint_id}'s query writes Kafka "
                f"(topic {sink.target}), not a table"
            )
        return KafkaRewind(
            point=rewind_point(point),
            bootstrap_servers=kafka_bootstrap_servers,
            control_topic=control_topic,
        )
    return DeltaRewind(
        point=rewind_point(point),
        table=table,
        dead_letter_table=dead_letter_table,
        storage_options=storage_options,
        discard_other_writers=discard_other_writers,
    )
