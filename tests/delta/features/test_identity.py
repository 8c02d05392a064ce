"""Identity columns on ``chkpt-delta`` appends (issue 47): the feature honoured (no
longer refused), values generated on the write tasks (unique across tasks, the same on a
task's retry, start / step / a negative step, above the high-water mark read at
planning), and the commit's high-water mark checked against the table's (another writer
moved it: a named error, nothing committed). delta-spark's own reading and writing of
such a table: tests/delta/test_delta_features.py."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from spark_chkpt.delta.features.identity import IdentityUse, identity_columns
from spark_chkpt.delta.features.protocol import TableProtocol, check_table
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import IdentityColumnError, IdentityConflictError

IDENTITY = {"delta.identity.start": 1, "delta.identity.step": 1}


def protocol(**metadata: object) -> TableProtocol:
    return TableProtocol(
        uri="/t",
        min_reader_version=1,
        min_writer_version=6,
        reader_features=frozenset(),
        writer_features=frozenset(),
        columns=(
            ("id", False, {**IDENTITY, "delta.identity.allowExplicitInsert": False, **metadata}),
            ("v", True, {}),
        ),
    )


def test_a_table_with_an_identity_column_is_appended_to_not_refused() -> None:
    check_table(protocol(), writer="chkpt-delta", operation="append")


def columns(*, start: int = 1, step: int = 1, mark: int | None = None, explicit: bool = False):
    from spark_chkpt.delta.features.identity import IdentityColumn, IdentityColumns

    column = IdentityColumn(
        name="id", start=start, step=step, high_water_mark=mark, allow_explicit=explicit
    )
    return IdentityColumns(uri="/t", columns=(column,))


def batch(rows: int, ids: list[int | None] | None = None) -> pa.RecordBatch:
    data = {"v": pa.array(range(rows), type=pa.int64())}
    if ids is not None:
        data = {"id": pa.array(ids, type=pa.int64()), **data}
    return pa.RecordBatch.from_pydict(data)


def generate(identity, *, task: int, sizes: list[int]) -> list[int]:
    gen = identity.generator(task=task)
    return [v for n in sizes for v in gen.apply(batch(n)).column("id").to_pylist()]


def test_values_are_unique_across_tasks_and_the_same_on_a_task_retry() -> None:
    identity = columns(start=10, step=3, mark=None)
    tasks = {t: generate(identity, task=t, sizes=[4, 0, 3]) for t in range(3)}
    everything = [v for values in tasks.values() for v in values]
    assert len(set(everything)) == len(everything) == 21
    assert all(v >= 10 and (v - 10) % 3 == 0 for v in everything)
    assert tasks[0] == [10 + 3 * k for k in range(7)]  # one task: dense from the start
    # a retry of task 1 (record batches split otherwise) stages the same values
    assert generate(identity, task=1, sizes=[7]) == tasks[1]
    # above the high-water mark read at planning
    above = generate(columns(start=10, step=3, mark=40), task=0, sizes=[2])
    assert above == [43, 46]


def test_a_negative_step_generates_below_the_mark_and_reports_the_lowest() -> None:
    identity = columns(start=-1, step=-2, mark=-9)
    gen = identity.generator(task=0)
    assert gen.apply(batch(3)).column("id").to_pylist() == [-11, -13, -15]
    other = identity.generator(task=2)
    values = other.apply(batch(2)).column("id").to_pylist()
    assert all(v < -15 for v in values)
    (use,) = gen.uses()
    assert (use.planned, use.generated) == (-9, -15)
    from spark_chkpt.delta.features.identity import new_marks

    assert new_marks([use, *other.uses()]) == {"id": (-9, min(values))}


def test_by_default_keeps_given_values_and_fills_nulls_and_always_refuses_them() -> None:
    gen = columns(start=100, explicit=True).generator(task=0)
    out = gen.apply(batch(4, ids=[7, None, 8, None]))
    assert out.column("id").to_pylist() == [7, 100, 8, 101]
    (use,) = gen.uses()
    assert use.generated == 101  # given values do not move the mark
    with pytest.raises(IdentityColumnError, match="GENERATED ALWAYS AS IDENTITY column id"):
        columns().generator(task=0).apply(batch(1, ids=[1]))
    with pytest.raises(IdentityColumnError, match="column id"):
        identity_columns(uri="/t", columns=protocol().columns, names=["ID", "v"], writer="w")
    by_default = protocol(**{"delta.identity.allowExplicitInsert": True})
    found = identity_columns(uri="/t", columns=by_default.columns, names=["id"], writer="w")
    assert found.columns[0].allow_explicit


def _identity_table(path: Path, *, mark: int | None) -> str:
    meta = {**IDENTITY, "delta.identity.allowExplicitInsert": False}
    if mark is not None:
        meta["delta.identity.highWaterMark"] = mark
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": meta},
            {"name": "v", "type": "long", "nullable": True, "metadata": {}},
        ],
    }
    actions = [
        {"commitInfo": {"timestamp": 1, "operation": "CREATE TABLE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 6}},
        {
            "metaData": {
                "id": "5b3c0a1e-0000-4000-8000-000000000001",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 1,
            }
        },
    ]
    log = path / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return str(path)


def _mark_of(uri: str) -> object:
    (field,) = [f for f in DeltaTable(uri).schema().fields if f.name == "id"]
    return field.metadata.get("delta.identity.highWaterMark")


def _commit(
    target: DeltaTarget, uses: list[IdentityUse], *, version: int, overwrite: bool = False
) -> None:
    target.commit(
        table=target.latest(),
        schema=pa.schema([("id", pa.int64()), ("v", pa.int64())]),
        partition_by=(),
        files=[],
        app_id="app",
        version=version,
        metadata={},
        identity=uses,
        overwrite=overwrite,
    )


def test_the_commit_moves_the_mark_and_refuses_one_another_writer_moved(tmp_path: Path) -> None:
    uri = _identity_table(tmp_path / "t", mark=None)
    target = DeltaTarget(uri=uri)
    uses = [
        IdentityUse(column="id", step=1, planned=None, generated=4),
        IdentityUse(column="id", step=1, planned=None, generated=1 + (1 << 32)),
        IdentityUse(column="id", step=1, planned=None, generated=None),
    ]
    _commit(target, uses, version=0)
    table = target.latest()
    assert table.version() == 1
    assert int(_mark_of(uri)) == 1 + (1 << 32)
    assert table.transaction_version("app") == 0
    # batch 1 was planned above the mark before another writer's append moved it
    planned = int(_mark_of(uri))
    _commit(target, [IdentityUse("id", 1, planned, planned + 5)], version=1)
    assert int(_mark_of(uri)) == planned + 5
    with pytest.raises(IdentityConflictError, match=rf"moved from {planned} to {planned + 5}"):
        _commit(target, [IdentityUse("id", 1, planned, planned + 3)], version=2)
    assert target.latest().version() == 2  # nothing committed
    assert target.latest().transaction_version("app") == 1


def test_complete_mode_moves_the_mark_in_the_replacement_and_refuses_one_moved(
    tmp_path: Path,
) -> None:
    """outputMode("complete") on an identity table: the replacement commit (every live
    file removed) moves the high-water mark as an append does, never back (delta-spark's
    INSERT OVERWRITE generates new values above the mark too)."""
    uri = _identity_table(tmp_path / "t", mark=41)
    target = DeltaTarget(uri=uri)
    _commit(target, [IdentityUse("id", 1, 41, 47)], version=0)  # an append, then ...
    _commit(target, [IdentityUse("id", 1, 47, 50)], version=1, overwrite=True)
    table = target.latest()
    assert table.version() == 2 and int(_mark_of(uri)) == 50
    assert table.transaction_version("app") == 1
    text = (tmp_path / "t" / "_delta_log" / f"{2:020d}.json").read_text()
    found = [json.loads(line) for line in text.splitlines()]
    assert found[0]["commitInfo"]["operationParameters"]["mode"] == "Overwrite"
    assert [a for a in found if "metaData" in a]
    with pytest.raises(IdentityConflictError, match="moved from 47 to 50"):
        _commit(target, [IdentityUse("id", 1, 47, 49)], version=2, overwrite=True)
    assert target.latest().version() == 2  # nothing committed


def test_the_sink_plans_a_batch_with_the_mark_and_refuses_a_given_always_column(
    tmp_path: Path,
) -> None:
    from spark_chkpt.delta.sink.assembler import DeltaSink
    from spark_chkpt.delta.sink.options import DeltaSinkConfig

    uri = _identity_table(tmp_path / "t", mark=41)
    (tmp_path / "chk").mkdir()
    (tmp_path / "chk" / "metadata").write_text('{"id":"a1b2c3d4-0000-0000-0000-000000000000"}')
    config = DeltaSinkConfig.from_options(
        {"path": uri, "checkpointLocation": str(tmp_path / "chk")}
    )
    query = pa.schema([("v", pa.int64())])
    sink = DeltaSink.of(config=config, schema=query).checked()
    assert sink.arrow_schema.names == ["v", "id"]  # the staged files hold the column
    assert sink.identity is not None and sink.identity.columns[0].high_water_mark == 41
    staged = sink.writer().identity.generator(task=0).apply(batch(2))  # type: ignore[union-attr]
    assert staged.column("id").to_pylist() == [42, 43]
    given = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    with pytest.raises(IdentityColumnError, match="GENERATED ALWAYS AS IDENTITY column id"):
        DeltaSink.of(config=config, schema=given).checked()
