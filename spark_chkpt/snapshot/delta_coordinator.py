"""The driver-side coordinator: phase 2 of the two-phase commit of one snapshot.

Spark's micro-batch engine is Flink's checkpoint trigger: before batch N it writes the
planned source offsets to ``<checkpointLocation>/offsets/N``. Batch N is snapshot N.
Executors stage their output (phase 1, :mod:`spark_chkpt.delta.staging`); the sink's
``commit(messages, N)`` hands the staged output here, and :meth:`DeltaCoordinator.commit`
makes it visible in one Delta commit that also records the snapshot. A crash anywhere
leaves either nothing visible (Spark re-runs batch N with the same offsets) or the
whole batch visible with ``txn(appId, N)`` (the re-run finds it and discards itself).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spark_chkpt.alignment.barrier import BARRIER_KEY, Barrier, IndexEntry, control_topic_for
from spark_chkpt.delta.staging import StagedFile, StagedOutput
from spark_chkpt.delta.table import DeltaTarget
from spark_chkpt.errors import ChkptError
from spark_chkpt.kafka.control_topic import BarrierIndex, write_entry
from spark_chkpt.kafka.producer import ProducedOutput
from spark_chkpt.kafka.topics import create_topic
from spark_chkpt.local.fault import FaultPoint, maybe_fail, maybe_kill
from spark_chkpt.offsets import meta_of
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.store import SnapshotStore

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

SNAPSHOT_KEY = "chkpt.snapshot"
_CONFLICT_RETRIES = 10
# Tables whose orphans this process already cleaned (the commit runs in a long-lived
# Python worker; once per process and table is "at start-up").
_CLEANED: set[str] = set()


@dataclass(frozen=True)
class CommitSettings:
    """What the coordinator needs from the sink's options."""

    table_uri: str
    checkpoint_location: str
    app_id: str
    query_name: str | None
    partition_by: tuple[str, ...]
    merge_schema: bool
    retained_snapshots: int
    orphan_retention_s: float
    storage_options: dict[str, str]


