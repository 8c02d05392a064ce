"""``UpsertCommitter``: the hooks a :class:`~spark_chkpt.delta.upsert.front.DeltaUpsert`
gives the shared commit template (steps 2-6 of :mod:`spark_chkpt.delta.upsert.front`'s
protocol): a batch staged in ``mapInArrow``, a replay found by ``txn(appId)``, one MERGE
(through delta-rs, or the session's delta-spark for a table delta-rs refuses) carrying
``txn(appId, N)`` and the snapshot record, the staging cleaned up.

More: docs/concepts/delta-internals.md (spark_chkpt/delta/upsert/committer.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from spark_chkpt.delta.features.constraints import GeneratedColumns, TableRules
from spark_chkpt.delta.features.protocol import Operation, read_protocol
from spark_chkpt.delta.hooks import DeltaHooks, TableBatch
from spark_chkpt.delta.log.commit import needs_own_commit
from spark_chkpt.delta.staging import STAGED_NAME, app_tag
from spark_chkpt.delta.table.actions import committing
from spark_chkpt.delta.table.reader import TxnCommit
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.delta.upsert.merge import STAGING_DIR, KeyedMerge, MergeFigures, without_column
from spark_chkpt.delta.upsert.spark_merge import merge_through_delta_spark
from spark_chkpt.delta.upsert.staging import StagedBatch, StagingTask, stage_batch
from spark_chkpt.errors import TableFeatureError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.snapshot.checkpoint import BatchPlan
from spark_chkpt.snapshot.coordinator import Committed, elapsed_ms
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

WRITER = "DeltaUpsert"


class UpsertArguments(Protocol):
    """What the committer reads of its :class:`~spark_chkpt.delta.upsert.front.DeltaUpsert`:
    the arguments, and what step 2 found of the batch's table and session."""

    path: str
    storage_options: dict[str, str]
    delete_column: str
    partition_by: tuple[str, ...]
    batch_size: int
    max_records_per_file: int
    target_file_bytes: int
    target: DeltaTarget
    merger: KeyedMerge
    rules: TableRules | None
    generated: GeneratedColumns | None
    spark: Any
    operation: Operation

    def snapshot_settings(self, *, app_id: str) -> SnapshotSettings: ...

    def check(self, batch_schema: StructType, *, spark: Any = None) -> pa.Schema: ...


@dataclass
class UpsertBatch(TableBatch):
    """One ``foreachBatch`` call."""

    batch_df: Any = None
    schema: pa.Schema | None = None
    staged: StagedBatch | None = None
    committed: bool = False
    figures: MergeFigures | None = None


