"""The ``chkpt-delta`` sink's coordinator: a snapshot completes as one Delta commit.

Executors stage Parquet files under the table folder (:mod:`spark_chkpt.delta.staging`);
:meth:`DeltaCoordinator.commit` adds them to the table in one Delta commit that also
carries ``txn(appId, N)`` and the snapshot record. A crash anywhere leaves either
nothing visible (Spark re-runs batch N with the same offsets) or the whole batch
visible with ``txn(appId, N)`` (the re-run finds it and discards itself).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.staging import StagedFile, StagedOutput
from spark_chkpt.delta.table import DeltaTarget
from spark_chkpt.errors import ChkptError
from spark_chkpt.local.fault import FaultPoint, maybe_fail, maybe_kill
from spark_chkpt.snapshot.coordinator import SnapshotCoordinator, elapsed_ms
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord

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


class DeltaCoordinator(SnapshotCoordinator):
    """Completes snapshots of one query into one Delta table."""

    sink = "chkpt-delta"

    def __init__(self, *, settings: CommitSettings) -> None:
        super().__init__(
            checkpoint_location=settings.checkpoint_location,
            app_id=settings.app_id,
            query_name=settings.query_name,
            retained_snapshots=settings.retained_snapshots,
        )
        self.settings = settings
        self.target = DeltaTarget(uri=settings.table_uri, storage_options=settings.storage_options)

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
                files and return its record (repairing the store from the commit's
                record if a crash lost it).
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
        attempts = [m.attempt for m in outputs]
        self.clean_orphans_once(in_progress=files)

        # Step 1
        plan = self.plan(batch_id)

        for attempt in range(_CONFLICT_RETRIES):
            # Step 2
            table = self.target.open()
            done = table.transaction_version(self.app_id) if table is not None else None
            if done is not None and done >= batch_id:
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
                    committed=lambda: self._committed_record(batch_id),
                )

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
            try:
                self.target.commit(
                    table=table,
                    schema=schema,
                    partition_by=self.settings.partition_by,
                    files=files,
                    app_id=self.app_id,
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
            record = self.finish(
                replace(
                    record,
                    table_version=self._version_of(batch_id),
                    commit_ms=elapsed_ms(started),
                )
            )
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

    def _commit_entry(self, batch_id: int) -> dict[str, Any] | None:
        """Our commit of ``batch_id`` in the table's recent history (newest first)."""
        table = self.target.open()
        for entry in table.history(limit=50) if table is not None else []:
            snapshot = entry.get(SNAPSHOT_KEY)
            if (
                entry.get("chkpt.batchId") == batch_id
                and snapshot
                and SnapshotRecord.from_json(snapshot).app_id == self.app_id
            ):
                return dict(entry)
        return None

    def _version_of(self, batch_id: int) -> int | None:
        """The Delta version our commit of ``batch_id`` became (another writer may have
        committed since, so not simply the latest version)."""
        entry = self._commit_entry(batch_id)
        return int(entry["version"]) if entry is not None else None

    def _committed_record(self, batch_id: int) -> SnapshotRecord | None:
        """The record our commit of ``batch_id`` carries in commitInfo, with its version."""
        entry = self._commit_entry(batch_id)
        if entry is None:
            return None
        return replace(
            SnapshotRecord.from_json(entry[SNAPSHOT_KEY]), table_version=entry["version"]
        )


def _is_conflict(error: Exception) -> bool:
    text = str(error).lower()
    return type(error).__name__ == "CommitFailedError" or any(
        word in text for word in ("conflict", "concurrent", "already exists")
    )
