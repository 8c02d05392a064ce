"""Identity columns (``GENERATED ALWAYS|BY DEFAULT AS IDENTITY``) on ``chkpt-delta``
appends, with delta-spark's semantics (Delta PROTOCOL.md, "Identity Columns").

On the driver, when a batch is planned (:func:`identity_columns`), each column's
``delta.identity.highWaterMark`` is read, and a GENERATED ALWAYS column the query gives
is refused naming it. On the executors (:class:`IdentityGenerator`, one per write task)
rows lacking a value (the column absent, or NULL in a BY DEFAULT column) get one; given
values are kept and do not move the mark. Task ``t``'s ``k``-th value is
``base + step * (t * TASK_RANGE + k)``, ``base`` the first above the mark (``start``
without one): unique across tasks, the same on a task's retry. (delta-spark interleaves
by ``numPartitions``, which a Python write task is not told.)

The commit (:func:`identity_metadata`, in :mod:`spark_chkpt.delta.log.commit`'s own
commit) carries a ``metaData`` action whose schema holds each column's new mark (the
largest value generated, the smallest for a negative step) with the adds and
``txn(appId, N)``, only if the table's marks are still those the values were generated
above: else :class:`IdentityConflictError`, nothing committed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_chkpt.errors import IdentityColumnError, IdentityConflictError

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_chkpt.delta.features.protocol import Column

START = "delta.identity.start"
STEP = "delta.identity.step"
HIGH_WATER_MARK = "delta.identity.highWaterMark"
EXPLICIT = "delta.identity.allowExplicitInsert"
TASK_RANGE = 1 << 32  # generated values per write task and batch
_LONG = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class IdentityColumn:
    """One identity column as the batch was planned: its ``start``, ``step``, the
    high-water mark then (None: no value generated yet) and whether values may be given
    (BY DEFAULT)."""

    name: str
    start: int
    step: int
    high_water_mark: int | None
    allow_explicit: bool

    @property
    def base(self) -> int:
        """The first value of the batch's task 0: the next above the high-water mark."""
        mark = self.high_water_mark
        return self.start if mark is None else mark + self.step

    def extreme(self, values: Sequence[int]) -> int:
        """The high-water mark among ``values`` (the largest, the smallest by a negative step)."""
        return max(values) if self.step > 0 else min(values)


@dataclass(frozen=True)
class IdentityUse:
    """What a write task generated for one column: the high-water mark it generated
    above (``planned``) and its own mark (None: it generated nothing)."""

    column: str
    step: int
    planned: int | None
    generated: int | None


@dataclass(frozen=True)
class IdentityColumns:
    """A table's identity columns (travels from the driver to the write tasks)."""

    uri: str
    columns: tuple[IdentityColumn, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.columns)

    def schema(self, schema: pa.Schema) -> pa.Schema:
        """The staged files' schema: ``schema`` (the query's) and every identity column it
        lacks (BIGINT)."""
        import pyarrow as pa

        names = {n.lower() for n in schema.names}
        for c in self.columns:
            if c.name.lower() not in names:
                schema = schema.append(pa.field(c.name, pa.int64()))
        return schema

    def check_query(self, names: Sequence[str], *, writer: str) -> None:
        """Refuse a query that gives a GENERATED ALWAYS column (driver, before staging)."""
        given = {n.lower() for n in names}
        for c in self.columns:
            if not c.allow_explicit and c.name.lower() in given:
                raise _explicit(self.uri, c.name, writer=writer)

    def generator(self, *, task: int) -> IdentityGenerator:
        return IdentityGenerator(columns=self, task=task)


@dataclass
class IdentityGenerator:
    """One write task's identity values: its rows numbered across its record batches."""

    columns: IdentityColumns
    task: int
    _next: dict[str, int] = field(default_factory=dict)
    _marks: dict[str, int] = field(default_factory=dict)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with each identity column's missing (or NULL, BY DEFAULT) values
        generated; a GENERATED ALWAYS column it gives is :class:`IdentityColumnError`."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        for c in self.columns.columns:
            index = next(
                (i for i, n in enumerate(batch.schema.names) if n.lower() == c.name.lower()), -1
            )
            if index >= 0 and not c.allow_explicit:
                raise _explicit(self.columns.uri, c.name, writer="chkpt-delta")
            given = batch.column(index) if index >= 0 else None
            missing = (
                np.ones(batch.num_rows, dtype=bool)
                if given is None
                else np.asarray(pc.is_null(given).to_numpy(zero_copy_only=False), dtype=bool)
            )
            count = int(missing.sum())
            if count:
                first = self._next.get(c.name, 0)
                last = first + count - 1
                if last >= TASK_RANGE:
                    raise IdentityColumnError(
                        f"Delta table {self.columns.uri}: identity column {c.name}: write "
                        f"task {self.task} would generate more than {TASK_RANGE} values in "
                        "one batch. Nothing was staged. Way forward: a smaller batch "
                        "(maxOffsetsPerTrigger) or more partitions."
                    )
                low = c.base + c.step * (self.task * TASK_RANGE + first)
                high = c.base + c.step * (self.task * TASK_RANGE + last)
                if not all(_LONG[0] <= v <= _LONG[1] for v in (low, high)):
                    raise IdentityColumnError(
                        f"Delta table {self.columns.uri}: identity column {c.name} "
                        f"overflows BIGINT (write task {self.task}, start {c.start}, step "
                        f"{c.step}). Nothing was staged."
                    )
                ordinal = np.cumsum(missing, dtype=np.int64) - 1 + first
                values = np.int64(c.base) + np.int64(c.step) * (
                    np.int64(self.task * TASK_RANGE) + ordinal
                )
                self._next[c.name] = last + 1
                self._marks[c.name] = c.extreme([self._marks.get(c.name, low), low, high])
            else:
                values = np.zeros(batch.num_rows, dtype=np.int64)
            column = pa.array(values, type=pa.int64())
            if given is None:
                batch = batch.append_column(pa.field(c.name, pa.int64()), column)
            elif count:
                filled = pc.if_else(pa.array(missing), column, pc.cast(given, pa.int64()))
                batch = batch.set_column(index, batch.schema.field(index), filled)
        return batch

    def uses(self) -> tuple[IdentityUse, ...]:
        """What this task generated, for the driver's commit."""
        return tuple(
            IdentityUse(
                column=c.name,
                step=c.step,
                planned=c.high_water_mark,
                generated=self._marks.get(c.name),
            )
            for c in self.columns.columns
        )


