"""The ``chkpt-kafka`` sink's coordinator: a snapshot completes as barrier markers.

Write tasks produce every record with its attempt's tag header and flush
(:mod:`spark_chkpt.kafka.sink.writer`); :meth:`KafkaCoordinator.commit` then fixes which
attempts snapshot N confirms in an ``intent`` entry of the control topic, writes barrier
N into every partition of the topic, and a ``complete`` entry with the barriers'
offsets. Aligned readers (:mod:`spark_chkpt.alignment.cut`) cut at the barriers and drop
records no barrier confirms.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_chkpt.alignment.barrier import BARRIER_KEY, Barrier, IndexEntry, control_topic_for
from spark_chkpt.errors import QueryIdentityError
from spark_chkpt.kafka.client.outage import delivery_timeout_s, flush_within
from spark_chkpt.kafka.sink.control_topic import ControlTopic, ensure_control_topic, write_entry
from spark_chkpt.kafka.sink.rows import ProducedOutput
from spark_chkpt.offsets import META_KEY
from spark_chkpt.snapshot.coordinator import SnapshotCoordinator
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.testing.failpoints import FaultPoint, armed, maybe_kill

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
            target=settings.topic,
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
        """Complete snapshot ``batch_id`` (see :meth:`_commit`). A failed commit drops this
        process's barrier producer: after an outage its connections cannot be trusted,
        and Spark's retry (or the restart) starts with a new one."""
        try:
            return self._commit(messages=messages, batch_id=batch_id)
        except BaseException:
            producer = _BARRIER_PRODUCERS.pop(self.settings.bootstrap_servers, None)
            if producer is not None:
                producer.close(timeout=0)
            raise

    def _commit(
        self, *, messages: Sequence[ProducedOutput | None], batch_id: int
    ) -> SnapshotRecord:
        """Complete snapshot ``batch_id`` of the Kafka sink.

        Step 1: read Spark's plan for the batch (``offsets/<batch_id>``).
        Step 2: per topic, look for an earlier commit of this batch in the control topic.
                Its entries record the source offsets of the run that wrote them: other
                offsets than ``offsets/<batch_id>`` mean another run claims the same
                (appId, batch) and the commit fails (:class:`QueryIdentityError`). A
                ``complete`` entry means the batch is done (this attempt's records stay
                unconfirmed, so aligned readers drop them; the snapshot record is the
                store's, or built from the entry if the crash came before the store);
                an ``intent`` means a commit crashed midway: its attempts, not this
                one's, are the ones snapshot N confirms.
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
        sources = source_offsets(plan.sources)

        producer = self._producer()
        completed: dict[str, IndexEntry] = {}  # topic -> its complete entry of batch_id
        wrote = False
        for topic in topics:
            index = self._index(topic)
            # Step 2
            complete = index.first(app_id=app, snapshot_id=batch_id, kind="complete")
            intent = index.first(app_id=app, snapshot_id=batch_id, kind="intent")
            for entry in (intent, complete):
                if entry is not None:
                    self._check_identity(entry, sources=sources, control_topic=index.control_topic)
            latest = index.latest_snapshot(app_id=app)
            if complete is not None or (latest is not None and latest > batch_id):
                log.warning(
                    "chkpt-kafka batch %d was already committed to %s; this "
                    "attempt's records stay unconfirmed",
                    batch_id,
                    topic,
                )
                if complete is not None:
                    completed[topic] = complete
                continue
            wrote = True
            if intent is None:
                # Step 3
                intent = IndexEntry(
                    kind="intent",
                    app_id=app,
                    snapshot_id=batch_id,
                    topic=topic,
                    attempts=tuple(sorted(m.attempt for m in outputs if topic in m.counts)),
                    counts=_counts(outputs, topic),
                    sources=sources,
                    topic_id=index.topic_id,
                )
                write_entry(
                    producer,
                    control_topic=index.control_topic,
                    entry=intent,
                    settings=self.settings.producer_settings,
                )
                maybe_kill(FaultPoint.AFTER_INTENT, batch_id)
            else:
                log.warning(
                    "chkpt-kafka batch %d: resuming the commit of attempts %s to %s",
                    batch_id,
                    ", ".join(intent.attempts),
                    topic,
                )
            # Step 4
            barrier = Barrier(app_id=app, snapshot_id=batch_id, attempts=intent.attempts)
            positions = self._write_barriers(producer, topic=topic, barrier=barrier)
            maybe_kill(FaultPoint.AFTER_BARRIERS, batch_id)
            # Step 5
            complete = IndexEntry(
                kind="complete",
                app_id=app,
                snapshot_id=batch_id,
                topic=topic,
                attempts=intent.attempts,
                positions=positions,
                counts=intent.counts,
                sources=sources,
                topic_id=index.topic_id,
            )
            write_entry(
                producer,
                control_topic=index.control_topic,
                entry=complete,
                settings=self.settings.producer_settings,
            )
            maybe_kill(FaultPoint.AFTER_COMPLETE, batch_id)
            completed[topic] = complete

        # Step 6
        if topics and not wrote:
            return self.duplicate(
                batch_id=batch_id,
                sources=plan.sources,
                started=started,
                committed=lambda: (
                    self._record_of(
                        completed, batch_id=batch_id, sources=plan.sources, started=started
                    )
                    if completed
                    else None
                ),
            )
        record = self.finish(
            self._record_of(completed, batch_id=batch_id, sources=plan.sources, started=started)
        )
        log.info(
            "chkpt-kafka snapshot %d: barriers in %s, %d rows confirmed, %.0f ms",
            batch_id,
            ", ".join(topics) or "no topic",
            record.rows,
            record.commit_ms,
        )
        return record

    def _write_barriers(self, producer: Any, *, topic: str, barrier: Barrier) -> dict[int, int]:
        """Step 4: barrier ``barrier`` into every partition of ``topic``, acknowledged;
        returns each partition's barrier offset. With ``between-barriers`` armed, each
        barrier is flushed on its own and the kill comes after the first one."""
        split = armed(FaultPoint.BETWEEN_BARRIERS, barrier.snapshot_id)
        futures = {}
        for partition in sorted(producer.partitions_for(topic)):
            futures[partition] = producer.send(
                topic,
                key=BARRIER_KEY,
                value=barrier.value(),
                partition=partition,
                headers=Barrier.headers(),
            )
            if split:
                flush_within(producer, settings=self.settings.producer_settings)
                maybe_kill(FaultPoint.BETWEEN_BARRIERS, barrier.snapshot_id)
        flush_within(producer, settings=self.settings.producer_settings)
        wait = delivery_timeout_s(self.settings.producer_settings)
        return {p: int(f.get(timeout=wait).offset) for p, f in futures.items()}

    def _record_of(
        self,
        completed: Mapping[str, IndexEntry],
        *,
        batch_id: int,
        sources: Sequence[Any],
        started: float,
    ) -> SnapshotRecord:
        """The snapshot record the ``complete`` entries of one batch describe: the rows and
        attempts they confirm, whichever commit call wrote them."""
        rows = sum(n for entry in completed.values() for n in entry.counts.values())
        if self.target_name is None and completed:  # topics named by the rows
            self.target_name = ",".join(sorted(completed))
        return self.record(
            batch_id=batch_id,
            sources=sources,
            outcome=CommitOutcome.COMMITTED if rows else CommitOutcome.EMPTY,
            started=started,
            rows=rows,
            attempts=[a for entry in completed.values() for a in entry.attempts],
        )

    def _check_identity(
        self, entry: IndexEntry, *, sources: tuple[Any, ...], control_topic: str
    ) -> None:
        """Step 2's guard: an entry of this (appId, batch) must come from a run that read
        the same source offsets (entries written before they carried offsets pass)."""
        if entry.sources is None or list(entry.sources) == list(sources):
            return
        raise QueryIdentityError(
            f"chkpt-kafka: control topic {control_topic} already holds an {entry.kind!r} "
            f"entry (offset {entry.offset}) for topic {entry.topic}, appId {entry.app_id}, "
            f"batch {entry.snapshot_id}, written by a run that read source offsets "
            f"{json.dumps(list(entry.sources))}; this run's plan "
            f"({self.checkpoint.uri}/offsets/{entry.snapshot_id}) has "
            f"{json.dumps(list(sources))}. Two different queries (or a query restarted "
            f"from a new checkpoint) share appId {entry.app_id}: give this query its own "
            f"txnAppId (or its own controlTopic), or restart it from its original "
            f"checkpoint folder"
        )

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


def source_offsets(sources: Sequence[Any]) -> tuple[Any, ...]:
    """The batch's source offsets as the index entries record them: each source's
    topic-partition offsets, without the alignment report (``__chkpt__``), which may
    differ between two runs of the same batch; in their JSON form."""
    return tuple(
        json.loads(
            json.dumps(
                {k: v for k, v in s.items() if k != META_KEY} if isinstance(s, dict) else s,
                sort_keys=True,
            )
        )
        for s in sources
    )


def _counts(outputs: Sequence[ProducedOutput], topic: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for output in outputs:
        for partition, n in output.counts.get(topic, {}).items():
            counts[partition] = counts.get(partition, 0) + n
    return counts
