"""Phase 1 of the ``chkpt-delta`` sink, on executors: one task's rows into staged Parquet
files under the table folder (and its dead letters under theirs).

:class:`DeltaWriter` is built in each write task by the sink's assembler
(:class:`~spark_chkpt.delta.sink.assembler.DeltaSink`, made on the driver from the sink's
options); what a task returns (:class:`StagedOutput`, with ``dead_letter_files``) is the
commit message the driver's committer makes visible. This module runs on executors and
imports no committer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_chkpt.delta.features.column_mapping import ColumnMapping
from spark_chkpt.delta.features.constraints import GeneratedColumns, TableRules
from spark_chkpt.delta.features.identity import IdentityColumns
from spark_chkpt.delta.sink.dead_letter_rows import split_dead_letters
from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.delta.staging import ParquetStager, StagedFile, StagedOutput
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.fs import resolve

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True, kw_only=True)
class DeltaWriter:
    """One write task's staging: the sink's options, the table's columns
    (``arrow_schema``) and the dead letters' (``dead_letter_schema``, None without), the
    table's row rules (``rules``), generated columns (``generated``) and identity
    columns (``identity``), applied to each batch before it is staged, and the column
    mapping of each table (None: none)."""

    config: DeltaSinkConfig
    app_id: str
    arrow_schema: pa.Schema
    dead_letter_schema: pa.Schema | None = None
    rules: TableRules | None = None
    generated: GeneratedColumns | None = None
    mapping: ColumnMapping | None = None
    dead_letter_mapping: ColumnMapping | None = None
    identity: IdentityColumns | None = None

    def write(
        self, batches: Iterator[pa.RecordBatch], *, batch_id: int | None, task: int
    ) -> tuple[StagedOutput, list[StagedFile]]:
        """Stage one task's rows; returns its output and its dead-letter files."""
        stager = self._stager(self.config.path, self.arrow_schema, batch_id, task, self.mapping)
        dead = (
            self._stager(
                self.config.dead_letter_path,
                self.dead_letter_schema,
                batch_id,
                task,
                self.dead_letter_mapping,
                (),
            )
            if self.config.dead_letter_path and self.dead_letter_schema is not None
            else None
        )
        # a task's values: from its partition index and its rows' order, the same on a retry
        ids = self.identity.generator(task=task) if self.identity else None
        try:
            for batch in batches:
                if dead is not None:
                    batch = split_dead_letters(batch, dead)
                # the table's rules, before a row of the batch is staged
                if ids is not None:
                    batch = ids.apply(batch)
                if self.generated:
                    batch = self.generated.apply(batch)
                if self.rules:
                    self.rules.check(batch)
                stager.add(batch)
                # tests: the first task of the batch fails, or the driver dies while a
                # task with rows runs (a stateful stage's state stores half written)
                failpoint(FaultPoint.IN_WRITE, stager.output.batch_id, can_fail=task == 0)
            staged = stager.finish()
            if ids is not None:
                staged.identity = ids.uses()
            dead_staged = dead.finish() if dead is not None else None
        except BaseException:
            stager.discard()
            if dead is not None:
                dead.discard()
            raise
        return staged, dead_staged.files if dead_staged is not None else []

    def _stager(
        self,
        path: str,
        schema: pa.Schema,
        batch_id: int | None,
        task: int,
        mapping: ColumnMapping | None,
        partition_by: tuple[str, ...] | None = None,
    ) -> ParquetStager:
        return ParquetStager(
            table=resolve(path, storage_options=self.config.storage_options),
            schema=schema,
            partition_by=self.config.partition_by if partition_by is None else partition_by,
            app_id=self.app_id,
            batch_id=batch_id,
            task=task,
            max_records_per_file=self.config.max_records_per_file,
            target_file_bytes=self.config.target_file_bytes,
            mapping=mapping,
        )
