"""``DeltaUpsert``, the public front of exactly-once keyed upserts into Delta from
``foreachBatch``: its arguments checked, the query it runs in, step 2's checks of a batch.

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
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.features.constraints import GeneratedColumns, TableRules
from spark_chkpt.delta.features.protocol import Operation
from spark_chkpt.delta.log.commit_safety import commit_storage_options
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.delta.upsert.merge import KeyedMerge
from spark_chkpt.delta.upsert.spark_merge import has_delta_spark
from spark_chkpt.errors import ChkptError, ConfigError, QueryIdentityError
from spark_chkpt.fs import qualify, remember_bucket_options
from spark_chkpt.options import SnapshotTiming
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

from spark_chkpt.delta.upsert.committer import WRITER, UpsertCommitter

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"


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
        _require_pandas()
        _check_keys(keys)
        path = _checked_path(path, table=table, checkpoint_location=checkpoint_location)
        if delete_column in keys:
            raise ConfigError("delete_column", delete_column, "a column that is not a key")
        _check_counts(
            {
                "retained_snapshots": retained_snapshots,
                "batch_size": batch_size,
                "max_records_per_file": max_records_per_file,
                "target_file_bytes": target_file_bytes,
            }
        )
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


def _require_pandas() -> None:
    if importlib.util.find_spec("pandas") is None:
        raise ChkptError(
            f"{WRITER} stages each batch with DataFrame.mapInArrow, which PySpark only "
            "runs with pandas installed (no row passes through pandas). spark-chkpt "
            "depends on it: reinstall the package, or pip install 'pandas>=2.2,<3'"
        )


def _check_keys(keys: Sequence[str]) -> None:
    if isinstance(keys, str) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise ConfigError("keys", keys, "name one or more key columns, e.g. keys=['app']")
    if len(set(keys)) != len(keys):
        raise ConfigError("keys", list(keys), "each key column once")


def _checked_path(path: str | None, *, table: str | None, checkpoint_location: str) -> str:
    """The table's path (``table``: a catalog table's location), once it and the
    checkpoint's are given."""
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
    return path


def _check_counts(counts: Mapping[str, int]) -> None:
    for option, value in counts.items():
        if value < (0 if option == "retained_snapshots" else 1):
            raise ConfigError(option, value, "a positive number")


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
