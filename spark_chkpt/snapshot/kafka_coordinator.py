"""The ``chkpt-kafka`` sink's coordinator: a snapshot completes as barrier markers.

Write tasks produce every record with its attempt's tag header and flush
(:mod:`spark_chkpt.kafka.producer`); :meth:`KafkaCoordinator.commit` then fixes which
attempts snapshot N confirms in an ``intent`` entry of the control topic, writes barrier
N into every partition of the topic, and a ``complete`` entry with the barriers'
offsets. Aligned readers (:mod:`spark_chkpt.alignment.cut`) cut at the barriers and drop
records no barrier confirms.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_chkpt.alignment.barrier import BARRIER_KEY, Barrier, IndexEntry, control_topic_for
from spark_chkpt.kafka.control_topic import (
    ControlTopic,
    ensure_control_topic,
    write_entry,
)
from spark_chkpt.kafka.producer import ProducedOutput
from spark_chkpt.local.fault import FaultPoint, maybe_kill
from spark_chkpt.snapshot.coordinator import SnapshotCoordinator
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord

log = logging.getLogger(__name__)

# The Kafka sink's coordinator keeps its index readers and producer per commit process:
# Spark builds a new writer per batch, and re-reading a control topic from its start on
# every commit would cost O(history).
_INDEXES: dict[tuple[str, str, str], ControlTopic] = {}
_BARRIER_PRODUCERS: dict[str, Any] = {}


@dataclass(frozen=True)
class BarrierSettings:
    """What the Kafka sink's coordinator needs from the sink's options."""

    bootstrap_servers: str
    topic: str | None
    control_topic: str | None
    checkpoint_location: str
    app_id: str
    query_name: str | None
    retained_snapshots: int
    producer_settings: dict[str, Any]


class KafkaCoordinator(SnapshotCoordinator):
    """Completes snapshots of one query into Kafka topics by writing barrier markers."""

    sink = "chkpt-kafka"

    def __init__(self, *, settings: BarrierSettings) -> None:
        super().__init__(
            checkpoint_location=settings.checkpoint_location,
            app_id=settings.app_id,
            query_name=settings.query_name,
            retained_snapshots=settings.retained_snapshots,
        )
        self.settings = settings

    def _producer(self) -> Any:
        key = self.settings.bootstrap_servers
        producer = _BARRIER_PRODUCERS.get(key)
        if producer is None:
            from kafka import KafkaProducer

            producer = KafkaProducer(
                **{
                    **self.settings.producer_settings,
                    "bootstrap_servers": self.settings.bootstrap_servers.split(","),
                    "client_id": f"spark-chkpt-barriers-{self.settings.app_id[:8]}",
                }
            )
            _BARRIER_PRODUCERS[key] = producer
        return producer

    def _index(self, topic: str) -> ControlTopic:
        control = self.settings.control_topic or control_topic_for(topic)
        key = (self.settings.bootstrap_servers, control, topic)
        index = _INDEXES.get(key)
        if index is not None and index.current_topic_id() != index.topic_id:
            index.close()  # deleted and created again: entries of the old one don't count
            index = None
        if index is None:
            index = ControlTopic(
                bootstrap_servers=self.settings.bootstrap_servers,
                control_topic=control,
                data_topic=topic,
            )
            index.topic_id = index.current_topic_id()
            _INDEXES[key] = index
        ensure_control_topic(bootstrap_servers=self.settings.bootstrap_servers, name=control)
        index.refresh()
        return index

    def commit(self, *, messages: Sequence[ProducedOutput | None], batch_id: int) -> SnapshotRecord:
        """Complete snapshot ``batch_id`` of the Kafka sink.

        Step 1: read Spark's plan for the batch (``offsets/<batch_id>``).
        Step 2: per topic, look for an earlier commit of this batch in the control topic:
                a ``complete`` entry means the batch is done (return DUPLICATE: this
                attempt's records stay unconfirmed, so aligned readers drop them); an
                ``intent`` means a commit crashed midway: its attempts, not this one's,
                are the ones snapshot N confirms.
        Step 3: write the ``intent`` entry (flushed), fixing the confirmed attempts.
        Step 4: write barrier N into every partition of the topic. Every record of the
                batch was acknowledged before the tasks returned, so each barrier lands
                after all of the snapshot's data.
        Step 5: write the ``complete`` entry with every barrier's offset.
        Step 6: write the snapshot record to the store atomically.
        """
        started = time.monotonic()
        maybe_kill(FaultPoint.AFTER_STAGING, batch_id)
        outputs = [m for m in messages if m is not None]
        app = self.settings.app_id
        topics = sorted(
            {self.settings.topic} if self.settings.topic else {t for m in outputs for t in m.counts}
        )

        # Step 1
        plan = self.plan(batch_id)

        producer = self._producer()
        confirmed: dict[str, tuple[str, ...]] = {}
        rows = 0
        duplicate = bool(topics)
        for topic in topics:
            index = self._index(topic)
            # Step 2
            if (
                index.first(app_id=app, snapshot_id=batch_id, kind="complete") is not None
                or (index.latest_snapshot(app_id=app) or -1) > batch_id
            ):
                log.warning(
                    "chkpt-kafka batch %d was already committed to %s; this "
                    "attempt's records stay unconfirmed",
                    batch_id,
                    topic,
                )
                continue
            duplicate = False
            intent = index.first(app_id=app, snapshot_id=batch_id, kind="intent")
            counts = _counts(outputs, topic)
            if intent is None:
                # Step 3
                intent = IndexEntry(
                    kind="intent",
                    app_id=app,
                    snapshot_id=batch_id,
                    topic=topic,
                    attempts=tuple(sorted(m.attempt for m in outputs if topic in m.counts)),
                    counts=counts,
                    topic_id=index.topic_id,
                )
                write_entry(producer, control_topic=index.control_topic, entry=intent)
            else:
                log.warning(
                    "chkpt-kafka batch %d: resuming the commit of attempts %s to %s",
                    batch_id,
                    ", ".join(intent.attempts),
                    topic,
                )
            # Step 4
            barrier = Barrier(app_id=app, snapshot_id=batch_id, attempts=intent.attempts)
            futures = {
                p: producer.send(
                    topic,
                    key=BARRIER_KEY,
                    value=barrier.value(),
                    partition=p,
                    headers=Barrier.headers(),
                )
                for p in sorted(producer.partitions_for(topic))
            }
            producer.flush()
            positions = {p: int(f.get(timeout=60).offset) for p, f in futures.items()}
            maybe_kill(FaultPoint.AFTER_BARRIERS, batch_id)
            # Step 5
            write_entry(
                producer,
                control_topic=index.control_topic,
                entry=IndexEntry(
                    kind="complete",
                    app_id=app,
                    snapshot_id=batch_id,
                    topic=topic,
                    attempts=intent.attempts,
                    positions=positions,
                    counts=intent.counts,
                    topic_id=index.topic_id,
                ),
            )
            confirmed[topic] = intent.attempts
            rows += sum(intent.counts.values())

        # Step 6
        if duplicate:
            return self.duplicate(batch_id=batch_id, sources=plan.sources, started=started)
        record = self.finish(
            self.record(
                batch_id=batch_id,
                sources=plan.sources,
                outcome=CommitOutcome.COMMITTED if rows else CommitOutcome.EMPTY,
                started=started,
                rows=rows,
                attempts=[a for tags in confirmed.values() for a in tags],
            )
        )
        log.info(
            "chkpt-kafka snapshot %d: barriers in %s, %d rows confirmed, %.0f ms",
            batch_id,
            ", ".join(topics) or "no topic",
            rows,
            record.commit_ms,
        )
        return record

    def abort(self, *, messages: Sequence[ProducedOutput | None], batch_id: int) -> None:
        """Nothing to delete: no barrier will name this attempt, so aligned readers drop
        its records (plain consumers see them; they may filter on the header)."""
        maybe_kill(FaultPoint.IN_ABORT, batch_id)
        attempts = sorted(m.attempt for m in messages if m is not None)
        log.warning(
            "chkpt-kafka batch %d aborted: records of attempt(s) %s stay unconfirmed",
            batch_id,
            ", ".join(attempts) or "-",
        )


def _counts(outputs: Sequence[ProducedOutput], topic: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for output in outputs:
        for partition, n in output.counts.get(topic, {}).items():
            counts[partition] = counts.get(partition, 0) + n
    return counts