class UpsertCommitter(DeltaHooks[UpsertBatch]):
    """The hooks of :meth:`SnapshotCoordinator.commit` for one :class:`DeltaUpsert`
    (steps 2-6 of the module docstring)."""

    sink = "delta-upsert"
    writer = WRITER
    visible_point = FaultPoint.AFTER_DELTA_COMMIT

    def __init__(self, *, upsert: UpsertArguments, app_id: str) -> None:
        super().__init__(snapshot=upsert.snapshot_settings(app_id=app_id), target=upsert.path)
        self.upsert = upsert
        self.target = upsert.target

    def new_batch(self, *, batch_id: int, messages: Sequence[Any], **details: Any) -> UpsertBatch:
        return UpsertBatch(batch_id=batch_id, batch_df=details["batch_df"])

    def prepare(self, batch: UpsertBatch, plan: BatchPlan) -> None:
        # Step 2
        batch.schema = self.upsert.check(batch.batch_df.schema, spark=batch.batch_df.sparkSession)
        self._clean_staging(self.app_id)

    def already_committed(self, batch: UpsertBatch, plan: BatchPlan) -> Committed | None:
        # Step 3
        table = self.open_table(batch)
        if table is not None:
            self.upsert.merger.check_schema(table, batch.schema)
        # A lost checkpoint, a changed app id or a fork started on this table: the
        # same identity rule as chkpt-delta's (its state would start empty and
        # overwrite the table's values with smaller ones).
        self.refuse_first_overlap(batch, plan)
        replayed = self.replayed(batch, plan)
        if replayed is None:
            return None
        record = self._replayed(*replayed, batch_id=batch.batch_id, done=batch.done)
        return Committed(record=lambda: record)

    def discard(self, batch: UpsertBatch) -> None:
        if batch.staged is None:
            # The output is discarded, but a stateful query's plan must still run on
            # every partition: its tasks commit the state store version of this batch
            # (Spark 4.2 fails the batch otherwise, with
            # STATE_STORE_COMMIT_VALIDATION_FAILED, and the next batch would have no
            # state to start from).
            batch.batch_df.write.format("noop").mode("overwrite").save()

    def make_visible(self, batch: UpsertBatch, plan: BatchPlan, *, retry: int) -> SnapshotRecord:
        # Step 4: the table this attempt found (a feature another writer turned on
        # since step 2 is refused by name, not retried as a conflict)
        self.target.check_features(batch.table, writer=WRITER, operation=self.upsert.operation)
        if batch.table is not None:
            self._refuse_new_rules(batch.table, batch.batch_id)
        create = batch.table is None
        staged = batch.staged
        if staged is None or staged.create != create:
            if staged is not None:  # another writer created the table meanwhile
                self._discard(staged)
            batch.staged = staged = self._stage(
                batch.batch_df, batch.schema, self.app_id, batch.batch_id, create=create
            )
            failpoint(FaultPoint.AFTER_STAGING, batch.batch_id)
        # Staging ran the batch's plan: the MERGE is the point of no return.
        self.check_deadline(batch, before="the MERGE")
        # Step 5
        record = replace(
            self.record(
                batch_id=batch.batch_id,
                sources=plan.sources,
                outcome=CommitOutcome.COMMITTED if staged.source_rows else CommitOutcome.EMPTY,
                started=batch.started,
                rows=staged.source_rows,
                files=len(staged.files),
                size=sum(f.size for f in staged.files),
            ),
            mode="upsert",
            retries=retry,
        )
        what = f"{WRITER} could not commit batch {batch.batch_id} to {self.upsert.path}"
        with committing(what):
            batch.figures = self._commit(batch.table, staged, record, self.app_id, batch.batch_id)
        batch.committed = True
        return record

    def completed(self, batch: UpsertBatch, record: SnapshotRecord) -> SnapshotRecord:
        # Step 6
        record = replace(
            record,
            merge=batch.figures.as_dict() if batch.figures is not None else record.merge,
            table_version=self.version_of(batch.batch_id, table=batch.table),
            commit_ms=elapsed_ms(batch.started),
        )
        log.info(
            "%s snapshot %d committed: %s, Delta version %s, %.0f ms",
            WRITER,
            batch.batch_id,
            record.merge,
            record.table_version,
            record.commit_ms,
        )
        return record

    def release(self, batch: UpsertBatch, *, failed: bool) -> None:
        staged = batch.staged
        if staged is not None and not (staged.create and batch.committed):
            self._discard(staged)

    def _refuse_new_rules(self, table: Any, batch_id: int) -> None:
        """A CHECK constraint, NOT NULL column, invariant or generated column another
        writer added after step 2 read the table's: the batch would be staged without
        it, so it fails naming it (the next attempt reads it)."""
        rules, generated = self.target.row_rules(table, writer=WRITER)
        known = (self.upsert.rules.names() if self.upsert.rules else set()) | (
            self.upsert.generated.names() if self.upsert.generated else set()
        )
        new = sorted((rules.names() | generated.names()) - known)
        if new:
            raise TableFeatureError(
                f"{WRITER}: Delta table {self.upsert.path} got {', '.join(new)} after "
                f"batch {batch_id} was checked; its rows were not checked against it. "
                "Way forward: restart the query (the batch is checked again). Nothing was "
                "committed.",
                feature="checkConstraints",
                table=self.upsert.path,
            )

    # -- step 3 --------------------------------------------------------------------------

    def _replayed(
        self,
        commit: TxnCommit | None,
        record: SnapshotRecord | None,
        *,
        batch_id: int,
        done: int | None,
    ) -> SnapshotRecord | None:
        """The record of our earlier commit of ``batch_id`` (the identity check passed),
        with the MERGE's figures."""
        app_id = self.app_id
        if record is not None and commit is not None and not record.merge:
            figures = MergeFigures.from_commit_info(commit.info)
            if figures is not None:  # a MERGE's figures are known after its record
                record = replace(record, merge=figures.as_dict())
        log.warning(
            "%s batch %d was already committed (table txn %s=%d); nothing written",
            WRITER,
            batch_id,
            app_id,
            done,
        )
        return record

    # -- step 4 --------------------------------------------------------------------------

    def _clean_staging(self, app_id: str) -> int:
        """Delete this app's staged files of earlier attempts (one query runs at a time
        per checkpoint, so none of them is in flight)."""
        mine = app_tag(app_id)
        removed = 0
        for info in self.target.location.child(STAGING_DIR).list():
            name = STAGED_NAME.match(info.base_name)
            if name is not None and name["app"] == mine:
                removed += bool(self.target.location.child(STAGING_DIR, info.base_name).delete())
        if self.target.latest() is None:  # files of crashed attempts to create the table
            removed += self.target.remove_orphans(app_id=app_id, older_than_s=0)
        if removed:
            log.warning(
                "%s removed %d staged file(s) of earlier attempts from %s",
                WRITER,
                removed,
                self.upsert.path,
            )
        return removed

    def _stage(
        self, batch_df: DataFrame, schema: pa.Schema, app_id: str, batch_id: int, *, create: bool
    ) -> StagedBatch:
        return stage_batch(
            batch_df,
            StagingTask(
                table_uri=self.upsert.path,
                folder="" if create else STAGING_DIR,
                schema=schema,
                partition_by=self.upsert.partition_by if create else (),
                app_id=app_id,
                batch_id=batch_id,
                drop_deleted=self.upsert.delete_column
                if create and self.upsert.delete_column in schema.names
                else None,
                max_records_per_file=self.upsert.max_records_per_file,
                target_file_bytes=self.upsert.target_file_bytes,
                storage_options=tuple(sorted(self.upsert.storage_options.items())),
                rules=None if create else self.upsert.rules,
                generated=None if create else self.upsert.generated,
                delete_column=self.upsert.delete_column,
            ),
        )

    def _discard(self, staged: StagedBatch) -> None:
        """Delete staged files no table version references."""
        if staged.create:
            self.target.delete_unreferenced(staged.files, self.target.latest())
            return
        for f in staged.files:
            self.target.location.child(f.path).delete()

    # -- step 5 --------------------------------------------------------------------------

    def _commit(
        self, table: Any, staged: StagedBatch, record: SnapshotRecord, app_id: str, batch_id: int
    ) -> MergeFigures:
        """One Delta commit with ``txn(app_id, batch_id)``: the table's creation, or the
        MERGE (an empty append when nothing was staged)."""
        if staged.create:  # the MERGE checks its own source
            files = [f.path for f in staged.files]
            self.upsert.merger.check_unique(files, schema=staged.schema, version=batch_id)
        if staged.create or not staged.files:
            inserted = sum(f.rows for f in staged.files) if staged.create else 0
            figures = MergeFigures(
                source_rows=staged.source_rows, inserted=inserted, updated=0, deleted=0
            )
            self.target.commit(
                table=table,
                schema=staged.schema,
                partition_by=self.upsert.partition_by,
                files=staged.files if staged.create else (),
                app_id=app_id,
                version=batch_id,
                metadata=self.commit_metadata(replace(record, merge=figures.as_dict()), batch_id),
            )
            return figures
        if self.upsert.operation == "spark_merge" and needs_own_commit(
            read_protocol(table, uri=self.upsert.path)
        ):
            return self._spark_merge(staged, record, app_id, batch_id)
        return self.upsert.merger.merge(
            table,
            files=[f.path for f in staged.files],
            schema=staged.schema,
            app_id=app_id,
            version=batch_id,
            metadata=self.commit_metadata(record, batch_id),
            batch_size=self.upsert.batch_size,
        )

    def _spark_merge(
        self, staged: StagedBatch, record: SnapshotRecord, app_id: str, batch_id: int
    ) -> MergeFigures:
        """The MERGE of a table delta-rs refuses (row tracking, in-commit timestamps,
        domain metadata, type widening), committed by the session's delta-spark with
        ``txn(app_id, batch_id)`` and the snapshot record (:mod:`.spark_merge`); its
        figures are read back from its commit."""
        files = [f.path for f in staged.files]
        merger = self.upsert.merger
        merger.check_unique(files, schema=staged.schema, version=batch_id)
        delete = merger.delete_column if merger.delete_column in staged.schema.names else None
        merge_through_delta_spark(
            self.upsert.spark,
            table_path=self.upsert.path,
            files=[f"{self.upsert.path.rstrip('/')}/{f}" for f in files],
            columns=without_column(staged.schema, delete).names,
            keys=merger.keys,
            delete=delete,
            app_id=app_id,
            version=batch_id,
            metadata=self.commit_metadata(record, batch_id),
        )
        latest = self.target.latest()
        commit = (
            self.target.find_txn_commit(latest, app_id=app_id, txn_version=batch_id)
            if latest is not None
            else None
        )
        figures = MergeFigures.from_commit_info(commit.info) if commit is not None else None
        return figures or MergeFigures(
            source_rows=staged.source_rows, inserted=0, updated=0, deleted=0
        )
