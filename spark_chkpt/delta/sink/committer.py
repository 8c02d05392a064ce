"""The ``chkpt-delta`` sink's phase 2: a snapshot completes as one Delta commit.

Executors stage Parquet files under the table folder (:mod:`spark_chkpt.delta.sink.writer`);
:meth:`DeltaCoordinator.commit` (the template of :mod:`spark_chkpt.snapshot.coordinator`,
whose hooks this class supplies) adds them to the table in one Delta commit that also
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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.features.column_mapping import ColumnMapping
from spark_chkpt.delta.hooks import DeltaHooks, TableBatch
from spark_chkpt.delta.replay import other_writers
from spark_chkpt.delta.sink.compaction import AutoCompaction
from spark_chkpt.delta.sink.dead_letters import DeadLetters
from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.delta.staging import StagedFile, StagedOutput
from spark_chkpt.delta.table.actions import committing
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import QueryIdentityError, TableFeatureError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.snapshot.checkpoint import BatchPlan
from spark_chkpt.snapshot.coordinator import Committed, elapsed_ms
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

# Tables whose orphans this process already cleaned (the commit runs in a long-lived
# Python worker; once per process and table is "at start-up").
_CLEANED: set[str] = set()


@dataclass
class DeltaBatch(TableBatch):
    """One commit call of the Delta sink."""

    outputs: Sequence[StagedOutput] = ()
    files: Sequence[StagedFile] = ()
    schema: pa.Schema | None = None
    dead_letter_schema: pa.Schema | None = None
    dead_letters: int = 0
    dead_letter_version: int | None = None  # the dead-letter table's version holding them
    mapping: ColumnMapping | None = None  # the column mappings the files were staged with
    dead_letter_mapping: ColumnMapping | None = None


class DeltaCoordinator(DeltaHooks[DeltaBatch]):
    """Completes snapshots of one query into one Delta table.

    The steps of :meth:`commit`: 1. the plan, after this process's orphans are cleaned,
    and the fence (the table's generation of the app id, ``txn(<appId>#generation)``);
    3. idempotency: ``txn(appId) >= N`` means an earlier attempt committed the batch, if
    that commit's source offsets are this plan's (else :class:`QueryIdentityError`):
    this attempt's staged files are deleted; a first commit of the app id to a table
    another query fills from the same partitions, or a complete-mode query on a table
    other queries write, is refused; 4. the batch's dead letters in their own table
    (``deadLetterPath``), only now that nothing can refuse the batch, then one Delta
    commit with the add actions (a column the table lacks fails the batch naming it,
    unless mergeSchema adds it), ``txn(appId, N)`` and the snapshot record in
    commitInfo; in complete mode the same commit removes every file the table had;
    5. the record to the store (newest N kept); then the auto compaction, a commit of
    its own (:mod:`spark_chkpt.delta.sink.compaction`).
    """

    sink = "chkpt-delta"
    visible_point = FaultPoint.AFTER_DELTA_COMMIT

    def __init__(
        self,
        *,
        config: DeltaSinkConfig,
        snapshot: SnapshotSettings,
        complete: bool = False,
        staged_rules: frozenset[str] | None = None,
    ) -> None:
        """``config``: the sink's options; ``snapshot``: the protocol's settings it
        produced (:meth:`DeltaSinkConfig.snapshot_settings`); ``complete``:
        outputMode("complete"), each snapshot's commit replaces all the table's files with
        the batch's (remove actions for every file, add actions for the batch's);
        ``staged_rules``: the table's row rules and generated columns the write tasks
        applied (None: not known, not compared at the commit)."""
        super().__init__(snapshot=snapshot, target=config.path)
        self.staged_rules = staged_rules
        self.config = config
        self.complete = complete
        self.target = DeltaTarget(uri=config.path, storage_options=config.storage_options)
        self.compaction = AutoCompaction(config=config, target=self.target, app_id=self.app_id)
        self.dead_letters = (
            DeadLetters(
                target=DeltaTarget(
                    uri=config.dead_letter_path, storage_options=config.storage_options
                ),
                app_id=self.app_id,
            )
            if config.dead_letter_path
            else None
        )

    def clean_orphans_once(self, *, in_progress: Sequence[StagedFile] = ()) -> int:
        """Remove files staged by crashed attempts, once per process and table."""
        key = self.config.path
        if key in _CLEANED:
            return 0
        _CLEANED.add(key)
        removed = self.target.remove_orphans(
            app_id=self.app_id,
            older_than_s=self.config.orphan_retention_ms / 1000,
            keep={f.path for f in in_progress},
        )
        if removed:
            log.warning(
                "chkpt-delta removed %d staged file(s) of crashed attempts from %s", removed, key
            )
        return removed

    # -- the hooks of SnapshotCoordinator.commit -------------------------------------------

    def new_batch(self, *, batch_id: int, messages: Sequence[Any], **details: Any) -> DeltaBatch:
        outputs = [m for m in messages if m is not None]
        return DeltaBatch(
            batch_id=batch_id,
            attempts=[m.attempt for m in outputs],
            outputs=outputs,
            files=[f for m in outputs for f in m.files],
            schema=details["schema"],
            dead_letter_schema=details.get("dead_letter_schema"),
            mapping=_staged_with(outputs, "mapping", details.get("mapping")),
            dead_letter_mapping=_staged_with(
                outputs, "dead_letter_mapping", details.get("dead_letter_mapping")
            ),
        )

    def begin(self, batch: DeltaBatch) -> None:
        failpoint(FaultPoint.AFTER_STAGING, batch.batch_id)
        failpoint(FaultPoint.IN_COMMIT, batch.batch_id)
        self.clean_orphans_once(in_progress=batch.files)

    def already_committed(self, batch: DeltaBatch, plan: BatchPlan) -> Committed | None:
        table = self.open_table(batch)
        replayed = self.replayed(batch, plan)
        if replayed is not None:
            _, record = replayed
            return Committed(record=lambda: record)
        if batch.done is None and table is not None:
            if self.config.other_writers == "refuse":
                self.refuse_first_overlap(batch, plan)
            if self.complete:
                self._refuse_complete_over_others(table)
        return None

    def discard(self, batch: DeltaBatch) -> None:
        removed = self.target.delete_unreferenced(batch.files, batch.table)
        log.warning(
            "chkpt-delta batch %d was already committed (table txn %s=%d); "
            "discarded this attempt's %d staged file(s)",
            batch.batch_id,
            self.app_id,
            batch.done,
            removed,
        )

    def make_visible(self, batch: DeltaBatch, plan: BatchPlan, *, retry: int) -> SnapshotRecord:
        """The schema (new columns added with mergeSchema; on a column-mapped table the
        mapping the files were staged with must still be the table's), the dead letters'
        own commit (after every check that may refuse the batch: a refused batch commits
        none), then one Delta commit."""
        schema, table, files = batch.schema, batch.table, batch.files
        # The table as this attempt found it: a feature another writer turned on since
        # the start is refused here, by name, not retried as a conflict.
        self.target.check_features(
            table, writer="chkpt-delta", operation="overwrite" if self.complete else "append"
        )
        if table is not None and self.staged_rules is not None:
            self._refuse_new_rules(table, batch.batch_id)
        if table is not None:
            schema_plan = self.target.check_schema(table, schema, merge=self.config.merge_schema)
            self.target.check_mapping(
                table,
                batch.mapping,
                schema.names if schema is not None else [],
                what=f"chkpt-delta batch {batch.batch_id}",
            )
            if schema_plan.new_columns and batch.mapping is not None:
                self.target.add_mapped_columns(table, batch.mapping)
                table = self.target.latest()
            elif schema_plan.new_columns:
                self.target.add_columns(table, schema, schema_plan.new_columns)
                table = self.target.latest()
        if self.dead_letters is not None:
            # Idempotent (its own txn(appId, N)): a retry after a conflict finds it done.
            letters = self.dead_letters.commit(
                batch.outputs,
                batch_id=batch.batch_id,
                schema=batch.dead_letter_schema,
                mapping=batch.dead_letter_mapping,
            )
            batch.dead_letters, batch.dead_letter_version = letters.rows, letters.version
            failpoint(FaultPoint.AFTER_DEAD_LETTERS, batch.batch_id)
        record = replace(
            self.record(
                batch_id=batch.batch_id,
                sources=plan.sources,
                outcome=CommitOutcome.COMMITTED if files else CommitOutcome.EMPTY,
                started=batch.started,
                rows=sum(f.rows for f in files),
                files=len(files),
                size=sum(f.size for f in files),
                attempts=batch.attempts,
            ),
            retries=retry,
            dead_letters=batch.dead_letters,
            dead_letter_target=self.config.dead_letter_path,
            dead_letter_version=batch.dead_letter_version,
            mode="complete" if self.complete else "append",
        )
        uri = self.config.path
        with committing(f"chkpt-delta could not commit batch {batch.batch_id} to {uri}"):
            self.target.commit(
                table=table,
                schema=schema,
                partition_by=self.config.partition_by,
                files=files,
                app_id=self.app_id,
                version=batch.batch_id,
                metadata=self.commit_metadata(record, batch.batch_id),
                overwrite=self.complete,
                configuration=self.config.table_properties,
                identity=[u for o in batch.outputs for u in getattr(o, "identity", ())],
            )
        return record

    def completed(self, batch: DeltaBatch, record: SnapshotRecord) -> SnapshotRecord:
        record = replace(
            record,
            table_version=self.version_of(batch.batch_id, table=batch.table),
            commit_ms=elapsed_ms(batch.started),
        )
        log.info(
            "chkpt-delta snapshot %d committed: %d rows in %d files, Delta version %s, "
            "%.0f ms, %d conflict retries",
            batch.batch_id,
            record.rows,
            record.files,
            record.table_version,
            record.commit_ms,
            record.retries,
        )
        return record

    def release(self, batch: DeltaBatch, *, failed: bool) -> None:
        """After the steps: once the batch's commit and record are durable (or it was
        already committed), the auto compaction's turn (:mod:`.compaction`; it never
        fails the batch); in complete mode each commit replaces every file: none."""
        if not failed and not self.complete:
            self.compaction.after_batch(batch_id=batch.batch_id, files=batch.files)

    # -- the rest ----------------------------------------------------------------------------

    def _refuse_new_rules(self, table: Any, batch_id: int) -> None:
        """A CHECK constraint, NOT NULL column, invariant or generated column another
        writer added after the write tasks applied the table's rules: the batch was not
        checked against it, so it is not committed (the next attempt checks it)."""
        rules, generated = self.target.row_rules(table, writer="chkpt-delta")
        new = sorted((rules.names() | generated.names()) - (self.staged_rules or frozenset()))
        if new:
            raise TableFeatureError(
                f"chkpt-delta: Delta table {self.config.path} got {', '.join(new)} after "
                f"batch {batch_id} was staged; its rows were not checked against it. "
                "Way forward: restart the query (the batch is staged and checked again). "
                "Nothing was committed.",
                feature="checkConstraints",
                table=self.config.path,
            )

    def _refuse_complete_over_others(self, table: Any) -> None:
        """outputMode("complete") replaces every file of the table on each commit: on a
        table other queries write it would remove their rows. Refused, naming them."""
        others = sorted(a for a in other_writers(table) if a != self.app_id)
        if others:
            raise QueryIdentityError(
                f"chkpt-delta: outputMode('complete') replaces the whole table "
                f"{self.config.path} on every batch, but other queries write to it "
                f"({', '.join(others)}): their rows would be removed. Write this query to "
                "a table of its own. Nothing was committed."
            )

    def abort(self, *, messages: Sequence[StagedOutput | None], batch_id: int) -> int:
        """Delete the staged files of a failed attempt (never files the table references)."""
        failpoint(FaultPoint.IN_ABORT, batch_id)
        files = [f for m in messages if m is not None for f in m.files]
        if self.dead_letters is not None:
            self.dead_letters.abort(messages)
        removed = self.target.delete_unreferenced(files, self.target.latest())
        log.warning("chkpt-delta batch %d aborted: removed %d staged file(s)", batch_id, removed)
        return removed


def _staged_with(outputs: Sequence[StagedOutput], name: str, planned: Any) -> Any:
    """The column mapping the tasks staged with (the writer Spark shipped them, assembled
    apart from the committer's: a mapping planned again here could differ); ``planned``
    when no task says (no task staged, or a writer of an earlier release)."""
    found = [getattr(o, name, None) for o in outputs]
    staged = [m for m in found if m is not None]
    return staged[0] if staged else planned
