"""The ``chkpt-kafka`` sink as the tools above it ask it (:mod:`spark_chkpt.sinks`): its
topics carry barriers, its rewind is a revocation
(:class:`~spark_chkpt.kafka.sink.rewind.KafkaRewind`), ``status`` reads its snapshot's
barrier offsets from the ``complete`` entries of its control topics."""

from __future__ import annotations

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.errors import SavepointError
from spark_chkpt.kafka.sink.rewind import KafkaRewind, KafkaRewindRequest
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest, check_fork_tables
from spark_chkpt.snapshot.tools import Tool


class KafkaSinkKind:
    """The ``chkpt-kafka`` sink's kind."""

    name = "chkpt-kafka"
    has_barriers = True
    target_option = "topic"
    progress_hint = "(--bootstrap-servers for its barrier offsets)"
    tools: frozenset[Tool] = frozenset({"lineage", "migrate"})

    def rewind(self, *, point: RewindPoint, request: RewindRequest) -> KafkaRewind:
        own = KafkaRewindRequest.of(request)
        if own.table is not None:
            raise SavepointError(
                f"--table {own.table}: savepoint {point.savepoint_id}'s query writes "
                f"Kafka (topic {point.target}), not a table"
            )
        return KafkaRewind(
            point=point, bootstrap_servers=own.bootstrap_servers, control_topic=own.control_topic
        )

    def check_fork(self, *, point: RewindPoint, request: RewindRequest) -> None:
        own = KafkaRewindRequest.of(request)
        check_fork_tables(point=point, table=own.table, dead_letter_table=own.dead_letter_table)

    def holds(self, *, target: str) -> bool:
        return False  # it writes topics, not paths

    def data_source(self) -> None:
        return None  # chkpt-kafka's format is spark_chkpt.connectors'

    def describe(
        self, *, target: str | None, app_id: str, batch_id: int, version: int | None
    ) -> str:
        return f"barrier {batch_id} of app {app_id}"

    def barrier_topics(self, target: str | None) -> tuple[str, ...]:
        return tuple(t.strip() for t in (target or "").split(",") if t.strip())

    def progress(
        self, *, record: SnapshotRecord, bootstrap_servers: str | None
    ) -> dict[str, dict[str, int]] | None:
        if not bootstrap_servers or not record.target:
            return None
        from spark_chkpt.kafka.control.topic import ControlTopic

        found: dict[str, dict[str, int]] = {}
        for topic in record.target.split(","):
            index = ControlTopic(
                bootstrap_servers=bootstrap_servers,
                control_topic=control_topic_for(topic),
                data_topic=topic,
            )
            try:
                index.refresh()
                entry = index.first(
                    app_id=record.app_id, snapshot_id=record.batch_id, kind="complete"
                )
            finally:
                index.close()
            if entry is not None:
                found[topic] = {str(p): o for p, o in sorted(entry.positions.items())}
        return found


CHKPT_KAFKA = KafkaSinkKind()
