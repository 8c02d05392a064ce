"""What a Delta table asks of a writer: the features it requires, the rules of its rows,
its schema against a batch's, and its column mapping (columns added the way delta-spark
adds them, where delta-rs refuses).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.features.column_mapping import ColumnMapping
from spark_chkpt.delta.features.constraints import (
    GeneratedColumns,
    TableRules,
    generated_columns,
    table_rules,
)
from spark_chkpt.delta.features.protocol import Operation, check_table, read_protocol
from spark_chkpt.delta.log.commit import (
    check_own_commit_store,
)
from spark_chkpt.delta.staging import normalize_schema
from spark_chkpt.delta.table.reader import TableReader
from spark_chkpt.errors import (
    CommitConflictError,
    SchemaMismatchError,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchemaPlan:
    """How a batch's schema relates to the table's."""

    new_columns: tuple[str, ...]
    type_changes: tuple[str, ...]  # "col: table int64, batch string"

    @property
    def compatible(self) -> bool:
        return not self.new_columns and not self.type_changes


class ProtocolChecks(TableReader):
    """The table's protocol as a writer meets it, checked before anything is staged or
    committed."""

    def check_features(self, table: Any, *, writer: str, operation: Operation) -> None:
        """Raise :class:`~spark_chkpt.errors.TableFeatureError` unless ``writer`` can
        honour every feature ``table`` (a ``DeltaTable``; None: none yet) requires for
        ``operation`` (:mod:`spark_chkpt.delta.features.protocol`)."""
        if table is not None:
            found = read_protocol(table, uri=self.uri)
            check_table(found, writer=writer, operation=operation)
            check_own_commit_store(found, writer=writer)

    def row_rules(self, table: Any, *, writer: str) -> tuple[TableRules, GeneratedColumns]:
        """The rules each row written to ``table`` must keep (CHECK constraints, NOT NULL
        columns, invariants) and its generated columns, parsed on the driver (an
        expression that cannot be evaluated is refused naming it)."""
        found = read_protocol(table, uri=self.uri)
        rules = table_rules(
            uri=self.uri, configuration=found.configuration, columns=found.columns, writer=writer
        )
        generated = generated_columns(
            uri=self.uri,
            columns=found.columns,
            arrow_schema=self.arrow_schema(table),
            writer=writer,
        )
        return rules, generated

    def plan_schema(self, table: Any, batch_schema: pa.Schema) -> SchemaPlan:
        current = self.arrow_schema(table)
        wanted = normalize_schema(batch_schema)
        new, changed = [], []
        for f in wanted:
            idx = current.get_field_index(f.name)
            if idx < 0:
                new.append(f.name)
            elif not _same_type(current.field(idx).type, f.type):
                changed.append(f"{f.name}: table {current.field(idx).type}, batch {f.type}")
        return SchemaPlan(new_columns=tuple(new), type_changes=tuple(changed))

    def check_schema(self, table: Any, batch_schema: pa.Schema, *, merge: bool) -> SchemaPlan:
        """Raise :class:`SchemaMismatchError` unless the batch fits (or may evolve) the table."""
        plan = self.plan_schema(table, batch_schema)
        if plan.type_changes:
            raise SchemaMismatchError(
                f"Delta table {self.uri}: column types differ ({'; '.join(plan.type_changes)})"
                ". Cast the columns in the query; mergeSchema adds columns but never changes "
                "a type."
            )
        if plan.new_columns and not merge:
            raise SchemaMismatchError(
                f"Delta table {self.uri} has no column(s) {', '.join(plan.new_columns)} that "
                "the query writes. Set option mergeSchema=true to add them, or drop them "
                "from the query."
            )
        return plan

    def column_mapping(self, table: Any | None = None) -> ColumnMapping | None:
        """The table's column mapping (None: no table yet, or no mapping); ``table``:
        the opened table, else it is opened."""
        table = table if table is not None else self.latest()
        return ColumnMapping.of_table(table) if table is not None else None

    def planned_mapping(self, batch_schema: pa.Schema, table: Any = None) -> ColumnMapping | None:
        """The mapping a batch of ``batch_schema`` is staged with: the table's (``table``,
        else opened), plus physical names and ids for the columns the table lacks (those
        mergeSchema will add; without mergeSchema the commit refuses them before anything
        is visible)."""
        from deltalake import Schema

        mapping = self.column_mapping(table)
        if mapping is None:
            return None
        wanted = normalize_schema(batch_schema)
        new = [f for f in wanted if mapping.identity(f.name) is None]
        if not new:
            return mapping
        fields = json.loads(Schema.from_arrow(pa_schema(new)).to_json())["fields"]
        return mapping.with_new_columns([{**f, "nullable": True} for f in fields])

    def check_mapping(
        self, table: Any, staged: ColumnMapping | None, columns: Sequence[str], *, what: str
    ) -> None:
        """Raise :class:`SchemaMismatchError` if the table's column mapping no longer
        matches the one ``what`` was staged with for ``columns`` (another writer renamed,
        dropped or added a column, or turned column mapping on, since)."""
        current = self.column_mapping(table)
        if staged is None and current is None:
            return
        if staged is None:
            problems = [f"the table became column-mapped ({current.mode if current else ''})"]
        else:
            problems = staged.changed_under(current, columns)
        if problems:
            raise SchemaMismatchError(
                f"{what}: the columns of Delta table {self.uri} changed while the batch was "
                f"staged ({'; '.join(problems)}). Nothing was committed. Restart the query: "
                "the batch is staged again with the table's columns as they are now."
            )

    def add_mapped_columns(self, table: Any, mapping: ColumnMapping) -> None:
        """Add the columns ``mapping`` planned to the column-mapped ``table`` in one
        commit of a ``metaData`` action: their physical names and ids in the schema and
        ``delta.columnMapping.maxColumnId`` advanced, as delta-spark's ADD COLUMNS
        writes it. delta-rs refuses to (``alter.add_columns``), so the commit file is
        written here, created only if absent (a lost race is a
        :class:`CommitConflictError`: the coordinator retries on the new version)."""
        names = [f["name"] for f in mapping.planned_fields()]
        if not self.location.is_local:
            raise SchemaMismatchError(
                f"Delta table {self.uri} is column-mapped ({mapping.mode}) and mergeSchema "
                f"would add column(s) {', '.join(names)}: delta-rs cannot add columns to "
                "such a table, and spark-chkpt writes that commit itself only on a local "
                "filesystem (it needs a create-if-absent the object store clients here lack)."
                " Add the column(s) with delta-spark (ALTER TABLE ... ADD COLUMNS), then "
                "restart the query. Nothing was committed."
            )
        version, text = _add_columns_commit(table, mapping)
        try:
            self.location.child("_delta_log", f"{version:020d}.json").create_exclusive(text)
        except FileExistsError as e:
            raise CommitConflictError(
                f"Delta table {self.uri}: version {version} was committed by another writer "
                f"while mergeSchema added column(s) {', '.join(names)}"
            ) from e
        log.info(
            "Delta table %s: added column(s) %s (mergeSchema, column mapping %s, maxColumnId %d)",
            self.uri,
            ", ".join(names),
            mapping.mode,
            mapping.max_column_id,
        )

    def add_columns(self, table: Any, batch_schema: pa.Schema, names: Sequence[str]) -> None:
        from deltalake import Field, Schema

        wanted = normalize_schema(batch_schema)
        fields = Schema.from_arrow(wanted).fields
        new = [Field(f.name, f.type, nullable=True) for f in fields if f.name in set(names)]
        table.alter.add_columns(new)
        log.info("Delta table %s: added column(s) %s (mergeSchema)", self.uri, ", ".join(names))


def _add_columns_commit(table: Any, mapping: ColumnMapping) -> tuple[int, str]:
    """The version and the JSON commit of an ADD COLUMNS of ``mapping``'s planned columns
    to ``table``, as delta-spark writes it: a ``metaData`` action with their physical
    names and ids and ``delta.columnMapping.maxColumnId`` advanced."""
    meta = table.metadata()
    fields = json.loads(table.schema().to_json())["fields"]
    schema = {"type": "struct", "fields": [*fields, *mapping.planned_fields()]}
    version = int(table.version()) + 1
    now = int(time.time() * 1000)
    actions = [
        {
            "commitInfo": {
                "timestamp": now,
                "operation": "ADD COLUMNS",
                "operationParameters": {
                    "columns": json.dumps([{"column": f} for f in mapping.planned_fields()])
                },
                "readVersion": version - 1,
                "isBlindAppend": False,
                "engineInfo": "spark-chkpt (mergeSchema)",
            }
        },
        {
            "metaData": {
                "id": meta.id,
                "name": meta.name,
                "description": meta.description,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema, separators=(",", ":")),
                "partitionColumns": list(meta.partition_columns),
                "configuration": mapping.metadata_configuration(meta.configuration),
                "createdTime": meta.created_time,
            }
        },
    ]
    text = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    return version, text


def pa_schema(fields: Sequence[pa.Field]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(list(fields))


def _same_type(table_type: pa.DataType, batch_type: pa.DataType) -> bool:
    import pyarrow as pa

    if table_type == batch_type:
        return True
    # delta-rs reads strings/binary back as their large or view variants.
    families = (
        (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view),
        (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view),
    )
    for family in families:
        if any(f(table_type) for f in family) and any(f(batch_type) for f in family):
            return True
    if (
        pa.types.is_list(table_type)
        or pa.types.is_large_list(table_type)
        or pa.types.is_list_view(table_type)
    ) and (pa.types.is_list(batch_type) or pa.types.is_large_list(batch_type)):
        return _same_type(table_type.value_type, batch_type.value_type)
    if pa.types.is_struct(table_type) and pa.types.is_struct(batch_type):
        return [f.name for f in table_type] == [f.name for f in batch_type] and all(
            _same_type(a.type, b.type) for a, b in zip(table_type, batch_type, strict=True)
        )
    if pa.types.is_map(table_type) and pa.types.is_map(batch_type):
        return _same_type(table_type.key_type, batch_type.key_type) and _same_type(
            table_type.item_type, batch_type.item_type
        )
    return False
