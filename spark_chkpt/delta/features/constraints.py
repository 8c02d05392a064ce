"""A Delta table's row rules, checked on the executors before a file is staged: CHECK
constraints (``delta.constraints.<name>`` in the configuration), invariants
(``delta.invariants`` in a column's metadata), NOT NULL columns, and generated columns
(``delta.generationExpression``: computed when the batch lacks them, else compared).

The rules are read and parsed on the driver (:func:`table_rules`,
:func:`generated_columns`, at the start: an expression that cannot be evaluated is
refused there, naming it) and evaluated over each Arrow batch
(:mod:`spark_chkpt.delta.features.expressions`). A row violates a rule when its expression is
false or NULL, as delta-spark's invariant checker has it. A violating batch fails
(:class:`~spark_chkpt.errors.ConstraintViolationError`) naming the rule, its expression
and up to five violating rows; nothing of the task is staged, so nothing of the batch
is committed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.features.expressions import (
    Node,
    columns_of,
    evaluate,
    parse,
)
from spark_chkpt.errors import (
    ConstraintViolationError,
    TableFeatureError,
    UnsupportedExpressionError,
)

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class Rule:
    """One rule a row must satisfy: ``kind`` ("CHECK constraint", "invariant", "NOT NULL
    constraint"), its name and its expression (parsed in ``node``)."""

    kind: str
    name: str
    expression: str
    node: Node


@dataclass(frozen=True)
class TableRules:
    """Every rule of a table (travels from the driver to the write tasks)."""

    uri: str
    rules: tuple[Rule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rules)

    def names(self) -> set[str]:
        return {f"{r.kind} {r.name}" for r in self.rules}

    def check(self, batch: pa.RecordBatch) -> None:
        """Raise :class:`ConstraintViolationError` for the first rule a row of ``batch``
        breaks (false or NULL), naming it, its expression and up to five rows."""
        import pyarrow.compute as pc

        if not self.rules or batch.num_rows == 0:
            return
        for rule in self.rules:
            try:
                result = evaluate(rule.node, batch)
            except KeyError as e:
                raise ConstraintViolationError(
                    f"Delta table {self.uri}: {rule.kind} {rule.name} ({rule.expression}) "
                    f"reads column {e} that the batch does not have. Nothing was staged."
                ) from e
            ok = pc.fill_null(result, False)
            if not hasattr(ok, "__len__"):  # a constant
                if ok.as_py():
                    continue
                bad = batch
            else:
                bad = batch.filter(pc.invert(ok))
            if bad.num_rows == 0:
                continue
            shown = "; ".join(
                ", ".join(f"{k}={v!r}" for k, v in row.items() if k in _shown(rule, bad))
                for row in bad.slice(0, 5).to_pylist()
            )
            raise ConstraintViolationError(
                f"Delta table {self.uri}: {bad.num_rows} row(s) of the batch violate "
                f"{rule.kind} {rule.name}: {rule.expression}. Rows: {shown}. "
                "Nothing of the batch was committed."
            )


def _shown(rule: Rule, batch: pa.RecordBatch) -> set[str]:
    wanted = {c.lower() for c in columns_of(rule.node)}
    return {n for n in batch.schema.names if n.lower() in wanted} or set(batch.schema.names)


def table_rules(
    *,
    uri: str,
    configuration: Mapping[str, str],
    columns: Sequence[tuple[str, bool, Mapping[str, Any]]],
    writer: str,
) -> TableRules:
    """The rules of a table (driver, at the start); :class:`TableFeatureError` naming
    the rule whose expression cannot be evaluated here."""
    found: list[tuple[str, str, str]] = []
    for key, expression in sorted(configuration.items()):
        if key.startswith("delta.constraints."):
            found.append(("CHECK constraint", key[len("delta.constraints.") :], expression))
    for name, nullable, meta in columns:
        if not nullable:
            found.append(("NOT NULL constraint", name, f"`{name}` IS NOT NULL"))
        invariant = meta.get("delta.invariants")
        if invariant:
            text = invariant if isinstance(invariant, str) else json.dumps(invariant)
            try:
                expression = json.loads(text)["expression"]["expression"]
            except (ValueError, KeyError, TypeError):
                expression = text
            found.append(("invariant", name, str(expression)))
    rules = []
    for kind, name, expression in found:
        try:
            node = parse(expression)
        except UnsupportedExpressionError as e:
            raise TableFeatureError(
                f"{writer}: Delta table {uri} has {kind} {name} ({expression}), which "
                f"spark-chkpt cannot evaluate ({e}). Way forward: write this table with "
                "format('delta') (delta-spark), or express the rule with comparisons, "
                "AND / OR / NOT, IS NULL, IN, BETWEEN, arithmetic and length, lower, "
                "upper, abs, coalesce. Nothing was staged.",
                feature="checkConstraints" if kind == "CHECK constraint" else "invariants",
                table=uri,
            ) from e
        rules.append(Rule(kind=kind, name=name, expression=expression, node=node))
    return TableRules(uri=uri, rules=tuple(rules))


@dataclass(frozen=True)
class GeneratedColumn:
    """A generated column (``delta.generationExpression``): its name, Arrow type in the
    table, expression (parsed in ``node``)."""

    name: str
    arrow_type: Any
    expression: str
    node: Node


@dataclass(frozen=True)
class GeneratedColumns:
    """A table's generated columns (travels from the driver to the write tasks)."""

    uri: str
    columns: tuple[GeneratedColumn, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.columns)

    def names(self) -> set[str]:
        return {f"generated column {c.name}" for c in self.columns}

    def schema(self, schema: pa.Schema) -> pa.Schema:
        """The staged files' schema: ``schema`` (the query's) and every generated column
        it lacks."""
        import pyarrow as pa

        names = {n.lower() for n in schema.names}
        extra = [
            pa.field(c.name, c.arrow_type) for c in self.columns if c.name.lower() not in names
        ]
        for f in extra:
            schema = schema.append(f)
        return schema

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with each generated column it lacks computed; a column it gives must
        equal the expression's value (NULL-safe), else :class:`ConstraintViolationError`
        naming the column."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self.columns or batch.num_rows == 0:
            return self._missing_as_nulls(batch) if self.columns else batch
        for column in self.columns:
            try:
                value = evaluate(column.node, batch)
            except KeyError as e:
                raise ConstraintViolationError(
                    f"Delta table {self.uri}: generated column {column.name} "
                    f"({column.expression}) reads column {e} that the batch does not "
                    "have. Nothing was staged."
                ) from e
            if not hasattr(value, "__len__"):
                value = pa.array([value.as_py()] * batch.num_rows)
            value = pc.cast(value, column.arrow_type)
            index = next(
                (i for i, n in enumerate(batch.schema.names) if n.lower() == column.name.lower()),
                -1,
            )
            if index < 0:
                batch = batch.append_column(pa.field(column.name, column.arrow_type), value)
                continue
            given = pc.cast(batch.column(index), column.arrow_type)
            same = pc.if_else(
                pc.or_(pc.is_null(given), pc.is_null(value)),
                pc.and_(pc.is_null(given), pc.is_null(value)),
                pc.equal(given, value),
            )
            bad = batch.filter(pc.invert(same))
            if bad.num_rows:
                wanted = pc.cast(evaluate(column.node, bad), column.arrow_type).to_pylist()[:5]
                got = bad.column(index).to_pylist()[:5]
                shown = "; ".join(
                    f"{column.name}={g!r} (expected {w!r})"
                    for g, w in zip(got, wanted, strict=True)
                )
                raise ConstraintViolationError(
                    f"Delta table {self.uri}: {bad.num_rows} row(s) of the batch give "
                    f"generated column {column.name} a value other than its expression "
                    f"{column.expression}: {shown}. Leave the column out of the query (it "
                    "is computed) or compute it as the table does. Nothing of the batch "
                    "was committed."
                )
        return batch

    def _missing_as_nulls(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa

        for column in self.columns:
            if column.name.lower() not in {n.lower() for n in batch.schema.names}:
                batch = batch.append_column(
                    pa.field(column.name, column.arrow_type),
                    pa.nulls(batch.num_rows, column.arrow_type),
                )
        return batch


def generated_columns(
    *,
    uri: str,
    columns: Sequence[tuple[str, bool, Mapping[str, Any]]],
    arrow_schema: pa.Schema,
    writer: str,
) -> GeneratedColumns:
    """The generated columns of a table (driver, at the start); :class:`TableFeatureError`
    naming the column whose expression cannot be evaluated here."""
    found = []
    for name, _, meta in columns:
        expression = meta.get("delta.generationExpression")
        if not expression:
            continue
        try:
            node = parse(str(expression))
        except UnsupportedExpressionError as e:
            raise TableFeatureError(
                f"{writer}: Delta table {uri} has generated column {name} "
                f"({expression}), which spark-chkpt cannot compute ({e}). Way forward: "
                "write this table with format('delta') (delta-spark). Nothing was staged.",
                feature="generatedColumns",
                table=uri,
            ) from e
        found.append(
            GeneratedColumn(
                name=name,
                arrow_type=arrow_schema.field(name).type,
                expression=str(expression),
                node=node,
            )
        )
    return GeneratedColumns(uri=uri, columns=tuple(found))
