"""The pure parts of ``savepoint check``, the shadow's refusals and ``diff``'s pairing:
Spark's schema files as Spark lays them out (v1, v2; a join's stores), Spark's rule for
a state schema, the verdicts per operator, and versions of two real Delta tables paired
by their snapshot records (delta-rs, no Spark)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, write_deltalake

from spark_chkpt.diff.tables import diff_tables, pair_versions
from spark_chkpt.errors import ChkptError, SavepointError
from spark_chkpt.savepoint.check import CheckStatus, check_savepoint, compare_fields
from spark_chkpt.savepoint.manifest import (
    CHECKPOINT,
    OperatorInfo,
    Savepoint,
    SavepointManifest,
    SinkInfo,
)
from spark_chkpt.savepoint.plan import JobPlan, SourcePlan
from spark_chkpt.savepoint.shadow import check_shadow
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord
from spark_chkpt.state.schema import Field, StoreSchema, store_schemas


def _utf(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data


def _struct(*fields: tuple[str, str, bool]) -> str:
    return json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": n, "type": t, "nullable": null, "metadata": {}} for n, t, null in fields
            ],
        }
    )


def _write_op(state: Path, op: int, name: str, stores: dict[str, tuple[str, str]], v: int) -> None:
    meta = {
        "operatorInfo": {"operatorId": op, "operatorName": name},
        "stateStoreInfo": [{"storeName": s, "numPartitions": 2} for s in stores],
    }
    (state / str(op) / "_metadata").mkdir(parents=True)
    (state / str(op) / "_metadata" / "metadata").write_text("v1\n" + json.dumps(meta))
    for store, (key, value) in stores.items():
        folder = state / str(op) / "0"
        folder = folder if store == "default" else folder / store
        (folder / "_metadata").mkdir(parents=True)
        if v == 1:
            data = _utf("v1") + _utf(key) + _utf(value)
        else:  # v2: a chunk count before each schema's writeUTF chunks
            half = len(key) // 2
            data = _utf("v2") + struct.pack(">i", 2) + _utf(key[:half]) + _utf(key[half:])
            data += struct.pack(">i", 1) + _utf(value)
        (folder / "_metadata" / "schema").write_bytes(data)


APP = _struct(("app", "string", True))
COUNT = _struct(("count", "long", False))


def test_schema_files_of_both_formats_and_a_joins_stores(tmp_path: Path) -> None:
    _write_op(tmp_path, 0, "stateStoreSave", {"default": (APP, COUNT)}, v=2)
    join = {"left-keyToNumValues": (APP, _struct(("value", "long", False)))}
    join["right-keyWithIndexToValue"] = (
        _struct(("app", "string", True), ("index", "long", False)),
        COUNT,
    )
    _write_op(tmp_path, 1, "symmetricHashJoin", join, v=1)
    found = store_schemas(state_dir=str(tmp_path))
    assert found[0] == [
        StoreSchema(
            0,
            "stateStoreSave",
            "default",
            (Field("app", "string", True),),
            (Field("count", "bigint", False),),
        )
    ]
    assert [(s.store_name, [f.name for f in s.key]) for s in found[1]] == [
        ("left-keyToNumValues", ["app"]),
        ("right-keyWithIndexToValue", ["app", "index"]),
    ]


def test_spark_rule_for_a_state_schema() -> None:
    app, count = Field("app", "string"), Field("count", "bigint", False)
    assert compare_fields((app, count), (app, count)) == (None, [])
    assert compare_fields((count,), (Field("views", "bigint", False),)) == (None, ["count → views"])
    assert compare_fields((count,), (Field("count", "bigint", True),)) == (
        "field count: bigint not null → bigint (nullable)",
        [],
    )
    assert compare_fields((app,), (Field("app", "int"),)) == ("field app: string → int", [])
    assert compare_fields((count,), (count, Field("sum", "double"))) == (
        "fields added: sum: double",
        [],
    )
    # Not nullable where it was nullable: Spark accepts it.
    assert compare_fields((app,), (Field("app", "string", False),)) == (None, [])


def _savepoint(tmp_path: Path, *, sink: SinkInfo | None = None) -> Savepoint:
    state = tmp_path / "sp" / CHECKPOINT / "state"
    _write_op(state, 0, "stateStoreSave", {"default": (APP, COUNT)}, v=2)
    _write_op(state, 1, "dedupe", {"default": (APP, _struct(("__dummy__", "null", True)))}, v=2)
    manifest = SavepointManifest(
        savepoint_id="sp",
        batch_id=4,
        query_id="q",
        query_name=None,
        checkpoint=str(tmp_path / "prod-chk"),
        source_offsets=[{"pv": {"0": 10, "1": 12}}],
        sink=sink or SinkInfo("chkpt-delta", str(tmp_path / "prod"), 5, "complete", "q"),
        provider="rocksdb",
        state_version=5,
        operators=[
            OperatorInfo(i, n, ["default"], 2, 5, None, 1, 1)
            for i, n in ((0, "stateStoreSave"), (1, "dedupe"))
        ],
        files=[],
        versions={},
    )
    return Savepoint(location=str(tmp_path / "sp"), manifest=manifest)


def _plan(tmp_path: Path, operators: dict[int, list[StoreSchema]], **extra: Any) -> JobPlan:
    fields: dict[str, Any] = {
        "job": "job.py:build",
        "output_mode": "complete",
        "sink_format": "chkpt-delta",
        "sink_options": {"path": str(tmp_path / "new"), "checkpointLocation": "/chk/new"},
        "query_name": None,
        "sources": [SourcePlan("chkpt-kafka", {"subscribe": "pv"})],
        "operators": operators,
        "operator_names": {op: s[0].operator_name for op, s in operators.items()},
    }
    fields.update(extra)
    return JobPlan(**fields)


def _store(op: int, name: str, key: tuple[Field, ...], value: tuple[Field, ...]) -> StoreSchema:
    return StoreSchema(op, name, "default", key, value)


def test_verdicts_per_operator_and_the_exit_status(tmp_path: Path) -> None:
    point = _savepoint(tmp_path)
    app, count = (Field("app", "string"),), (Field("count", "bigint", False),)
    same = _store(0, "stateStoreSave", app, count)
    report = check_savepoint(savepoint=point, plan=_plan(tmp_path, {0: [same]}))
    assert [o.describe() for o in report.operators] == [
        "operator 0 (stateStoreSave): restored",
        "operator 1 (dedupe): dropped (needs --allow-non-restored-state)",
    ]
    assert report.status == CheckStatus.DROPS_STATE
    assert (
        "source      0: chkpt-kafka topics pv (savepoint: pv partitions 0,1): the same topics"
        in (report.lines())
    )
    changed = _store(1, "stateStoreSave", app, count)
    added = _store(2, "dedupe", app, count)
    report = check_savepoint(
        savepoint=point,
        plan=_plan(
            tmp_path,
            {0: [same], 1: [changed], 2: [added]},
            sources=[SourcePlan("chkpt-kafka", {"subscribe": "pv,clicks"}), SourcePlan("rate", {})],
        ),
    )
    assert report.status == CheckStatus.INCOMPATIBLE
    assert report.operators[1].reasons == ["operator changed (dedupe → stateStoreSave)"]
    assert "the savepoint has no state for it" in report.operators[2].reasons[0]
    assert report.problems == [
        "the job reads 2 source(s), the savepoint has offsets of 1 (Spark resumes each "
        "source from its line of offsets/N)"
    ]
    assert report.sources[0].endswith(": topics changed, added clicks")


def test_a_shadow_refuses_what_production_owns(tmp_path: Path) -> None:
    point = _savepoint(tmp_path)
    plan = _plan(tmp_path, {})
    own = str(tmp_path / "new")
    with pytest.raises(SavepointError, match="production's checkpoint"):
        check_shadow(
            savepoint=point,
            checkpoint_location=str(tmp_path / "prod-chk" / "x"),
            table=own,
            job=None,
        )
    with pytest.raises(SavepointError, match="is production's table"):
        check_shadow(
            savepoint=point, checkpoint_location="/chk/new", table=str(tmp_path / "prod"), job=None
        )
    with pytest.raises(SavepointError, match="name the shadow's own table"):
        check_shadow(savepoint=point, checkpoint_location="/chk/new", table=None, job=None)
    with pytest.raises(SavepointError, match="checkpointLocation is /chk/new, not the shadow's"):
        check_shadow(savepoint=point, checkpoint_location="/chk/other", table=own, job=plan)
    grouped = _plan(tmp_path, {}, sources=[SourcePlan("chkpt-kafka", {"kafka.group.id": "pv"})])
    with pytest.raises(SavepointError, match=r"kafka\.group\.id=pv"):
        check_shadow(savepoint=point, checkpoint_location="/chk/new", table=own, job=grouped)
    found = check_shadow(savepoint=point, checkpoint_location="/chk/new", table=own, job=plan)
    assert found["query_id"] == "q"
    kafka = _savepoint(tmp_path / "k", sink=SinkInfo("chkpt-kafka", "out", None, "append", "q"))
    to_topic = _plan(tmp_path, {}, sink_options={"topic": "out", "checkpointLocation": "/chk/new"})
    with pytest.raises(SavepointError, match="production's"):
        check_shadow(savepoint=kafka, checkpoint_location="/chk/new", table=None, job=to_topic)
    with pytest.raises(SavepointError, match="give the shadow's job"):
        check_shadow(savepoint=kafka, checkpoint_location="/chk/new", table=None, job=None)


def _commit(table: Path, rows: dict[str, int], app_id: str, batch: int, end: int) -> None:
    record = SnapshotRecord(
        batch_id=batch,
        app_id=app_id,
        query_name=None,
        sink="chkpt-delta",
        source_offsets=[{"pv": {"0": end}, "__chkpt__": {"mode": "aligned"}}],
        table_version=None,
        rows=len(rows),
        files=1,
        bytes=1,
        commit_ms=1.0,
        mode="complete",
    )
    write_deltalake(
        str(table),
        pa.table({"app": list(rows), "count": list(rows.values())}),
        mode="overwrite",
        commit_properties=CommitProperties(custom_metadata={SNAPSHOT_KEY: record.to_json()}),
    )


def test_diff_pairs_the_newest_versions_with_equal_offsets(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for batch, end in enumerate((10, 20, 30)):
        _commit(a, {"app1": end, "app2": 1, "app3": 5}, "prod", batch, end)
    _commit(b, {"app1": 20, "app2": 2, "app4": 5}, "shadow", 1, 20)
    _commit(b, {"app1": 25}, "shadow", 2, 25)
    pair = pair_versions(table_a=str(a), table_b=str(b))
    assert (pair.version_a, pair.version_b, pair.batch_a) == (1, 0, 1)
    assert pair.source_offsets == [{"pv": {"0": 20}}]  # the alignment report aside
    found = diff_tables(table_a=str(a), table_b=str(b), key=["app"])
    assert (found.only_a, found.only_b, found.same) == (
        [{"app": "app3", "count": 5}],
        [{"app": "app4", "count": 5}],
        1,
    )
    assert [(c.key, c.a, c.b) for c in found.changed] == [
        ({"app": "app2"}, {"count": 1}, {"count": 2})
    ]
    whole = diff_tables(table_a=str(a), table_b=str(b))
    assert (len(whole.only_a), len(whole.only_b), whole.changed, whole.same) == (2, 2, [], 1)
    with pytest.raises(ChkptError, match="--key user: not a column of table A"):
        diff_tables(table_a=str(a), table_b=str(b), key=["user"])
    c = tmp_path / "c"
    _commit(c, {"app1": 1}, "other", 0, 7)
    with pytest.raises(ChkptError, match=r"no version of .* has equal source offsets"):
        pair_versions(table_a=str(a), table_b=str(c))


def test_a_job_that_cannot_be_planned_is_named(tmp_path: Path) -> None:
    from spark_chkpt.savepoint.plan import load_job

    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        "def broken(spark):\n    raise ValueError('no column views')\n"
        "if __name__ == '__main__':\n"
        "    if sys.argv[1:] == ['--fail']:\n        raise KeyError('PV_TOPIC')\n"
        "    if sys.argv[1:] == ['--bad']:\n        sys.exit(2)\n"
    )
    with pytest.raises(ChkptError, match=r"is not a file"):
        load_job(job=f"{tmp_path / 'nope.py'}:build", session=lambda: None)
    with pytest.raises(ChkptError, match=r"has no function 'build'"):
        load_job(job=f"{script}:build", session=lambda: None)
    with pytest.raises(ChkptError, match=r"broken\(spark\) failed: no column views"):
        load_job(job=f"{script}:broken", session=lambda: None)
    with pytest.raises(ChkptError, match=r"failed before it started a query: 'PV_TOPIC'"):
        load_job(job=str(script), args=["--fail"])
    with pytest.raises(ChkptError, match=r"exited \(code 2\) before it started a query"):
        load_job(job=str(script), args=["--bad"])
    with pytest.raises(ChkptError, match="ran to its end without starting a streaming query"):
        load_job(job=str(script))


def test_the_command_takes_a_script_jobs_arguments_only(capsys: Any) -> None:
    from spark_chkpt.cli import main

    assert main(["savepoint", "check", "/nowhere", "job.py:build", "--mode", "x"]) == 2
    assert "--mode x: unknown option (only a script job takes arguments" in capsys.readouterr().err
    assert main(["savepoint", "check", "/nowhere", "job.py", "--jsn", "--", "--mode", "x"]) == 2
    assert "--jsn: unknown option" in capsys.readouterr().err
    # Accepted: then the savepoint is read (and here does not exist, which is said).
    assert main(["savepoint", "check", "/nowhere", "job.py:build", "--json"]) == 2
    assert "savepoint /nowhere does not exist" in capsys.readouterr().err
