"""The ``chkpt-delta`` sink's coordinator: a snapshot completes as one Delta commit.

Executors stage Parquet files under the table folder (:mod:`spark_chkpt.delta.staging`);
:meth:`DeltaCoordinator.commit` adds them to the table in one Delta commit that also
carries ``txn(appId, N)`` and the snapshot record. A crash anywhere leaves either
nothing visible (Spark re-runs batch N with the same offsets) or the whole batch
visible with ``txn(appId, N)`` (the re-run finds it and discards itself).

Query identity. A replay (``txn(appId) >= N``) is checked against the table's commit of
batch N before it is discarded (:mod:`spark_chkpt.delta.replay`): the commit's
source offsets must be ``offsets/N``, else :class:`~spark_chkpt.errors.QueryIdentityError`
and the table is left as it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.replay import check_replay
from spark_chkpt.delta.staging import StagedFile, StagedOutput
from spark_chkpt.delta.table import DeltaTarget, is_conflict
from spark_chkpt.errors import ChkptError, QueryIdentityError
from spark_chkpt.offsets import META_KEY
from spark_chkpt.recovery.rebuild import table_snapshots
from spark_chkpt.snapshot.coordinator import SnapshotCoordinator, elapsed_ms
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, CommitOutcome, SnapshotRecord
from spark_chkpt.testing.failpoints import FaultPoint, maybe_fail, maybe_kill

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

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
    refuse_other_writers: bool = False
    dead_letter_uri: str | None = None
    # outputMode("complete"): each snapshot's commit replaces all the table's files with
    # the batch's (remove actions for every file, add actions for the batch's).
    complete: bool = False


class DeltaCoordinator(SnapshotCoordinator):
    """Completes snapshots of one query into one Delta table."""

    sink = "chkpt-delta"

    def __init__(self, *, settings: CommitSettings) -> None:
        super().__init__(
            checkpoint_location=settings.checkpoint_location,
            app_id=settings.app_id,
            query_name=settings.query_name,
            retained_snapshots=settings.retained_snapshots,
            target=settings.table_uri,
        )
        self.settings = settings
        self.target = DeltaTarget(uri=settings.table_uri, storage_options=settings.storage_options)
        self.dead_target = (
            DeltaTarget(uri=settings.dead_letter_uri, storage_options=settings.storage_options)
            if settings.dead_letter_uri
            else None
        )

    def clean_orphans_once(self, *, in_progress: Sequence[StagedFile] = ()) -> int:
        """Remove files staged by crashed attempts, once per process and table."""
        key = self.settings.table_uri
        if key in _CLEANED:
            return 0
        _CLEANED.add(key)
        removed = self.target.remove_orphans(
            app_id=self.app_id,
            older_than_s=self.settings.orphan_retention_s,
            keep={f.path for f in in_progress},
        )
        if removed:
            log.warning(
                "chkpt-delta removed %d staged file(s) of crashed attempts from %s", removed, key
            )
        return removed

    def commit(
        self,
        *,
        messages: Sequence[StagedOutput | None],
        batch_id: int,
        schema: pa.Schema,
        dead_letter_schema: pa.Schema | None = None,
    ) -> SnapshotRecord:
        """Complete snapshot ``batch_id``.

        Step 1: read Spark's plan for the batch (``offsets/<batch_id>``): the source
                offsets this snapshot covers.
        Step 2: idempotency. If the table's ``txn(appId)`` is already ``>= batch_id`` the
                batch was committed by an earlier attempt, if that commit's source
                offsets are this plan's (else :class:`QueryIdentityError`, see the
                module docstring): delete this attempt's staged files and return its
                record (repairing the store from the commit's record if a crash lost it).
        Step 3: schema. A column the table lacks fails the batch naming it, unless
                mergeSchema adds it; a changed type always fails.
        Step 4: one Delta commit with the add actions, ``txn(appId, batch_id)`` and the
                snapshot record in commitInfo; in complete mode the same commit also
                removes every file the table had (readers see the old result or the new
                one, never a mix). A conflict with another writer is retried from step 2.
        Step 5: write the snapshot record to the store atomically (newest N kept).
        """
        started = time.monotonic()
        maybe_kill(FaultPoint.AFTER_STAGING, batch_id)
        maybe_fail(FaultPoint.IN_COMMIT, batch_id)
        outputs = [m for m in messages if m is not None]
        files = [f for m in outputs for f in m.files]
        attempts = [m.attempt for m in outputs]
        self.clean_orphans_once(in_progress=files)

        # Step 1
        plan = self.plan(batch_id)
        dead_letters = self._commit_dead_letters(
            outputs, batch_id=batch_id, schema=dead_letter_schema
        )
        if self.dead_target is not None:
            maybe_kill(FaultPoint.AFTER_DEAD_LETTERS, batch_id)

        for attempt in range(_CONFLICT_RETRIES):
            # Step 2
            table = self.target.open()
            done = table.transaction_version(self.app_id) if table is not None else None
            if done is not None and done >= batch_id:
                committed = self._check_replay(
                    table, batch_id=batch_id, done=done, sources=plan.sources
                )
                removed = self.target.delete_unreferenced(files, table)
                log.warning(
                    "chkpt-delta batch %d was already committed (table txn %s=%d); "
                    "discarded this attempt's %d staged file(s)",
                    batch_id,
                    self.app_id,
                    done,
                    removed,
                )
                return self.duplicate(
                    batch_id=batch_id,
                    sources=plan.sources,
                    started=started,
                    attempts=attempts,
                    committed=lambda: committed,  # noqa: B023 (called before the return)
                )

            if done is None and table is not None and self.settings.refuse_other_writers:
                self._refuse_overlap(plan.sources)

            # Step 3
            if table is not None:
                schema_plan = self.target.check_schema(
                    table, schema, merge=self.settings.merge_schema
                )
                if schema_plan.new_columns:
                    self.target.add_columns(table, schema, schema_plan.new_columns)
                    table = self.target.open()

            # Step 4
            record = self.record(
                batch_id=batch_id,
                sources=plan.sources,
                outcome=CommitOutcome.COMMITTED if files else CommitOutcome.EMPTY,
                started=started,
                rows=sum(f.rows for f in files),
                files=len(files),
                size=sum(f.size for f in files),
                attempts=attempts,
            )
            record = replace(
                record,
                retries=attempt,
                dead_letters=dead_letters,
                mode="complete" if self.settings.complete else "append",
            )
            try:
                self.target.commit(
                    table=table,
                    schema=schema,
                    partition_by=self.settings.partition_by,
                    files=files,
                    app_id=self.app_id,
                    version=batch_id,
                    metadata={SNAPSHOT_KEY: record.to_json(), "chkpt.batchId": batch_id},
                    overwrite=self.settings.complete,
                )
            except Exception as e:
                if not is_conflict(e) or attempt == _CONFLICT_RETRIES - 1:
                    raise ChkptError(
                        f"chkpt-delta could not commit batch {batch_id} to "
                        f"{self.settings.table_uri}: {e}"
                    ) from e
                log.warning("chkpt-delta batch %d: commit conflict (%s); retrying", batch_id, e)
                time.sleep(min(2.0, 0.05 * 2**attempt))
                continue
            maybe_kill(FaultPoint.AFTER_DELTA_COMMIT, batch_id)

            # Step 5
            record = self.finish(
                replace(
                    record,
                    table_version=self._version_of(batch_id),
                    commit_ms=elapsed_ms(started),
                )
            )
            log.info(
                "chkpt-delta snapshot %d committed: %d rows in %d files, Delta version %s, "
                "%.0f ms, %d conflict retries",
                batch_id,
                record.rows,
                record.files,
                record.table_version,
                record.commit_ms,
                record.retries,
            )
            return record
        raise ChkptError(
            f"chkpt-delta batch {batch_id}: gave up after {_CONFLICT_RETRIES} commit conflicts"
        )

    def _refuse_overlap(self, sources: Sequence[Any]) -> None:
        """This query's first commit to a table that holds snapshots of another query
        reading the same topic-partitions: its checkpoint was lost or replaced, and it
        would write what the table has again. Refuse, naming the recovery."""
        mine = _partitions_of(sources)
        if not mine:
            return
        uri = self.settings.table_uri
        snapshots = table_snapshots(table_uri=uri, storage_options=self.settings.storage_options)
        for other, snapshot in sorted(snapshots.items()):
            shared = mine & _partitions_of(snapshot.record.source_offsets)
            if other == self.app_id or not shared:
                continue
            raise QueryIdentityError(
                f"chkpt-delta: {uri} already holds snapshots of query {other} (last: batch "
                f"{snapshot.batch_id}, Delta version {snapshot.table_version}, query name "
                f"{snapshot.record.query_name!r}) reading the same topic-partitions "
                f"({', '.join(sorted(shared)[:5])}); this query ({self.app_id}) writes to it "
                "for the first time and would write that data again. If the checkpoint was "
                f"lost: spark-chkpt recover --table {uri} --checkpoint <new folder> --app-id "
                f"{other}, then start the query on the new folder. If two queries must write "
                "the same partitions, set the sink option otherWriters=allow. Nothing was "
                "committed."
            )

    def _commit_dead_letters(
        self, outputs: Sequence[StagedOutput], *, batch_id: int, schema: pa.Schema | None
    ) -> int:
        """Before the table's commit: the batch's dead letters in one commit of the
        dead-letter table with its own ``txn(appId, N)``, so a replay neither loses nor
        repeats them (a crash between the two commits replays into a table that holds N
        and discards this attempt's letters). Returns how many the batch has."""
        letters = [f for m in outputs for f in getattr(m, "dead_letter_files", None) or ()]
        target = self.dead_target
        if target is None:
            return 0
        table = target.open()
        done = table.transaction_version(self.app_id) if table is not None else None
        if done is not None and done >= batch_id:
            target.delete_unreferenced(letters, table)
            found = target.find_txn_commit(table, app_id=self.app_id, txn_version=batch_id)
            rows = found.info.get("chkpt.deadLetters") if found is not None else None
            return int(rows) if rows is not None else 0
        if (not letters and table is None) or schema is None:
            return 0  # no dead letter yet: the table is created with the first one
        rows = sum(f.rows for f in letters)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                target.commit(
                    table=table,
                    schema=schema,
                    partition_by=(),
                    files=letters,
                    app_id=self.app_id,
                    version=batch_id,
                    metadata={"chkpt.batchId": batch_id, "chkpt.deadLetters": rows},
                )
                break
            except Exception as e:
                if not is_conflict(e) or attempt == _CONFLICT_RETRIES - 1:
                    raise ChkptError(
                        f"chkpt-delta could not commit batch {batch_id}'s dead letters to "
                        f"{target.uri}: {e}"
                    ) from e
                time.sleep(min(2.0, 0.05 * 2**attempt))
                table = target.open()
        if rows:
            log.warning(
                "chkpt-delta batch %d: %d malformed record(s) committed to %s",
                batch_id,
                rows,
                target.uri,
            )
        return rows

    def abort(self, *, messages: Sequence[StagedOutput | None], batch_id: int) -> int:
        """Delete the staged files of a failed attempt (never files the table references)."""
        maybe_kill(FaultPoint.IN_ABORT, batch_id)
        files = [f for m in messages if m is not None for f in m.files]
        if self.dead_target is not None:
            letters = [
                f for m in messages if m is not None for f in getattr(m, "dead_letter_files", [])
            ]
            self.dead_target.delete_unreferenced(letters, self.dead_target.open())
        removed = self.target.delete_unreferenced(files, self.target.open())
        log.warning("chkpt-delta batch %d aborted: removed %d staged file(s)", batch_id, removed)
        return removed

    def _check_replay(
        self, table: Any, *, batch_id: int, done: int, sources: Sequence[Any]
    ) -> SnapshotRecord | None:
        """Step 2's identity check (:func:`~spark_chkpt.delta.replay.check_replay`):
        the record of our commit of ``batch_id`` if it can be checked and matches."""
        _, record = check_replay(
            target=self.target,
            table=table,
            app_id=self.app_id,
            checkpoint_location=self.settings.checkpoint_location,
            batch_id=batch_id,
            done=done,
            sources=sources,
        )
        return record

    def _version_of(self, batch_id: int) -> int | None:
        """The Delta version our commit of ``batch_id`` became (another writer may have
        committed since, so not simply the latest version)."""
        table = self.target.open()
        if table is None:
            return None
        commit = self.target.find_txn_commit(table, app_id=self.app_id, txn_version=batch_id)
        return commit.version if commit is not None else None


def _partitions_of(sources: Sequence[Any]) -> set[str]:
    """``topic-partition`` names a batch's source offsets cover (Kafka-shaped sources)."""
    names: set[str] = set()
    for source in sources:
        if isinstance(source, dict):
            for topic, parts in source.items():
                if topic != META_KEY and isinstance(parts, dict):
                    names.update(f"{topic}-{p}" for p in parts)
    return names