class DeltaCoordinator:
    """Completes snapshots of one query into one Delta table."""

    def __init__(self, *, settings: CommitSettings) -> None:
        self.settings = settings
        self.target = DeltaTarget(uri=settings.table_uri, storage_options=settings.storage_options)
        self.checkpoint = SparkCheckpoint(location=settings.checkpoint_location)
        self.store = SnapshotStore(
            checkpoint_location=settings.checkpoint_location, retained=settings.retained_snapshots
        )

    def clean_orphans_once(self, *, in_progress: Sequence[StagedFile] = ()) -> int:
        """Remove files staged by crashed attempts, once per process and table."""
        key = self.settings.table_uri
        if key in _CLEANED:
            return 0
        _CLEANED.add(key)
        removed = self.target.remove_orphans(
            older_than_s=self.settings.orphan_retention_s, keep={f.path for f in in_progress}
        )
        if removed:
            log.warning(
                "chkpt-delta removed %d staged file(s) of crashed attempts from %s", removed, key
            )
        return removed

    def commit(
        self, *, messages: Sequence[StagedOutput | None], batch_id: int, schema: pa.Schema
    ) -> SnapshotRecord:
        """Complete snapshot ``batch_id``.

        Step 1: read Spark's plan for the batch (``offsets/<batch_id>``): the source
                offsets this snapshot covers.
        Step 2: idempotency. If the table's ``txn(appId)`` is already ``>= batch_id`` the
                batch was committed by an earlier attempt: delete this attempt's staged
                files and return DUPLICATE (writing the snapshot record if a crash lost it).
        Step 3: schema. A column the table lacks fails the batch naming it, unless
                mergeSchema adds it; a changed type always fails.
        Step 4: one Delta commit with the add actions, ``txn(appId, batch_id)`` and the
                snapshot record in commitInfo. A conflict with another writer is retried
                from step 2.
        Step 5: write the snapshot record to the store atomically (newest N kept).
        """
        started = time.monotonic()
        maybe_kill(FaultPoint.AFTER_STAGING, batch_id)
        maybe_fail(FaultPoint.IN_COMMIT, batch_id)
        outputs = [m for m in messages if m is not None]
        files = [f for m in outputs for f in m.files]
        self.clean_orphans_once(in_progress=files)

        # Step 1
        plan = self.checkpoint.plan(batch_id)

        for attempt in range(_CONFLICT_RETRIES):
            # Step 2
            table = self.target.open()
            done = table.transaction_version(self.settings.app_id) if table is not None else None
            if done is not None and done >= batch_id:
                removed = self.target.delete_unreferenced(files, table)
                log.warning(
                    "chkpt-delta batch %d was already committed (table txn %s=%d); "
                    "discarded this attempt's %d staged file(s)",
                    batch_id,
                    self.settings.app_id,
                    done,
                    removed,
                )
                return self._repair_record(batch_id, plan.sources, outputs, started)

            # Step 3
            if table is not None:
                schema_plan = self.target.check_schema(
                    table, schema, merge=self.settings.merge_schema
                )
                if schema_plan.new_columns:
                    self.target.add_columns(table, schema, schema_plan.new_columns)
                    table = self.target.open()

            # Step 4
            record = self._record(
                batch_id,
                plan.sources,
                outputs,
                files,
                started,
                outcome=CommitOutcome.COMMITTED if files else CommitOutcome.EMPTY,
                version=None,
            )
            try:
                self.target.commit(
                    table=table,
                    schema=schema,
                    partition_by=self.settings.partition_by,
                    files=files,
                    app_id=self.settings.app_id,
                    version=batch_id,
                    metadata={SNAPSHOT_KEY: record.to_json(), "chkpt.batchId": batch_id},
                )
            except Exception as e:
                if not _is_conflict(e) or attempt == _CONFLICT_RETRIES - 1:
                    raise ChkptError(
                        f"chkpt-delta could not commit batch {batch_id} to "
                        f"{self.settings.table_uri}: {e}"
                    ) from e
                log.warning("chkpt-delta batch %d: commit conflict (%s); retrying", batch_id, e)
                time.sleep(min(2.0, 0.05 * 2**attempt))
                continue
            maybe_kill(FaultPoint.AFTER_DELTA_COMMIT, batch_id)

            # Step 5
            record = replace(
                record,
                table_version=self._version_of(batch_id),
                commit_ms=round((time.monotonic() - started) * 1000, 1),
            )
            self.store.put(record)
            maybe_kill(FaultPoint.AFTER_SNAPSHOT, batch_id)
            log.info(
                "chkpt-delta snapshot %d committed: %d rows in %d files, Delta version %s, %.0f ms",
                batch_id,
                record.rows,
                record.files,
                record.table_version,
                record.commit_ms,
            )
            return record
        raise ChkptError(
            f"chkpt-delta batch {batch_id}: gave up after {_CONFLICT_RETRIES} commit conflicts"
        )

    def abort(self, *, messages: Sequence[StagedOutput | None], batch_id: int) -> int:
        """Delete the staged files of a failed attempt (never files the table references)."""
        maybe_kill(FaultPoint.IN_ABORT, batch_id)
        files = [f for m in messages if m is not None for f in m.files]
        removed = self.target.delete_unreferenced(files, self.target.open())
        log.warning("chkpt-delta batch %d aborted: removed %d staged file(s)", batch_id, removed)
        return removed

    # -- records ---------------------------------------------------------------------

    def _record(
        self,
        batch_id: int,
        sources: Sequence[Any],
        outputs: Sequence[StagedOutput],
        files: Sequence[StagedFile],
        started: float,
        *,
        outcome: CommitOutcome,
        version: int | None,
    ) -> SnapshotRecord:
        return SnapshotRecord(
            batch_id=batch_id,
            app_id=self.settings.app_id,
            query_name=self.settings.query_name,
            sink="chkpt-delta",
            source_offsets=list(sources),
            table_version=version,
            rows=sum(f.rows for f in files),
            files=len(files),
            bytes=sum(f.size for f in files),
            commit_ms=round((time.monotonic() - started) * 1000, 1),
            outcome=outcome.value,
            attempts=sorted({m.attempt for m in outputs}),
            upstream_snapshots=upstream_of(sources),
        )

    def _commit_entry(self, batch_id: int) -> dict[str, Any] | None:
        """Our commit of ``batch_id`` in the table's recent history (newest first)."""
        table = self.target.open()
        for entry in table.history(limit=50) if table is not None else []:
            snapshot = entry.get(SNAPSHOT_KEY)
            if (
                entry.get("chkpt.batchId") == batch_id
                and snapshot
                and SnapshotRecord.from_json(snapshot).app_id == self.settings.app_id
            ):
                return dict(entry)
        return None

    def _version_of(self, batch_id: int) -> int | None:
        """The Delta version our commit of ``batch_id`` became (another writer may have
        committed since, so not simply the latest version)."""
        entry = self._commit_entry(batch_id)
        return int(entry["version"]) if entry is not None else None

    def _repair_record(
        self, batch_id: int, sources: Sequence[Any], outputs: Sequence[StagedOutput], started: float
    ) -> SnapshotRecord:
        existing = self.store.get(batch_id)
        if existing is not None:
            return existing
        # The crash came between the Delta commit and the store: take the record the
        # commit itself carries, so the store matches the table.
        entry = self._commit_entry(batch_id)
        if entry is not None:
            record = replace(
                SnapshotRecord.from_json(entry[SNAPSHOT_KEY]), table_version=entry["version"]
            )
            self.store.put(record)
            return record
        record = self._record(
            batch_id, sources, outputs, [], started, outcome=CommitOutcome.DUPLICATE, version=None
        )
        self.store.put(record)
        return record


