"""A savepoint rewind of a query that writes Kafka (``chkpt-kafka``): revoke, don't delete.

Records the query wrote after snapshot N are in the topic and readers may have read
them; a topic cannot be rolled back. The rewind revokes them instead (DESIGN.md,
"Generations, fencing and pipelines"): a ``revoke`` entry in each topic's control topic
(``__chkpt.<topic>``) names the app's snapshots after N, the attempts they confirmed and
the offsets from barrier N to the log end, under the restore's new generation.

More: docs/concepts/kafka-internals.md (spark_chkpt/kafka/sink/rewind.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_chkpt.alignment.barrier import IndexEntry, control_topic_for
from spark_chkpt.errors import SavepointError
from spark_chkpt.kafka.control.topic import ControlTopic, write_entry
from spark_chkpt.kafka.sink.committer import source_offsets
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest

log = logging.getLogger(__name__)


BOOTSTRAP_SERVERS, CONTROL_TOPIC = "bootstrap-servers", "control-topic"  # its sink options


@dataclass(frozen=True)
class KafkaRewindRequest:
    """A ``chkpt-kafka`` sink's own inputs of a rewind or fork, parsed from the request's
    sink options (``--bootstrap-servers``, ``--control-topic`` on the command line): the
    brokers of its topics, its control topic if the sink set ``controlTopic``; and a
    ``table`` or ``dead_letter_table`` given by mistake (refused: it writes topics)."""

    bootstrap_servers: str | None = None
    control_topic: str | None = None
    table: str | None = None
    dead_letter_table: str | None = None

    @classmethod
    def of(cls, request: RewindRequest) -> KafkaRewindRequest:
        options = request.sink_options
        return cls(
            bootstrap_servers=options.get(BOOTSTRAP_SERVERS),
            control_topic=options.get(CONTROL_TOPIC),
            table=options.get("table"),
            dead_letter_table=options.get("dead-letter-table"),
        )


@dataclass(frozen=True)
class KafkaRewound:
    """What a ``chkpt-kafka`` rewind did (:class:`~spark_chkpt.snapshot.rewind.Rewound`):
    the snapshots it revoked, per topic."""

    revoked: Mapping[str, tuple[int, ...]]

    def lines(self, *, generation: int, resumes_at: int) -> list[str]:
        return [
            f"topic {topic}: snapshots {', '.join(map(str, snapshots)) or 'none'} after "
            f"{resumes_at - 1} revoked at generation {generation} (readers skip their "
            "records)"
            for topic, snapshots in self.revoked.items()
        ]


@dataclass(frozen=True)
class TopicRewind:
    """One topic of a Kafka rewind: its control topic and snapshot N's ``complete`` entry."""

    topic: str
    control_topic: str
    kept: IndexEntry


class KafkaRewind:
    """The :class:`~spark_chkpt.snapshot.rewind.SinkRewind` of a ``chkpt-kafka`` sink:
    ``bootstrap_servers`` (required), and ``control_topic`` if the sink set
    ``controlTopic``."""

    def __init__(
        self,
        *,
        point: RewindPoint,
        bootstrap_servers: str | None,
        control_topic: str | None = None,
    ) -> None:
        self.point = point
        self.bootstrap_servers = bootstrap_servers
        self.control_topic = control_topic
        self.revocations: RevocationPlan | None = None

    def plan(self) -> int:
        self.revocations = self._checked()
        return self.revocations.generation

    def apply(self, *, generation: int, checkpoint_location: str) -> KafkaRewound:
        plan = self.revocations or self._checked()
        return KafkaRewound(revoked=write_revocations(plan, generation=generation))

    def _checked(self) -> RevocationPlan:
        return plan_kafka_rewind(
            point=self.point,
            bootstrap_servers=self.bootstrap_servers,
            control_topic=self.control_topic,
        )


@dataclass(frozen=True)
class RevocationPlan:
    """What :func:`plan_kafka_rewind` found: the app, snapshot N, the new generation and
    each topic the query writes."""

    bootstrap_servers: str
    app_id: str
    batch: int
    generation: int
    topics: tuple[TopicRewind, ...]
    client_settings: Mapping[str, Any]


def _index(
    *, bootstrap_servers: str, control_topic: str, topic: str, settings: Mapping[str, Any]
) -> ControlTopic:
    index = ControlTopic(
        bootstrap_servers=bootstrap_servers,
        control_topic=control_topic,
        data_topic=topic,
        client_settings=settings,
        client_id="spark-chkpt-rewind",
    )
    index.topic_id = index.current_topic_id()
    return index


