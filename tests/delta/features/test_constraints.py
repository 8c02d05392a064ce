"""A Delta table's row rules over Arrow batches (issue 47): CHECK constraints, NOT NULL
columns, invariants and generated columns, as the write tasks apply them before
staging; expressions outside the evaluated subset refused at the start."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_chkpt.delta.features.constraints import generated_columns, table_rules
from spark_chkpt.delta.features.expressions import evaluate, parse
from spark_chkpt.errors import ConstraintViolationError, TableFeatureError

BATCH = pa.record_batch(
    {
        "id": pa.array([1, 2, None, 200], pa.int64()),
        "v": pa.array(["a", "bb", "ccc", None]),
    }
)


def values(expression: str) -> list[object]:
    return evaluate(parse(expression), BATCH).to_pylist()


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("id < 150", [True, True, None, False]),
        ("`ID` >= 2 AND v IS NOT NULL", [False, True, None, False]),
        ("id < 150 OR v IS NULL", [True, True, None, True]),
        ("NOT (id = 1)", [False, True, None, True]),
        ("id IN (1, 200)", [True, False, None, True]),
        ("id NOT BETWEEN 2 AND 100", [True, False, None, True]),
        ("length(v) <= 2", [True, True, False, None]),
        ("id * 2 + 1", [3, 5, None, 401]),
        ("id / 2", [0.5, 1.0, None, 100.0]),
        ("id % 3", [1, 2, None, 2]),
        ("id <=> NULL", [False, False, True, False]),
        ("upper(v) = 'BB'", [False, True, False, None]),
        ("coalesce(id, -1)", [1, 2, -1, 200]),
    ],
)
def test_expressions_have_sparks_semantics(expression: str, expected: list[object]) -> None:
    assert values(expression) == expected


def test_a_check_constraint_fails_on_false_or_null_naming_rule_expression_and_rows() -> None:
    rules = table_rules(
        uri="/t",
        configuration={"delta.constraints.small": "id < 150"},
        columns=[("id", True, {}), ("v", True, {})],
        writer="chkpt-delta",
    )
    with pytest.raises(ConstraintViolationError) as raised:
        rules.check(BATCH)
    text = str(raised.value)
    assert "2 row(s)" in text and "CHECK constraint small: id < 150" in text
    assert "id=200" in text and "id=None" in text and "v=" not in text
    rules.check(BATCH.slice(0, 2))  # passes


def test_not_null_columns_and_invariants_are_rules() -> None:
    rules = table_rules(
        uri="/t",
        configuration={},
        columns=[
            ("id", False, {}),
            ("v", True, {"delta.invariants": '{"expression": {"expression": "length(v) < 3"}}'}),
        ],
        writer="chkpt-delta",
    )
    with pytest.raises(ConstraintViolationError, match="NOT NULL constraint id"):
        rules.check(BATCH)
    with pytest.raises(ConstraintViolationError, match=r"invariant v: length\(v\) < 3"):
        rules.check(pa.record_batch({"id": pa.array([1], pa.int64()), "v": ["ccc"]}))


def test_an_expression_that_cannot_be_evaluated_is_refused_naming_the_rule() -> None:
    with pytest.raises(TableFeatureError) as raised:
        table_rules(
            uri="/t",
            configuration={"delta.constraints.recent": "ts > current_timestamp() - INTERVAL 1 DAY"},
            columns=[("ts", True, {})],
            writer="chkpt-delta",
        )
    assert "CHECK constraint recent" in str(raised.value)
    assert raised.value.feature == "checkConstraints"


def test_generated_columns_are_computed_or_checked() -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("id2", pa.int64())])
    generated = generated_columns(
        uri="/t",
        columns=[
            ("id", True, {}),
            ("v", True, {}),
            ("id2", True, {"delta.generationExpression": "id * 2"}),
        ],
        arrow_schema=schema,
        writer="chkpt-delta",
    )
    assert generated.schema(BATCH.schema).names == ["id", "v", "id2"]
    computed = generated.apply(BATCH)
    assert computed.column("id2").to_pylist() == [2, 4, None, 400]
    generated.apply(computed)  # the right values pass
    wrong = BATCH.append_column("id2", pa.array([3, 4, None, 600], pa.int64()))
    with pytest.raises(ConstraintViolationError) as raised:
        generated.apply(wrong)
    text = str(raised.value)
    assert "generated column id2" in text and "id * 2" in text
    assert "id2=3 (expected 2)" in text and "2 row(s)" in text