def upstream_of(sources: Sequence[Any]) -> list[Any]:
    """The alignment reports chkpt-kafka sources stored with the batch's end offsets:
    per topic, the mode, upstream app and snapshot ids this batch covers."""
    reports = []
    for source in sources:
        topics = meta_of(source if isinstance(source, dict) else None).get("topics")
        if topics:
            reports.append(topics)
    return reports


def _is_conflict(error: Exception) -> bool:
    text = str(error).lower()
    return type(error).__name__ == "CommitFailedError" or any(
        word in text for word in ("conflict", "concurrent", "already exists")
    )


# The Kafka sink's coordinator keeps its index readers and producer per commit process:
# Spark builds a new writer per batch, and re-reading a control topic from its start on
# every commit would cost O(history).
_INDEXES: dict[tuple[str, str, str], BarrierIndex] = {}
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


class KafkaCoordinator:
    """Completes snapshots of one query into Kafka topics by writing barrier markers."""

    def __init__(self, *, settings: BarrierSettings) -> None:
        self.settings = settings
        self.checkpoint = SparkCheckpoint(location=settings.checkpoint_location)
        self.store = SnapshotStore(
            checkpoint_location=settings.checkpoint_location, retained=settings.retained_snapshots
        )

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

    def _index(self, topic: str) -> BarrierIndex:
        control = self.settings.control_topic or control_topic_for(topic)
        key = (self.settings.bootstrap_servers, control, topic)
        index = _INDEXES.get(key)
        if index is None:
            index = BarrierIndex(
                bootstrap_servers=self.settings.bootstrap_servers,
                control_topic=control,
                data_topic=topic,
            )
            _INDEXES[key] = index
        if not index.exists():
            create_topic(
                bootstrap_servers=self.settings.bootstrap_servers,
                name=control,
                partitions=1,
                exist_ok=True,
            )
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
        plan = self.checkpoint.plan(batch_id)

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
                ),
            )
            confirmed[topic] = intent.attempts
            rows += sum(intent.counts.values())

        # Step 6
        existing = self.store.get(batch_id)
        if duplicate and existing is not None:
            return existing
        record = SnapshotRecord(
            batch_id=batch_id,
            app_id=app,
            query_name=self.settings.query_name,
            sink="chkpt-kafka",
            source_offsets=list(plan.sources),
            table_version=None,
            rows=rows,
            files=0,
            bytes=0,
            commit_ms=round((time.monotonic() - started) * 1000, 1),
            outcome=(
                CommitOutcome.DUPLICATE
                if duplicate
                else CommitOutcome.COMMITTED
                if rows
                else CommitOutcome.EMPTY
            ).value,
            attempts=sorted({a for tags in confirmed.values() for a in tags}),
            upstream_snapshots=upstream_of(plan.sources),
        )
        self.store.put(record)
        maybe_kill(FaultPoint.AFTER_SNAPSHOT, batch_id)
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