def plan_kafka_rewind(
    *,
    point: RewindPoint,
    bootstrap_servers: str | None,
    control_topic: str | None = None,
    client_settings: Mapping[str, Any] | None = None,
) -> RevocationPlan:
    """Step 2 of a Kafka rewind: the checks and the new generation; changes nothing."""
    savepoint_id, target = point.savepoint_id, point.target
    if not target:
        raise SavepointError(f"savepoint {savepoint_id} does not name a Kafka sink")
    if not bootstrap_servers:
        raise SavepointError(
            f"savepoint {savepoint_id}: rewinding a query that writes Kafka (topic "
            f"{target}) writes a revocation to its control topic: give the brokers "
            "with --bootstrap-servers (kafka_bootstrap_servers=...)"
        )
    settings = dict(client_settings or {})
    batch, app_id = point.batch_id, point.app_id
    sources = source_offsets(point.source_offsets)
    topics = []
    generation = 0
    for topic in target.split(","):
        control = control_topic or control_topic_for(topic)
        index = _index(
            bootstrap_servers=bootstrap_servers,
            control_topic=control,
            topic=topic,
            settings=settings,
        )
        try:
            if not index.exists():
                raise SavepointError(
                    f"savepoint {savepoint_id}: control topic {control} of topic "
                    f"{topic} does not exist: nothing records snapshot {batch} of app "
                    f"{app_id} (give --control-topic if the sink set controlTopic). "
                    "Nothing was changed."
                )
            index.refresh()
            kept = index.first(app_id=app_id, snapshot_id=batch, kind="complete")
            if kept is None:
                raise SavepointError(
                    f"savepoint {savepoint_id}: control topic {control} holds no "
                    f"live 'complete' entry of snapshot {batch} of app {app_id} in topic "
                    f"{topic} (never committed there, or revoked by an earlier rewind): "
                    "it is not the topic this savepoint's query wrote. Nothing was changed."
                )
            if kept.sources is not None and list(kept.sources) != list(sources):
                raise SavepointError(
                    f"savepoint {savepoint_id}: snapshot {batch} of app {app_id} "
                    f"in {topic} (control topic {control}, offset {kept.offset}, generation "
                    f"{kept.generation}) came from other source offsets than the "
                    "savepoint's: it belongs to another timeline (a rewind ran the batch "
                    "again with other boundaries). Nothing was changed."
                )
            generation = max(
                [generation, *(e.generation for e in index.entries if e.app_id == app_id)]
            )
        finally:
            index.close()
        topics.append(TopicRewind(topic=topic, control_topic=control, kept=kept))
    return RevocationPlan(
        bootstrap_servers=bootstrap_servers,
        app_id=app_id,
        batch=batch,
        generation=generation + 1,
        topics=tuple(topics),
        client_settings=settings,
    )


def write_revocations(
    rewind: RevocationPlan, *, generation: int | None = None
) -> dict[str, tuple[int, ...]]:
    """Step 5 of a Kafka rewind: a ``revoke`` entry per topic under ``generation`` (the
    plan's, or the one an interrupted restore recorded), unless one is there already.
    Returns the snapshots revoked per topic."""
    from spark_chkpt.kafka.client.factory import kafka_consumer, kafka_producer
    from spark_chkpt.kafka.client.metadata import list_offsets, partitions_of

    gen = rewind.generation if generation is None else generation
    revoked: dict[str, tuple[int, ...]] = {}
    servers = rewind.bootstrap_servers
    producer = kafka_producer(
        bootstrap_servers=servers, settings=rewind.client_settings, acks="all"
    )
    consumer = kafka_consumer(
        bootstrap_servers=servers, settings=rewind.client_settings, group_id=None
    )
    try:
        for part in rewind.topics:
            index = _index(
                bootstrap_servers=rewind.bootstrap_servers,
                control_topic=part.control_topic,
                topic=part.topic,
                settings=rewind.client_settings,
            )
            try:
                index.refresh()
                done = [
                    r
                    for r in index.revocations(app_id=rewind.app_id)
                    if r.snapshot_id == rewind.batch and r.generation == gen
                ]
                if done:
                    revoked[part.topic] = done[0].revoked
                    continue
                later = [
                    e
                    for e in index.live()
                    if e.app_id == rewind.app_id and e.snapshot_id > rewind.batch
                ]
                ktps = partitions_of(consumer, part.topic)
                partitions = [ktp.partition for ktp in ktps]
                ends: dict[Any, int] = list_offsets(
                    consumer, ktps, functools.partial(_end_offsets, consumer, ktps)
                )
                starts = {}
                for p in partitions:
                    before = [
                        e.positions[p]
                        for e in index.complete(app_id=rewind.app_id)
                        if e.snapshot_id <= rewind.batch and p in e.positions
                    ]
                    starts[p] = max(before) + 1 if before else 0
                entry = IndexEntry(
                    kind="revoke",
                    app_id=rewind.app_id,
                    snapshot_id=rewind.batch,
                    topic=part.topic,
                    attempts=tuple(sorted({a for e in later for a in e.attempts})),
                    positions={tp.partition: int(end) for tp, end in ends.items()},
                    starts=starts,
                    revoked=tuple(sorted({e.snapshot_id for e in later})),
                    topic_id=index.topic_id,
                    sources=part.kept.sources,
                    generation=gen,
                )
                write_entry(
                    producer,
                    control_topic=part.control_topic,
                    entry=entry,
                    settings=rewind.client_settings,
                )
                revoked[part.topic] = entry.revoked
                log.warning(
                    "revoked snapshots %s of app %s in topic %s (control topic %s, "
                    "generation %d): readers skip them",
                    list(entry.revoked),
                    rewind.app_id,
                    part.topic,
                    part.control_topic,
                    gen,
                )
            finally:
                index.close()
    finally:
        producer.close(timeout=5)
        consumer.close()
    return revoked


def _end_offsets(consumer: Any, ktps: list[Any], timeout_ms: int) -> dict[Any, int]:
    return dict(consumer.end_offsets(ktps, timeout_ms=timeout_ms))
