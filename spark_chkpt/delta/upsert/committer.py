"""``DeltaUpsert``: exactly-once keyed upserts into Delta from ``foreachBatch``.

Spark 4.2 refuses ``outputMode("update")`` for Python sinks, so update-mode aggregates
reach Delta through ``foreachBatch``. There, batch N is snapshot N as for the
``chkpt-delta`` sink, and :meth:`DeltaUpsert.__call__` completes it in one Delta MERGE
that also carries ``txn(appId, N)`` and the snapshot record::

    upsert = DeltaUpsert(path="/data/pv_counts", keys=["app"], checkpoint_location="/chk/pv")
    (counts.writeStream.outputMode("update").foreachBatch(upsert)
           .option("checkpointLocation", "/chk/pv").start())

More: docs/concepts/delta-internals.md (spark_chkpt/delta/upsert/committer.py).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.features.constraints import GeneratedColumns, TableRules
from spark_chkpt.delta.features.protocol import Operation, read_protocol
from spark_chkpt.delta.hooks import DeltaHooks, TableBatch
from spark_chkpt.delta.log.commit import needs_own_commit
from spark_chkpt.delta.log.commit_safety import commit_storage_options
from spark_chkpt.delta.staging import STAGED_NAME, app_tag
from spark_chkpt.delta.table.actions import committing
from spark_chkpt.delta.table.reader import TxnCommit
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.delta.upsert.merge import STAGING_DIR, KeyedMerge, MergeFigures, without_column
from spark_chkpt.delta.upsert.spark_merge import has_delta_spark, merge_through_delta_spark
from spark_chkpt.delta.upsert.staging import StagedBatch, StagingTask, stage_batch
from spark_chkpt.errors import ChkptError, ConfigError, QueryIdentityError, TableFeatureError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.fs import qualify, remember_bucket_options
from spark_chkpt.options import SnapshotTiming
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
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass
class UpsertBatch(TableBatch):
    """One ``foreachBatch`` call."""

    batch_df: Any = None
    schema: pa.Schema | None = None
    staged: StagedBatch | None = None
    committed: bool = False
    figures: MergeFigures | None = None


class DeltaUpsert:
    """``foreachBatch(DeltaUpsert(...))``: each batch upserted by ``keys``, exactly once.

    ``path``: the Delta table (created by the first batch); or ``table``: the name of
    a Delta table of the session catalog (``db.events``, which must exist), resolved to
    its location with the active SparkSession. ``keys``: the key columns,
    unique within a batch. ``checkpoint_location``: the query's checkpoint folder; the
    app id of ``txn(appId, N)`` is its query id unless ``app_id`` is given (as the
    ``chkpt-delta`` sink's ``txnAppId``). A batch row whose boolean ``delete_column`` is
    true deletes the table's row with its keys; the column is never written.
    ``partition_by`` applies when the first batch creates the table. ``batch_size``:
    rows per Arrow batch the driver streams to delta-rs. ``snapshot_timeout`` and
    ``min_pause_between_snapshots`` (durations such as ``"60s"``, ``"500ms"``) are the
    ``chkpt-delta`` sink's ``snapshotTimeout`` and ``minPauseBetweenSnapshots``. See the
    module docstring for the protocol and what holds memory.
    """

    def __init__(
        self,
        *,
        path: str | None = None,
        table: str | None = None,
        keys: Sequence[str],
        checkpoint_location: str,
        app_id: str | None = None,
        delete_column: str = "_delete",
        storage_options: Mapping[str, str] | None = None,
        query_name: str | None = None,
        retained_snapshots: int = 10,
        partition_by: Sequence[str] = (),
        batch_size: int = 65_536,
        max_records_per_file: int = 1_000_000,
        target_file_bytes: int = 128 * 1024**2,
        snapshot_timeout: str | None = None,
        min_pause_between_snapshots: str | None = None,
    ) -> None:
        if importlib.util.find_spec("pandas") is None:
            raise ChkptError(
                f"{WRITER} stages each batch with DataFrame.mapInArrow, which PySpark only "
                "runs with pandas installed (no row passes through pandas). spark-chkpt "
                "depends on it: reinstall the package, or pip install 'pandas>=2.2,<3'"
            )
        if isinstance(keys, str) or not keys or not all(isinstance(k, str) and k for k in keys):
            raise ConfigError("keys", keys, "name one or more key columns, e.g. keys=['app']")
        if len(set(keys)) != len(keys):
            raise ConfigError("keys", list(keys), "each key column once")
        if table is not None:
            path = _table_location(table, path)
        if not path:
            raise ConfigError(
                "path", path, "the Delta table's path or URI (or table: a catalog table's name)"
            )
        if not checkpoint_location:
            raise ConfigError(
                "checkpoint_location", checkpoint_location, "the query's checkpointLocation"
            )
        if delete_column in keys:
            raise ConfigError("delete_column", delete_column, "a column that is not a key")
        for option, value in (
            ("retained_snapshots", retained_snapshots),
            ("batch_size", batch_size),
            ("max_records_per_file", max_records_per_file),
            ("target_file_bytes", target_file_bytes),
        ):
            if value < (0 if option == "retained_snapshots" else 1):
                raise ConfigError(option, value, "a positive number")
        self.path = qualify(path)  # on the driver: executors have another working folder
        self.keys = tuple(keys)
        self.checkpoint_location = qualify(checkpoint_location)
        self.app_id_option = app_id
        self.delete_column = delete_column
        self.storage_options = commit_storage_options(
            uri=self.path,
            storage_options=dict(storage_options or {}),
            option_format="storage_options[{!r}]",
        )
        for location in (self.path, self.checkpoint_location):  # read with no options
            remember_bucket_options(location, self.storage_options)
        self.query_name = query_name
        self.retained_snapshots = retained_snapshots
        self.partition_by = tuple(partition_by)
        self.batch_size = batch_size
        self.max_records_per_file = max_records_per_file
        self.target_file_bytes = target_file_bytes
        self.timing = SnapshotTiming.from_options(
            {
                k: v
                for k, v in (
                    ("snapshot_timeout", snapshot_timeout),
                    ("min_pause_between_snapshots", min_pause_between_snapshots),
                )
                if v is not None
            },
            names=("snapshot_timeout", "min_pause_between_snapshots"),
        )
        self.target = DeltaTarget(uri=self.path, storage_options=self.storage_options)
        self.merger = KeyedMerge(target=self.target, keys=self.keys, delete_column=delete_column)
        # Read at the first batch: the checkpoint's metadata exists once the query runs.
        self._snapshots: UpsertCommitter | None = None
        self._query_id: str | None = None
        # The table's rules as step 2 of the current batch read them (None: no table).
        self.rules: TableRules | None = None
        self.generated: GeneratedColumns | None = None
        # The query's session, as step 2 found it: with delta-spark, a MERGE into a
        # table delta-rs refuses is committed through it (spark_merge)
        self.spark: Any = None
        self.operation: Operation = "merge"

    def snapshot_settings(self, *, app_id: str) -> SnapshotSettings:
        """The snapshot protocol's settings of these arguments (``app_id``: ``app_id``,
        else the checkpoint's query id, read at the first batch)."""
        return SnapshotSettings(
            checkpoint_location=self.checkpoint_location,
            app_id=app_id,
            query_name=self.query_name,
            retained_snapshots=self.retained_snapshots,
            timing=self.timing,
        )

    def __call__(self, batch_df: DataFrame, batch_id: int) -> SnapshotRecord:
        """Complete snapshot ``batch_id`` with ``batch_df``'s rows (steps 1-6 of the
        module docstring); returns its record."""
        # Step 1
        try:
            return self._coordinator(batch_df).commit(batch_id=batch_id, batch_df=batch_df)
        finally:
            _release_batch_plans(batch_df)

    # -- step 1 --------------------------------------------------------------------------

    def _coordinator(self, batch_df: DataFrame) -> UpsertCommitter:
        """The snapshot coordinator of the checkpoint's query, after checking that it is
        the query running ``foreachBatch`` (``batch_df`` outside a query: not checked)."""
        if self._snapshots is None:
            from spark_chkpt.snapshot.checkpoint import SparkCheckpoint

            query_id = SparkCheckpoint(location=self.checkpoint_location).query_id()
            self._snapshots = UpsertCommitter(upsert=self, app_id=self.app_id_option or query_id)
            self._query_id = query_id
        running = _running_query(batch_df.sparkSession, self._query_id)
        if running and running != self._query_id:
            raise QueryIdentityError(
                f"{WRITER}: checkpoint_location {self.checkpoint_location} belongs to query "
                f"{self._query_id}, but foreachBatch runs in query {running}. Pass the "
                "checkpointLocation of the query that calls this upsert (the folder given "
                "to .option('checkpointLocation', ...)). Nothing was written."
            )
        return self._snapshots

    # -- step 2 --------------------------------------------------------------------------

    def check(self, batch_schema: StructType, *, spark: Any = None) -> pa.Schema:
        """Step 2: the batch's Arrow schema, once the keys, the delete column and the
        partition columns are found in it and its columns and types are the table's (if
        there is one; ``spark``: the query's session, whose delta-spark commits a MERGE
        into a table delta-rs refuses). Raises :class:`ConfigError` or
        :class:`~spark_chkpt.errors.SchemaMismatchError` naming the column."""
        from pyspark.sql.types import BooleanType

        from spark_chkpt.runtime.spark_version import arrow_schema

        columns = batch_schema.fieldNames()
        missing = [k for k in self.keys if k not in columns]
        if missing:
            raise ConfigError(
                "keys",
                list(self.keys),
                f"key column(s) {', '.join(missing)} not in the batch; its columns are "
                f"{', '.join(columns)}. Nothing was written.",
            )
        absent = [c for c in self.partition_by if c not in columns]
        if absent:
            raise ConfigError(
                "partition_by",
                list(self.partition_by),
                f"column(s) {', '.join(absent)} not in the batch; its columns are "
                f"{', '.join(columns)}",
            )
        if self.delete_column in columns:
            kind = batch_schema[self.delete_column].dataType
            if not isinstance(kind, BooleanType):
                raise ConfigError(
                    "delete_column",
                    self.delete_column,
                    f"the batch's column {self.delete_column} is {kind.simpleString()}; it "
                    "must be boolean (true deletes the table's row with the row's keys). "
                    "Nothing was written.",
                )
        schema = arrow_schema(batch_schema)
        self.spark = spark
        self.operation = "spark_merge" if has_delta_spark(spark) else "merge"
        table = self.target.latest()
        self.rules, self.generated = None, None
        if table is not None:
            # every feature the table requires, before anything is staged; the table's
            # row rules and generated columns go to the staging tasks
            self.target.check_features(table, writer=WRITER, operation=self.operation)
            self.rules, self.generated = self.target.row_rules(table, writer=WRITER)
            schema = self.generated.schema(schema)
            self.merger.check_schema(table, schema)
        return schema


class UpsertCommitter(DeltaHooks[UpsertBatch]):
    """The hooks of :meth:`SnapshotCoordinator.commit` for one :class:`DeltaUpsert`
    (steps 2-6 of the module docstring)."""

    sink = "delta-upsert"
    writer = WRITER
    visible_point = FaultPoint.AFTER_DELTA_COMMIT

    def __init__(self, *, upsert: DeltaUpsert, app_id: str) -> None:
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


def _release_batch_plans(batch_df: DataFrame) -> None:
    """Over Spark Connect, the batch's DataFrame left for the server to drop.

    The server caches each ``foreachBatch`` batch as a ``CachedRemoteRelation`` and
    removes it itself once the function returns (``StreamingForeachBatchHelper``:
    "Removing DataFrame with id ... from the cache"). pyspark's client also asks for
    the removal, from the relation's ``__del__``: a gRPC call without deadline (pyspark
    4.0-4.3; SPARK-58846) that pyspark's foreachBatch worker makes as soon as it drops
    the batch, before it tells the server the batch is done. That call went unanswered,
    the worker hung and the query with it (in this project's Connect chain: two runs of
    three, and every run once the batch was freed there). With the relation's id
    cleared, its ``__del__`` sends nothing; the server's own removal stays. Classic
    PySpark, or a pyspark whose relation has no such id: nothing to do."""
    from spark_chkpt.runtime.connect import is_connect

    relation: Any = getattr(batch_df, "_plan", None)
    if is_connect(batch_df.sparkSession) and hasattr(relation, "_relation_id"):
        relation._relation_id = None


def _running_query(spark: Any, expected: str | None) -> str | None:
    """The id of the query whose ``foreachBatch`` runs now (None: not in a query).

    Classic PySpark: the query thread's local property. Spark Connect runs
    ``foreachBatch`` in a Python process of the server, whose session has neither a
    SparkContext nor the query thread's properties: the session's active queries
    stand in. One active query is the one running; with several, ``expected`` among
    them passes (which of them calls is not known there); none: not in a query."""
    from spark_chkpt.runtime.connect import is_connect

    if not is_connect(spark):
        return spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    active = sorted(str(query.id) for query in spark.streams.active)
    if not active or expected in active:
        return expected if active else None
    return active[0] if len(active) == 1 else f"one of {', '.join(active)}"


def _table_location(table: str, path: str | None) -> str:
    """The location of catalog table ``table`` (``DeltaUpsert(table=...)``), resolved
    with the active SparkSession of the driver that builds the upsert."""
    from pyspark.sql import SparkSession

    from spark_chkpt.delta.table.catalog import resolve_table

    if path:
        raise ConfigError("table", table, "give either path or table, not both")
    spark = SparkSession.getActiveSession()
    if spark is None:
        raise ConfigError(
            "table",
            table,
            "a catalog table is resolved with the active SparkSession: build DeltaUpsert "
            "on the driver once the session exists, or give path",
        )
    return resolve_table(spark, table, writer=WRITER).location