def identity_columns(
    *, uri: str, columns: Sequence[Column], names: Sequence[str] = (), writer: str
) -> IdentityColumns:
    """The identity columns among a table's ``columns`` (name, nullable, metadata) as
    they are now; a GENERATED ALWAYS one among the query's ``names`` is refused."""
    found = IdentityColumns(
        uri=uri,
        columns=tuple(
            IdentityColumn(
                name=name,
                start=int(meta[START]),
                step=int(meta[STEP]),
                high_water_mark=_mark(meta),
                allow_explicit=str(meta.get(EXPLICIT, "false")).lower() == "true",
            )
            for name, _, meta in columns
            if START in meta and STEP in meta
        ),
    )
    found.check_query(names, writer=writer)
    return found


def new_marks(uses: Sequence[IdentityUse]) -> dict[str, tuple[int | None, int]]:
    """Column to (high-water mark planned, new mark) over the tasks' ``uses``; columns
    no task generated a value of are left out (their mark does not move)."""
    planned: dict[str, IdentityUse] = {}
    generated: dict[str, list[int]] = {}
    for use in uses:
        planned.setdefault(use.column, use)
        if use.generated is not None:
            generated.setdefault(use.column, []).append(use.generated)
    return {
        name: (planned[name].planned, max(v) if planned[name].step > 0 else min(v))
        for name, v in generated.items()
    }


def identity_metadata(
    *,
    uri: str,
    metadata: Mapping[str, Any],
    schema_json: str,
    uses: Sequence[IdentityUse],
    batch_id: int,
) -> dict[str, Any] | None:
    """The ``metaData`` action of the commit that appends the tasks' identity values
    (``uses``) on top of the table's ``metadata`` (id, format, partition columns,
    configuration, created time) and schema (``schema_json``): each column's
    ``delta.identity.highWaterMark`` moved to the values generated; None when no value
    was generated. A table whose high-water mark is no longer the one the values were
    generated above (another writer appended meanwhile) is :class:`IdentityConflictError`."""
    marks = new_marks(uses)
    if not marks:
        return None
    schema = json.loads(schema_json)
    fields = {f["name"].lower(): f for f in schema.get("fields", [])}
    for name, (planned, mark) in marks.items():
        f = fields.get(name.lower())
        meta = f.get("metadata", {}) if f else {}
        if f is None or START not in meta:
            raise IdentityConflictError(
                f"Delta table {uri}: chkpt-delta batch {batch_id} generated values of "
                f"identity column {name}, which the table no longer has as an identity "
                "column (another writer changed its schema). Nothing was committed; "
                "Spark's retry of the batch stages it again with the table as it is now."
            )
        current = _mark(meta)
        if current != planned:
            raise IdentityConflictError(
                f"Delta table {uri}: identity column {name}'s high-water mark moved from "
                f"{planned} to {current} (another writer appended) after chkpt-delta batch "
                f"{batch_id} generated its values above {planned}. Nothing was committed "
                "(the values could overlap); Spark's retry of the batch stages it again "
                "above the new mark."
            )
        meta[HIGH_WATER_MARK] = mark
        f["metadata"] = meta
    action = {k: v for k, v in metadata.items() if v is not None}
    action["schemaString"] = json.dumps(schema, separators=(",", ":"))
    return {"metaData": action}


def _mark(meta: Mapping[str, Any]) -> int | None:
    value = meta.get(HIGH_WATER_MARK)
    return None if value is None else int(value)


def _explicit(uri: str, name: str, *, writer: str) -> IdentityColumnError:
    return IdentityColumnError(
        f"{writer}: Delta table {uri}: providing values for GENERATED ALWAYS AS IDENTITY "
        f"column {name} is not supported (delta-spark: "
        "DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED). Way forward: drop the "
        f"column {name} from the query (its values are generated), or make it GENERATED "
        "BY DEFAULT. Nothing was staged."
    )
