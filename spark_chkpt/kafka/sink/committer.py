"""The ``chkpt-kafka`` sink's coordinator: a snapshot completes as barrier markers.

Write tasks produce every record with its attempt's tag header and flush
(:mod:`spark_chkpt.kafka.sink.writer`); :meth:`KafkaCoordinator.commit` then fixes which
attempts snapshot N confirms in an ``intent`` entry of the control topic, writes barrier
N into every partition of the topic, and a ``complete`` entry with the barriers'
offsets. Aligned readers (:mod:`spark_chkpt.alignment.cut`) cut at the barriers and drop
records no barrier confirms.

With ``delivery=exactly-once-transactions`` the intent also records the write tasks'
open Kafka transactions, which the commit ends with ``EndTxn(commit)`` before the
barriers (if any) and the ``complete`` entry; :meth:`KafkaCoordinator.resume` commits a
crashed driver's recorded transactions before the next tasks run. Those steps are in
:mod:`spark_chkpt.kafka.sink.transaction_steps`; the hooks here call them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from spark_chkpt.alignment.barrier import Barrier, IndexEntry, control_topic_for
from spark_chkpt.errors import FencedError, QueryIdentityError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.kafka.client.factory import connection_settings
from spark_chkpt.kafka.client.pool import ClientCache
from spark_chkpt.kafka.control.topic import ControlTopic, ensure_control_topic, write_entry
from spark_chkpt.kafka.sink.barriers import (
    BARRIER_PRODUCERS,
    barrier_producer,
    barrier_producer_key,
    write_barriers,
)
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.kafka.sink.control_read import ReadPoint, doubt, read_point, recorded_point
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.sink.transaction_steps import (
    TransactionSteps,
    open_intent,
    recorded_transactions,
)
from spark_chkpt.offsets import META_KEY
from spark_chkpt.snapshot.checkpoint import BatchPlan
from spark_chkpt.snapshot.coordinator import Batch, Committed, SnapshotCoordinator
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings

log = logging.getLogger(__name__)

# The Kafka sink's coordinator keeps its index readers and producer per commit process:
# Spark builds a new writer per batch, and re-reading a control topic from its start on
# every commit would cost O(history).
_INDEXES: ClientCache[ControlTopic] = ClientCache(close=lambda index: index.close())


# A commit held this long between finding its batch not committed and its barriers reads
# the control topic again before writing them (KafkaCoordinator._refuse_if_taken_over).
HELD_S = 1.0


@dataclass
class KafkaBatch(Batch):
    """One commit call of the Kafka sink."""

    outputs: Sequence[ProducedOutput] = ()
    topics: Sequence[str] = ()
    sources: tuple[Any, ...] = ()  # the plan's offsets as the index entries record them
    producer: Any = None
    # step 3: the topics still to commit (with their index and a crashed commit's intent)
    pending: list[tuple[str, ControlTopic, IndexEntry | None]] = field(default_factory=list)
    completed: dict[str, IndexEntry] = field(default_factory=dict)  # topic -> complete entry
    transactions: Any = None  # the TransactionClient of this commit (transactions only)
    indexes: dict[str, ControlTopic] = field(default_factory=dict)  # read in this commit
    checked_at: float = 0.0  # when step 3 found the batch not committed (time.monotonic)
    read: dict[str, ReadPoint] = field(default_factory=dict)  # topic -> where the fence read to


class KafkaCoordinator(SnapshotCoordinator[KafkaBatch]):
    """Completes snapshots of one query into Kafka topics by writing barrier markers.

    The steps of :meth:`commit` (the template of :mod:`spark_chkpt.snapshot.coordinator`):
    1. the plan, and the fence: the entries of this app id carry their writer's
    generation, and a newer one than the checkpoint's refuses the commit before any
    entry or barrier; 2. the plan's offsets as entries record them, the barrier producer;
    3. per topic, an earlier commit of the batch in the control topic
    (:meth:`already_committed`); 4. per topic not done, the ``intent`` entry, barrier N
    in every partition, the ``complete`` entry (:meth:`make_visible`); 5. the snapshot
    record to the store. Kafka has no commit conflicts: nothing is retried.
    """

    sink = "chkpt-kafka"

    def __init__(self, *, config: KafkaSinkConfig, snapshot: SnapshotSettings) -> None:
        """``config``: the sink's options; ``snapshot``: the protocol's settings it
        produced (:meth:`KafkaSinkConfig.snapshot_settings`)."""
        super().__init__(snapshot=snapshot, target=config.topic)
        self.config = config
        self.transactions = TransactionSteps(
            config=config, app_id=self.app_id, index=self._index, producer=self._producer
        )

    def _producer(self) -> Any:
        return barrier_producer(self.config, app_id=self.app_id)

    def _index(self, topic: str, batch: KafkaBatch | None = None) -> ControlTopic:
        """``topic``'s control topic, read to its end. Within one commit (``batch``) the
        topic's id is checked once: the fence and the check for an earlier commit of the
        batch both read the index, milliseconds apart, and each metadata request of the
        reader costs about 11 ms (kafka-python spaces them)."""
        if batch is not None and topic in batch.indexes:
            index = batch.indexes[topic]
            index.refresh()
            return index
        control = self.config.control_topic or control_topic_for(topic)
        # Per app id: a reader built from this app's recorded point holds none of the
        # entries other apps wrote before it (control_read).
        key = (self.config.bootstrap_servers, control, topic, self.app_id)
        # First: the reader's metadata below is then fetched after the topic exists.
        ensure_control_topic(
            bootstrap_servers=self.config.bootstrap_servers,
            name=control,
            settings=self.config.producer_settings,
            replication_factor=self.config.control_replication_factor,
            min_insync_replicas=self.config.control_min_insync_replicas,
        )

        seeked: list[ReadPoint] = []

        def build(*, from_start: bool = False) -> ControlTopic:
            return self._read_index(
                topic=topic, control=control, batch=batch, from_start=from_start, seeked=seeked
            )

        # A data topic deleted and created again: entries of the old one don't count. A
        # reader trimmed after a later batch than this one (another query of this app id
        # in the process, from an older checkpoint) lacks entries a restart would read.
        def stale(cached: ControlTopic) -> bool:
            behind = batch is not None and batch.batch_id < cached.trimmed_after
            return behind or cached.current_topic_id() != cached.topic_id

        index = _INDEXES.get(key, build=build, stale=stale)
        # Either call above fetched the metadata just now (current_topic_id): the read
        # takes from it whether the control topic exists instead of asking again.
        index.refresh(metadata_fresh=True)
        why = doubt(index, point=seeked[0], app_id=self.app_id) if seeked else None
        if why is not None:
            log.warning(
                "chkpt-kafka: control topic %s read from offset %d: %s; reading it from its start",
                control,
                seeked[0].offset,
                why,
            )
            _INDEXES.retire(key)
            index = _INDEXES.get(key, build=lambda: build(from_start=True))
            index.refresh(metadata_fresh=True)
        if batch is not None:
            batch.indexes[topic] = index
        return index

    def _read_index(
        self,
        *,
        topic: str,
        control: str,
        batch: KafkaBatch | None,
        from_start: bool,
        seeked: list[ReadPoint],
    ) -> ControlTopic:
        """A new reader of ``control``. In a new process (a restarted driver) it reads
        from the point the last snapshot record before this batch holds, not from offset
        0 (control_read), and that point joins ``seeked``; ``from_start``: from offset 0."""
        point = None
        if not from_start:
            point = recorded_point(
                self.store,
                app_id=self.app_id,
                sink=self.sink,
                topic=topic,
                control_topic=control,
                before=batch.batch_id if batch is not None else None,
            )
        index = ControlTopic(
            bootstrap_servers=self.config.bootstrap_servers,
            control_topic=control,
            data_topic=topic,
            client_settings=connection_settings(self.config.producer_settings),
            start_at=point.offset if point is not None else 0,
            start_id=point.id if point is not None else None,
        )
        index.topic_id = index.current_topic_id()
        if point is not None:
            seeked.append(point)
        return index

    # -- the hooks of SnapshotCoordinator.commit -------------------------------------------

    def new_batch(self, *, batch_id: int, messages: Sequence[Any], **details: Any) -> KafkaBatch:
        outputs = [m for m in messages if m is not None]
        topics = (
            {self.config.topic} if self.config.topic else {t for m in outputs for t in m.counts}
        )
        return KafkaBatch(batch_id=batch_id, outputs=outputs, topics=sorted(topics))

    def begin(self, batch: KafkaBatch) -> None:
        failpoint(FaultPoint.AFTER_STAGING, batch.batch_id)

    def sink_generation(self, batch: KafkaBatch) -> int | None:
        """The newest generation of this app id the control topics' entries carry."""
        found = []
        for topic in batch.topics:
            index = self._index(topic, batch)
            found += [e.generation for e in index.entries if e.app_id == self.app_id]
            if isinstance(index, ControlTopic):
                # Every entry of this app before here passed this fence: a restart
                # reads on from here (recorded in the snapshot record, control_read).
                point = read_point(index, generation=batch.epoch.generation)
                if point is not None:
                    batch.read[topic] = point
        return max(found, default=None)

    def prepare(self, batch: KafkaBatch, plan: BatchPlan) -> None:
        batch.sources = source_offsets(plan.sources)
        batch.producer = self._producer()

    def already_committed(self, batch: KafkaBatch, plan: BatchPlan) -> Committed | None:
        """Per topic, an earlier commit of this batch in the control topic. Its entries
        record the source offsets of the run that wrote them: other offsets than
        ``offsets/<batch_id>`` mean another run claims the same (appId, batch)
        (:class:`QueryIdentityError`). A ``complete`` entry means the topic is done (this
        attempt's records stay unconfirmed, so aligned readers drop them); an ``intent``
        means a commit crashed midway: its attempts, not this one's, are the ones
        snapshot N confirms. Done when every topic is."""
        app, batch_id = self.app_id, batch.batch_id
        for topic in batch.topics:
            index = self._index(topic, batch)
            complete = index.first(app_id=app, snapshot_id=batch_id, kind="complete")
            intent = open_intent(index, app_id=app, batch_id=batch_id)
            for entry in (intent, complete):
                if entry is not None:
                    self._check_identity(
                        entry, sources=batch.sources, control_topic=index.control_topic
                    )
            latest = index.latest_snapshot(app_id=app)
            if complete is None and (latest is None or latest <= batch_id):
                batch.pending.append((topic, index, intent))
                continue
            log.warning(
                "chkpt-kafka batch %d was already committed to %s; this "
                "attempt's records stay unconfirmed",
                batch_id,
                topic,
            )
            if complete is not None:
                batch.completed[topic] = complete
        batch.checked_at = time.monotonic()
        if not batch.topics or batch.pending:
            return None
        return Committed(
            record=lambda: self._record_of(batch, plan.sources) if batch.completed else None
        )

    def make_visible(self, batch: KafkaBatch, plan: BatchPlan, *, retry: int) -> SnapshotRecord:
        """Per topic not yet done: the ``intent`` entry (flushed), fixing the confirmed
        attempts; barrier N into every partition (every record of the batch was
        acknowledged before the tasks returned, so each barrier lands after all of the
        snapshot's data); the ``complete`` entry with every barrier's offset."""
        for topic, index, intent in batch.pending:
            if intent is None:
                intent = self._entry(batch, "intent", topic=topic, index=index)
                failpoint(FaultPoint.AFTER_INTENT, batch.batch_id)
            else:
                log.warning(
                    "chkpt-kafka batch %d: resuming the commit of attempts %s to %s",
                    batch.batch_id,
                    ", ".join(intent.attempts),
                    topic,
                )
            self._refuse_if_taken_over(batch, topic=topic)
            if self.config.transactional:
                self.transactions.commit(batch, intent)
                self.transactions.abort_unrecorded(batch, keep=intent.transactions)
            positions: dict[int, int] = {}
            if self.config.barriers:
                barrier = Barrier(
                    app_id=self.app_id, snapshot_id=batch.batch_id, attempts=intent.attempts
                )
                written = set(intent.counts) | set(_counts(batch.outputs, topic))
                positions = write_barriers(
                    batch.producer,
                    config=self.config,
                    topic=topic,
                    barrier=barrier,
                    written=written,
                )
            failpoint(FaultPoint.AFTER_BARRIERS, batch.batch_id)
            batch.completed[topic] = self._entry(
                batch, "complete", topic=topic, index=index, intent=intent, positions=positions
            )
            failpoint(FaultPoint.AFTER_COMPLETE, batch.batch_id)
        return self._record_of(batch, plan.sources)

    def _refuse_if_taken_over(self, batch: KafkaBatch, *, topic: str) -> None:
        """A commit held between step 3 and its barriers longer than :data:`HELD_S`
        (its driver's JVM killed while this Python worker lived on) reads the
        control topic again: if another run of the query completed this snapshot or a
        later one meanwhile, this stale writer writes nothing more (no barrier, no
        ``complete`` entry). A new driver needs far longer than that to start and commit,
        so a commit that was not held skips the read."""
        if time.monotonic() - batch.checked_at <= HELD_S:
            return
        index = self._index(topic, batch)  # read to its end again
        app, batch_id = self.app_id, batch.batch_id
        complete = index.first(app_id=app, snapshot_id=batch_id, kind="complete")
        latest = index.latest_snapshot(app_id=app)
        if complete is None and (latest is None or latest <= batch_id):
            return
        raise FencedError(
            f"chkpt-kafka {topic}: this commit of snapshot {batch_id} of app id '{app}' was "
            f"held {time.monotonic() - batch.checked_at:.0f} s after its intent, and another "
            f"run of the query completed snapshot {latest if latest is not None else batch_id} "
            f"in {index.control_topic} meanwhile (a driver whose JVM died while this Python "
            "worker went on?): this stale writer stops, writing no barrier and no entry."
        )

    def discard(self, batch: KafkaBatch) -> None:
        """Step 3, the batch already committed: abort this attempt's transactions."""
        if self.config.transactional:
            self.transactions.abort_unrecorded(batch, keep=())

    def completed(self, batch: KafkaBatch, record: SnapshotRecord) -> SnapshotRecord:
        log.info(
            "chkpt-kafka snapshot %d: barriers in %s, %d rows confirmed, %.0f ms",
            batch.batch_id,
            ", ".join(batch.topics) or "no topic",
            record.rows,
            record.commit_ms,
        )
        return record

    def release(self, batch: KafkaBatch, *, failed: bool) -> None:
        """A failed commit drops this process's barrier producer: after an outage its
        connections cannot be trusted, and Spark's retry (or the restart) starts with a
        new one. A commit that made the batch visible trims the control-topic readers."""
        if batch.transactions is not None:
            batch.transactions.close()
            batch.transactions = None
        if failed:
            BARRIER_PRODUCERS.retire(barrier_producer_key(self.config))
            return
        # A driver that runs for months: each reader keeps what a coordinator restarted
        # from this commit's recorded point would read (control_read), and every
        # revocation (a restart reads from 0 when a stale writer's entry needs one from
        # before the point). Only topics this commit made visible: where an earlier run
        # committed the batch, the entries of its later batches may lie before the point.
        made_visible = {topic for topic, _, _ in batch.pending}
        for topic, point in batch.read.items():
            if topic in made_visible and topic in batch.indexes:
                index = batch.indexes[topic]
                index.drop_before(point.offset, keep_revocations=True)
                index.trimmed_after = batch.batch_id

    def resume(self) -> list[int]:
        """Before a batch's tasks run (the sink's ``streamWriter``, on the driver): commit
        every batch of this app id whose ``intent`` has no ``complete`` entry
        (:meth:`TransactionSteps.resume`). Returns the batches finished."""
        return self.transactions.resume(
            commit=lambda batch_id: self.commit(batch_id=batch_id, messages=())
        )

    # -- the rest ----------------------------------------------------------------------------

    def _entry(
        self,
        batch: KafkaBatch,
        kind: Literal["intent", "complete"],
        *,
        topic: str,
        index: ControlTopic,
        intent: IndexEntry | None = None,
        positions: dict[int, int] | None = None,
    ) -> IndexEntry:
        """Write the ``kind`` entry of ``topic``'s commit to its control topic (flushed)."""
        outputs = batch.outputs
        entry = IndexEntry(
            kind=kind,
            app_id=self.app_id,
            snapshot_id=batch.batch_id,
            topic=topic,
            attempts=intent.attempts
            if intent is not None
            else tuple(sorted(m.attempt for m in outputs if topic in m.counts)),
            positions=positions or {},
            counts=intent.counts if intent is not None else _counts(outputs, topic),
            sources=batch.sources,
            topic_id=index.topic_id,
            generation=batch.epoch.generation,
            transactions=intent.transactions
            if intent is not None
            else recorded_transactions(outputs, topic),
        )
        write_entry(
            batch.producer,
            control_topic=index.control_topic,
            entry=entry,
            settings=self.config.producer_settings,
        )
        return entry

    def _record_of(self, batch: KafkaBatch, sources: Sequence[Any]) -> SnapshotRecord:
        """The snapshot record the ``complete`` entries of one batch describe: the rows and
        attempts they confirm, whichever commit call wrote them."""
        completed = batch.completed
        rows = sum(n for entry in completed.values() for n in entry.counts.values())
        if self.target_name is None and completed:  # topics named by the rows
            self.target_name = ",".join(sorted(completed))
        record = self.record(
            batch_id=batch.batch_id,
            sources=sources,
            outcome=CommitOutcome.COMMITTED if rows else CommitOutcome.EMPTY,
            started=batch.started,
            rows=rows,
            attempts=[a for entry in completed.values() for a in entry.attempts],
        )
        if batch.read:
            read = {topic: point.as_dict() for topic, point in batch.read.items()}
            record = replace(record, control_read=read)
        return record

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
        its records (plain consumers see them; they may filter on the header). With
        transactions: abort the tasks' transactions, then fence every transactional id
        the batch's tasks could have used (those whose message never came back)."""
        failpoint(FaultPoint.IN_ABORT, batch_id)
        if self.config.transactional:
            self.transactions.abort(messages=messages, batch_id=batch_id)
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
