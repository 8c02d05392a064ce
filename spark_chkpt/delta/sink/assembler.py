"""The ``chkpt-delta`` sink assembled from its options: its writer and its committer.

As Flink's ``KafkaSink`` builds its ``KafkaWriter`` (``createWriter``) and its
``KafkaCommitter`` (``createCommitter``) from one configuration, :class:`DeltaSink` is
made once on the driver (:meth:`DeltaSink.assemble`: the options parsed and checked
against the query's columns, the app id read from the checkpoint) and travels to the
tasks with Spark's writer. It hands each write task a
:class:`~spark_chkpt.delta.sink.writer.DeltaWriter` (phase 1, executors) and the
driver's ``commit`` and ``abort`` a
:class:`~spark_chkpt.delta.sink.committer.DeltaCoordinator` (phase 2). This is the one
module that knows both sides: the writer's module imports no committer
(``tests/project/test_architecture.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from spark_chkpt.delta.features.column_mapping import ColumnMapping
from spark_chkpt.delta.features.constraints import GeneratedColumns, TableRules
from spark_chkpt.delta.features.identity import IdentityColumns, identity_columns
from spark_chkpt.delta.features.protocol import read_protocol
from spark_chkpt.delta.sink.committer import DeltaCoordinator
from spark_chkpt.delta.sink.dead_letter_rows import pa_schema_of
from spark_chkpt.delta.sink.dead_letters import check_dead_letters
from spark_chkpt.delta.sink.options import DEAD_LETTER_COLUMN, DeltaSinkConfig
from spark_chkpt.delta.sink.writer import DeltaWriter
from spark_chkpt.delta.staging import StagedOutput
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class DeltaSink:
    """One query's ``chkpt-delta`` sink: its options, the protocol's settings they
    produced, the table's columns and the dead letters' (None without), whether
    each batch replaces the table (outputMode("complete")), and the column mapping of
    the table and of the dead-letter table each batch is staged with (None: not
    column-mapped, or not created yet; read on the driver when the batch is planned)."""

    config: DeltaSinkConfig
    snapshot: SnapshotSettings
    arrow_schema: pa.Schema
    dead_letter_schema: pa.Schema | None = None
    complete: bool = False
    rules: TableRules | None = None  # the table's CHECK / NOT NULL / invariants
    generated: GeneratedColumns | None = None
    mapping: ColumnMapping | None = None
    dead_letter_mapping: ColumnMapping | None = None
    identity: IdentityColumns | None = None  # with the high-water marks at planning

    @classmethod
    def assemble(
        cls, *, options: Mapping[str, str], schema: StructType, complete: bool = False
    ) -> DeltaSink:
        """The sink of Spark's ``options`` for a query whose output is ``schema``, on the
        driver (``complete``: outputMode("complete"))."""
        config = DeltaSinkConfig.from_options(options)
        config.check_columns(schema.fieldNames())
        check_dead_letters(schema, config, complete=complete)
        sink = cls.of(config=config, schema=_arrow(schema), complete=complete)
        return sink.checked().mapped()

    def checked(self) -> DeltaSink:
        """This sink once the table's features (and the dead-letter table's) are found
        honoured, with the table's row rules and generated columns for the write tasks,
        before any file is staged; :class:`~spark_chkpt.errors.TableFeatureError` naming
        a feature that is not. Spark asks for the writer at each batch's planning, so
        this runs at the start and before every batch."""
        config = self.config
        if config.dead_letter_path:
            letters = DeltaTarget(
                uri=config.dead_letter_path, storage_options=config.storage_options
            )
            letters.check_features(letters.latest(), writer="chkpt-delta", operation="append")
        target = DeltaTarget(uri=config.path, storage_options=config.storage_options)
        table = target.latest()
        if table is None:
            return self
        target.check_features(
            table, writer="chkpt-delta", operation="overwrite" if self.complete else "append"
        )
        rules, generated = target.row_rules(table, writer="chkpt-delta")
        # identity columns and their high-water marks as this batch is planned (a
        # GENERATED ALWAYS column the query gives is refused here)
        identity = identity_columns(
            uri=config.path,
            columns=read_protocol(table, uri=config.path).columns,
            names=self.arrow_schema.names,
            writer="chkpt-delta",
        )
        return replace(
            self,
            arrow_schema=identity.schema(generated.schema(self.arrow_schema)),
            rules=rules,
            generated=generated,
            identity=identity or None,
        )

    def mapped(self) -> DeltaSink:
        """This sink with the column mappings of its tables as they are now (Spark
        assembles the sink on the driver for every batch: a rename or drop by another
        writer between batches is seen by the next one), and, without ``partitionBy``,
        the partition columns of a table that exists (as delta-spark takes them)."""
        store = self.config.storage_options
        target = DeltaTarget(uri=self.config.path, storage_options=store)
        table = target.latest()
        mapping = target.planned_mapping(self.arrow_schema, table) if table is not None else None
        config = self.config
        if table is not None and not config.partition_by:
            existing = tuple(table.metadata().partition_columns)
            if existing and all(c in self.arrow_schema.names for c in existing):
                config = replace(config, partition_by=existing)
        letters = None
        if self.config.dead_letter_path and self.dead_letter_schema is not None:
            letters = DeltaTarget(
                uri=self.config.dead_letter_path, storage_options=store
            ).planned_mapping(self.dead_letter_schema)
        return replace(self, config=config, mapping=mapping, dead_letter_mapping=letters)

    @classmethod
    def of(cls, *, config: DeltaSinkConfig, schema: pa.Schema, complete: bool = False) -> DeltaSink:
        """The sink of parsed options and the query's output in Arrow; the table's
        columns are the output's but ``_dead_letter``, whose struct fields are the
        dead-letter table's columns."""
        index = schema.get_field_index(DEAD_LETTER_COLUMN)
        return cls(
            config=config,
            snapshot=config.snapshot_settings(),
            arrow_schema=schema.remove(index) if index >= 0 else schema,
            dead_letter_schema=pa_schema_of(schema.field(index).type) if index >= 0 else None,
            complete=complete,
        )

    def writer(self) -> DeltaWriter:
        """Phase 1: one write task's staging (executors)."""
        return DeltaWriter(
            config=self.config,
            app_id=self.snapshot.app_id,
            arrow_schema=self.arrow_schema,
            dead_letter_schema=self.dead_letter_schema,
            rules=self.rules,
            generated=self.generated,
            mapping=self.mapping,
            dead_letter_mapping=self.dead_letter_mapping,
            identity=self.identity,
        )

    def committer(self) -> DeltaCoordinator:
        """Phase 2: the coordinator of the driver's ``commit`` and ``abort``."""
        return DeltaCoordinator(
            config=self.config,
            snapshot=self.snapshot,
            complete=self.complete,
            staged_rules=frozenset(
                (self.rules.names() if self.rules else set())
                | (self.generated.names() if self.generated else set())
            ),
        )

    def commit(self, *, messages: Sequence[StagedOutput | None], batch_id: int) -> SnapshotRecord:
        """Complete snapshot ``batch_id`` from the tasks' staged output (driver)."""
        return self.committer().commit(
            messages=messages,
            batch_id=batch_id,
            schema=self.arrow_schema,
            dead_letter_schema=self.dead_letter_schema,
            mapping=self.mapping,
            dead_letter_mapping=self.dead_letter_mapping,
        )

    def abort(self, *, messages: Sequence[StagedOutput | None], batch_id: int) -> int:
        """Delete what the tasks of a failed batch staged (driver)."""
        return self.committer().abort(messages=messages, batch_id=batch_id)


def _arrow(schema: StructType) -> pa.Schema:
    from spark_chkpt.runtime.spark_version import arrow_schema

    return arrow_schema(schema)
