"""Delta column mapping (``delta.columnMapping.mode`` = ``name`` or ``id``): the logical
names a query writes, the physical names and field ids the files hold.

On a column-mapped table every column, nested struct fields included, carries a
physical name (``delta.columnMapping.physicalName``) and an id (``.id``) in the schema's
metadata; ``delta.columnMapping.maxColumnId`` is the highest id given. Delta's protocol
(PROTOCOL.md, "Column Mapping") asks a writer to write its data files with the
physical names and each field's id as the Parquet ``field_id``, to key statistics and
partition values by the physical names, and to give a new column a fresh physical name
and the next id, ``maxColumnId`` advanced alongside. delta-spark reads ``name`` tables by
physical name and ``id`` tables by field id: a file written with the logical names
reads as NULLs. :class:`ColumnMapping` is read on the driver from the table's metadata
(:meth:`ColumnMapping.of_table`) and travels to the executors with the writer, where
:class:`~spark_chkpt.delta.staging.ParquetStager`
turns each Arrow batch into its physical form (:meth:`ColumnMapping.physical_schema`,
zero-copy: a renamed struct has the same buffers). :meth:`ColumnMapping.with_new_columns`
plans the physical names and ids of the columns ``mergeSchema`` adds, and
:meth:`ColumnMapping.changed_under` says which of a batch's columns another writer
renamed, dropped or re-added since the batch was staged.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

MODE_KEY = "delta.columnMapping.mode"
MAX_ID_KEY = "delta.columnMapping.maxColumnId"
PHYSICAL_KEY = "delta.columnMapping.physicalName"
ID_KEY = "delta.columnMapping.id"
PARQUET_FIELD_ID = "PARQUET:field_id"
MODES = ("name", "id")


def _meta(delta_field: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = delta_field.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _struct_fields(delta_type: Any) -> list[dict[str, Any]]:
    if isinstance(delta_type, Mapping) and delta_type.get("type") == "struct":
        return list(delta_type.get("fields", []))
    return []


@dataclass(frozen=True)
class ColumnMapping:
    """A column-mapped table's mapping: its ``mode``, its schema as Delta writes it
    (``schema``: the parsed ``schemaString``, every field's physical name and id in its
    metadata) and ``max_column_id``. ``planned`` names the top-level columns
    :meth:`with_new_columns` added (not yet in the table)."""

    mode: str
    schema: dict[str, Any]
    max_column_id: int
    planned: tuple[str, ...] = field(default=())

    # -- reading the table's metadata ------------------------------------------------

    @classmethod
    def from_metadata(
        cls, *, schema_string: str, configuration: Mapping[str, str]
    ) -> ColumnMapping | None:
        """The mapping of a table with this ``schemaString`` and ``configuration``;
        None when the table has no column mapping (mode absent or ``none``)."""
        mode = (configuration.get(MODE_KEY) or "none").lower()
        if mode not in MODES:
            return None
        schema = json.loads(schema_string)
        ids = [i for _, i in _walk_ids(schema)]
        return cls(
            mode=mode,
            schema=schema,
            max_column_id=max([int(configuration.get(MAX_ID_KEY) or 0), *ids]),
        )

    @classmethod
    def of_table(cls, table: Any) -> ColumnMapping | None:
        """The mapping of a delta-rs ``DeltaTable`` (None: not column-mapped)."""
        return cls.from_metadata(
            schema_string=table.schema().to_json(), configuration=table.metadata().configuration
        )

    # -- names ---------------------------------------------------------------------------

    def _top(self, name: str) -> dict[str, Any] | None:
        for f in self.schema.get("fields", []):
            if f.get("name") == name:
                return dict(f)
        return None

    def physical_name(self, name: str) -> str:
        """The physical name of top-level column ``name`` (KeyError if the mapping lacks it)."""
        found = self._top(name)
        if found is None or PHYSICAL_KEY not in _meta(found):
            raise KeyError(name)
        return str(_meta(found)[PHYSICAL_KEY])

    def identity(self, name: str) -> tuple[str, int] | None:
        """(physical name, id) of top-level column ``name``; None if the table has none."""
        found = self._top(name)
        if found is None:
            return None
        meta = _meta(found)
        return str(meta.get(PHYSICAL_KEY, name)), int(meta.get(ID_KEY, -1))

    # -- the physical schema -------------------------------------------------------------

    def physical_schema(self, logical: pa.Schema) -> pa.Schema:
        """``logical`` (the query's columns, each in the mapping) with every struct field,
        nested ones too, under its physical name and with its id as ``PARQUET:field_id``."""
        import pyarrow as pa

        fields = []
        for f in logical:
            found = self._top(f.name)
            if found is None:
                raise KeyError(f.name)
            fields.append(_physical_field(f, found))
        return pa.schema(fields)

    @staticmethod
    def to_physical(batch: pa.RecordBatch, physical: pa.Schema) -> pa.RecordBatch:
        """``batch`` (logical names, the columns of ``physical`` in order) as a batch of
        ``physical``: the same buffers, viewed under the physical names."""
        import pyarrow as pa

        return pa.RecordBatch.from_arrays(
            [column.view(f.type) for column, f in zip(batch.columns, physical, strict=True)],
            schema=physical,
        )

    # -- schema evolution ------------------------------------------------------------------

    def with_new_columns(self, new: Sequence[Mapping[str, Any]]) -> ColumnMapping:
        """This mapping with the top-level Delta fields ``new`` (``Field.to_json`` dicts,
        without mapping metadata) appended, each field and nested struct field given a
        fresh physical name ``col-<uuid>`` and the next id (parents before their
        children, as delta-spark numbers them); ``max_column_id`` advanced."""
        next_id = self.max_column_id
        added = []
        for f in new:
            assigned, next_id = _assign(dict(f), next_id)
            added.append(assigned)
        schema = dict(self.schema)
        schema["fields"] = [*self.schema.get("fields", []), *added]
        return ColumnMapping(
            mode=self.mode,
            schema=schema,
            max_column_id=next_id,
            planned=(*self.planned, *(str(f["name"]) for f in new)),
        )

    def planned_fields(self) -> list[dict[str, Any]]:
        """The Delta fields of the planned columns (with their mapping metadata)."""
        return [f for f in self.schema.get("fields", []) if f.get("name") in self.planned]

    def changed_under(self, current: ColumnMapping | None, columns: Sequence[str]) -> list[str]:
        """The ``columns`` whose physical name or id in ``current`` (the table now) is not
        the one this mapping (the one the batch was staged with) gave them, described; a
        planned column must still be absent and its ids above ``current``'s
        ``maxColumnId``."""
        problems = []
        if current is None:
            return [f"the table's column mapping ({self.mode}) was turned off"]
        if current.mode != self.mode:
            problems.append(f"the mapping mode changed from {self.mode} to {current.mode}")
        for name in columns:
            staged, now = self.identity(name), current.identity(name)
            if name in self.planned:
                if now is not None:
                    problems.append(f"column {name} was added by another writer")
                continue
            if staged != now:
                problems.append(
                    f"column {name} was staged as {staged[0] if staged else '-'} but the "
                    f"table now holds {'no column ' + name if now is None else now[0]}"
                )
        if self.planned and current.max_column_id > self.max_column_id - _count_ids(
            self.planned_fields()
        ):
            problems.append(
                f"another writer added columns (maxColumnId {current.max_column_id}), so the "
                f"ids planned for {', '.join(self.planned)} may be taken"
            )
        return problems

    def metadata_configuration(self, configuration: Mapping[str, str]) -> dict[str, str]:
        """``configuration`` with this mapping's ``maxColumnId``."""
        return {**configuration, MAX_ID_KEY: str(self.max_column_id)}


def _walk_ids(node: Any) -> list[tuple[str, int]]:
    """Every (physical name, id) of a Delta schema or type, nested fields included."""
    out: list[tuple[str, int]] = []
    if isinstance(node, Mapping):
        if "name" in node and "type" in node:
            meta = _meta(node)
            if ID_KEY in meta:
                out.append((str(meta.get(PHYSICAL_KEY, node["name"])), int(meta[ID_KEY])))
            out.extend(_walk_ids(node["type"]))
        elif node.get("type") == "struct":
            for f in node.get("fields", []):
                out.extend(_walk_ids(f))
        elif node.get("type") == "array":
            out.extend(_walk_ids(node.get("elementType")))
        elif node.get("type") == "map":
            out.extend(_walk_ids(node.get("keyType")))
            out.extend(_walk_ids(node.get("valueType")))
    return out


def _count_ids(fields: Sequence[Mapping[str, Any]]) -> int:
    return sum(len(_walk_ids(f)) for f in fields)


def _assign(delta_field: dict[str, Any], last_id: int) -> tuple[dict[str, Any], int]:
    """``delta_field`` with a physical name and the id after ``last_id``, its nested
    struct fields after it; returns it and the last id given."""
    last_id += 1
    metadata = {
        **{k: v for k, v in _meta(delta_field).items() if not k.startswith("delta.columnMapping")},
        ID_KEY: last_id,
        PHYSICAL_KEY: f"col-{uuid.uuid4()}",
    }
    assigned_type, last_id = _assign_type(delta_field["type"], last_id)
    return {**delta_field, "type": assigned_type, "metadata": metadata}, last_id


def _assign_type(delta_type: Any, last_id: int) -> tuple[Any, int]:
    if not isinstance(delta_type, Mapping):
        return delta_type, last_id
    kind = delta_type.get("type")
    if kind == "struct":
        fields = []
        for f in delta_type.get("fields", []):
            assigned, last_id = _assign(dict(f), last_id)
            fields.append(assigned)
        return {**delta_type, "fields": fields}, last_id
    if kind == "array":
        element, last_id = _assign_type(delta_type.get("elementType"), last_id)
        return {**delta_type, "elementType": element}, last_id
    if kind == "map":
        key, last_id = _assign_type(delta_type.get("keyType"), last_id)
        value, last_id = _assign_type(delta_type.get("valueType"), last_id)
        return {**delta_type, "keyType": key, "valueType": value}, last_id
    return delta_type, last_id


def _physical_field(arrow_field: pa.Field, delta_field: Mapping[str, Any]) -> pa.Field:
    import pyarrow as pa

    meta = _meta(delta_field)
    metadata = {PARQUET_FIELD_ID: str(meta[ID_KEY])} if ID_KEY in meta else None
    return pa.field(
        str(meta.get(PHYSICAL_KEY, arrow_field.name)),
        _physical_type(arrow_field.type, delta_field.get("type")),
        nullable=arrow_field.nullable,
        metadata=metadata,
    )


def _physical_type(arrow_type: pa.DataType, delta_type: Any) -> pa.DataType:
    import pyarrow as pa

    if pa.types.is_struct(arrow_type):
        by_name = {f.get("name"): f for f in _struct_fields(delta_type)}
        return pa.struct(
            [
                _physical_field(child, by_name[child.name]) if child.name in by_name else child
                for child in arrow_type
            ]
        )
    if isinstance(delta_type, Mapping):
        if (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and delta_type.get(
            "type"
        ) == "array":
            element = arrow_type.value_field.with_type(
                _physical_type(arrow_type.value_type, delta_type.get("elementType"))
            )
            large = pa.types.is_large_list(arrow_type)
            return pa.large_list(element) if large else pa.list_(element)
        if pa.types.is_map(arrow_type) and delta_type.get("type") == "map":
            return pa.map_(
                arrow_type.key_field.with_type(
                    _physical_type(arrow_type.key_type, delta_type.get("keyType"))
                ),
                arrow_type.item_field.with_type(
                    _physical_type(arrow_type.item_type, delta_type.get("valueType"))
                ),
            )
    return arrow_type
