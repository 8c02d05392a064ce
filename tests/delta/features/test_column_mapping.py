"""Column mapping without Spark: logical ↔ physical names and field ids, the staged
files and their statistics, the columns mergeSchema adds, a rename or drop by another
writer found, and the facts about delta-rs the sink relies on (on a table whose log is
written here as delta-spark writes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Field

from spark_chkpt.delta.features.column_mapping import (
    ID_KEY,
    MAX_ID_KEY,
    MODE_KEY,
    PHYSICAL_KEY,
    ColumnMapping,
)
from spark_chkpt.delta.staging import ParquetStager
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import CommitConflictError, SchemaMismatchError
from spark_chkpt.fs import resolve


def field(name: str, kind: Any, fid: int, physical: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "nullable": True,
        "metadata": {ID_KEY: fid, PHYSICAL_KEY: physical or f"col-{name}-{fid}"},
    }


SCHEMA = {
    "type": "struct",
    "fields": [
        field("n", "long", 1),
        field("s", "string", 2),
        field(
            "st",
            {"type": "struct", "fields": [field("a", "integer", 4), field("b", "string", 5)]},
            3,
        ),
        field("part", "integer", 6),
    ],
}
ARROW = pa.schema(
    [
        ("n", pa.int64()),
        ("s", pa.string()),
        ("st", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("part", pa.int32()),
    ]
)


def mapping(mode: str = "name", schema: dict[str, Any] = SCHEMA, max_id: int = 6) -> ColumnMapping:
    found = ColumnMapping.from_metadata(
        schema_string=json.dumps(schema), configuration={MODE_KEY: mode, MAX_ID_KEY: str(max_id)}
    )
    assert found is not None
    return found


def batch() -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array([1, 2, 3]),
            pa.array(["x", None, "z"]),
            pa.array([{"a": 1, "b": "q"}, None, {"a": 7, "b": "r"}], ARROW.field("st").type),
            pa.array([0, 0, 1], pa.int32()),
        ],
        schema=ARROW,
    )


def column_mapped_table(path: Path, *, mode: str, partitioned: bool = False) -> DeltaTarget:
    """A table whose first commit is what delta-spark's CREATE TABLE ... TBLPROPERTIES
    ('delta.columnMapping.mode' = mode) writes."""
    log = path / "_delta_log"
    log.mkdir(parents=True)
    actions = [
        {"commitInfo": {"timestamp": 1, "operation": "CREATE TABLE"}},
        {
            "metaData": {
                "id": "a0b1c2d3-0000-0000-0000-000000000000",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(SCHEMA),
                "partitionColumns": ["part"] if partitioned else [],
                "configuration": {MODE_KEY: mode, MAX_ID_KEY: "6"},
                "createdTime": 1,
            }
        },
        {
            "protocol": {
                "minReaderVersion": 2,
                "minWriterVersion": 7,
                "writerFeatures": ["columnMapping", "invariants", "appendOnly"],
            }
        },
    ]
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return DeltaTarget(uri=str(path))


def stage(target: DeltaTarget, planned: ColumnMapping | None, *, partitioned: bool) -> Any:
    stager = ParquetStager(
        table=resolve(target.uri),
        schema=ARROW,
        partition_by=["part"] if partitioned else [],
        app_id="app",
        batch_id=0,
        task=0,
        max_records_per_file=100,
        target_file_bytes=1 << 30,
        mapping=planned,
    )
    stager.add(batch())
    return stager.finish()


def test_a_table_without_column_mapping_has_none() -> None:
    plain = json.dumps({"type": "struct", "fields": []})
    assert ColumnMapping.from_metadata(schema_string=plain, configuration={}) is None
    none = {MODE_KEY: "none"}
    assert ColumnMapping.from_metadata(schema_string=plain, configuration=none) is None


def test_physical_schema_renames_every_struct_field_and_carries_the_field_ids() -> None:
    physical = mapping().physical_schema(ARROW)
    assert physical.names == ["col-n-1", "col-s-2", "col-st-3", "col-part-6"]
    assert [f.metadata[b"PARQUET:field_id"] for f in physical] == [b"1", b"2", b"3", b"6"]
    st = physical.field("col-st-3").type
    assert [(f.name, f.metadata[b"PARQUET:field_id"]) for f in st] == [
        ("col-a-4", b"4"),
        ("col-b-5", b"5"),
    ]
    data = ColumnMapping.to_physical(batch(), physical)
    assert data.schema == physical
    assert data.column(2).to_pylist()[2] == {"col-a-4": 7, "col-b-5": "r"}


def test_a_list_of_structs_is_mapped_inside() -> None:
    inner = {"type": "struct", "fields": [field("x", "long", 2)]}
    schema = {
        "type": "struct",
        "fields": [field("l", {"type": "array", "elementType": inner, "containsNull": True}, 1)],
    }
    arrow = pa.schema([("l", pa.list_(pa.struct([("x", pa.int64())])))])
    physical = mapping(schema=schema, max_id=2).physical_schema(arrow)
    element = physical.field("col-l-1").type.value_type
    assert [(f.name, f.metadata[b"PARQUET:field_id"]) for f in element] == [("col-x-2", b"2")]


@pytest.mark.parametrize("partitioned", [False, True])
def test_staged_files_statistics_and_partition_values_use_physical_names(
    tmp_path: Path, partitioned: bool
) -> None:
    target = column_mapped_table(tmp_path / "t", mode="id", partitioned=partitioned)
    out = stage(target, target.planned_mapping(ARROW), partitioned=partitioned)
    assert len(out.files) == (2 if partitioned else 1)
    for staged in out.files:
        folder, name = staged.path.split("/")
        assert len(folder) == 2 and name.endswith(".chkpt.snappy.parquet")  # random prefix
        schema = pq.read_schema(tmp_path / "t" / staged.path)
        # partition columns in the files too, as delta-spark writes them, without statistics
        assert schema.names == ["col-n-1", "col-s-2", "col-st-3", "col-part-6"]
        assert schema.field("col-part-6").metadata[b"PARQUET:field_id"] == b"6"
        stats = json.loads(staged.stats)
        bounded = {"col-n-1", "col-s-2"} | (set() if partitioned else {"col-part-6"})
        assert set(stats["nullCount"]) == bounded
        assert set(stats["minValues"]) == bounded
        if partitioned:
            assert list(staged.partition_values) == ["col-part-6"]
    # committed by delta-rs as given; its DataFusion reader applies the mapping
    target.commit(
        table=target.open(),
        schema=ARROW,
        partition_by=["part"] if partitioned else [],
        files=out.files,
        app_id="app",
        version=0,
        metadata={},
    )
    rows = sorted(target.rows(target.open()).to_pylist(), key=lambda r: r["n"])
    assert rows == batch().to_pylist()


def test_delta_rs_facts_column_mapping_relies_on(tmp_path: Path) -> None:
    target = column_mapped_table(tmp_path / "t", mode="name")
    out = stage(target, target.planned_mapping(ARROW), partitioned=False)
    target.commit(
        table=target.open(),
        schema=ARROW,
        partition_by=[],
        files=out.files,
        app_id="app",
        version=0,
        metadata={},
    )
    table = DeltaTable(target.uri)
    # to_pyarrow_table() reads the logical names: NULLs (hence DeltaTarget.rows)
    assert table.to_pyarrow_table().column("n").to_pylist() == [None] * 3
    # alter.add_columns refuses a column-mapped table (hence add_mapped_columns)
    with pytest.raises(Exception, match=r"[Cc]olumn mapping"):
        table.alter.add_columns([Field("extra", "long", nullable=True)])


def test_merge_schema_gives_new_columns_physical_names_ids_and_max_column_id(
    tmp_path: Path,
) -> None:
    target = column_mapped_table(tmp_path / "t", mode="id")
    wider = ARROW.append(pa.field("w", pa.struct([("c", pa.int64())])))
    planned = target.planned_mapping(wider)
    assert planned is not None and planned.planned == ("w",)
    (w,) = planned.planned_fields()
    assert w["metadata"][ID_KEY] == 7 and w["metadata"][PHYSICAL_KEY].startswith("col-")
    assert w["type"]["fields"][0]["metadata"][ID_KEY] == 8  # parent first, then children
    assert planned.max_column_id == 8
    target.add_mapped_columns(target.open(), planned)
    table = target.open()
    assert table.metadata().configuration[MAX_ID_KEY] == "8"
    assert ColumnMapping.of_table(table) == ColumnMapping.from_metadata(
        schema_string=json.dumps(planned.schema), configuration=table.metadata().configuration
    )
    # the batch's files, staged with the planned mapping, then read back
    stager = ParquetStager(
        table=resolve(target.uri),
        schema=wider,
        partition_by=[],
        app_id="app",
        batch_id=0,
        task=0,
        max_records_per_file=100,
        target_file_bytes=1 << 30,
        mapping=planned,
    )
    rows = [{"n": 1, "s": "x", "st": None, "part": 0, "w": {"c": 5}}]
    stager.add(pa.RecordBatch.from_pylist(rows, schema=wider))
    target.commit(
        table=table,
        schema=wider,
        partition_by=[],
        files=stager.finish().files,
        app_id="app",
        version=0,
        metadata={},
    )
    assert target.rows(target.open()).to_pylist() == rows
    # the same version again: another writer got there first
    with pytest.raises(CommitConflictError):
        target.add_mapped_columns(table, planned)


def test_renamed_dropped_and_re_added_columns_are_found(tmp_path: Path) -> None:
    staged = mapping()
    renamed = json.loads(json.dumps(SCHEMA))
    renamed["fields"][1]["name"] = "s2"  # ALTER TABLE RENAME COLUMN s TO s2
    assert staged.changed_under(mapping(schema=renamed), ARROW.names) == [
        "column s was staged as col-s-2 but the table now holds no column s"
    ]
    readded = json.loads(json.dumps(SCHEMA))
    readded["fields"][1] = field("s", "string", 7, "col-new")  # DROP COLUMN s, ADD s
    (problem,) = staged.changed_under(mapping(schema=readded, max_id=7), ARROW.names)
    assert "col-s-2" in problem and "col-new" in problem
    assert staged.changed_under(mapping(), ARROW.names) == []
    assert staged.changed_under(None, ARROW.names) == [
        "the table's column mapping (name) was turned off"
    ]
    # a planned column whose ids another writer may have taken meanwhile
    planned = staged.with_new_columns([{"name": "x", "type": "long", "nullable": True}])
    assert planned.changed_under(mapping(), ["x"]) == []
    (taken,) = planned.changed_under(mapping(max_id=7), ["x"])
    assert "maxColumnId 7" in taken

    target = column_mapped_table(tmp_path / "t", mode="name")
    message = "column s2 was staged as col-s-2 but the table now holds no column s2"
    with pytest.raises(SchemaMismatchError, match=message):
        target.check_mapping(
            target.open(), mapping(schema=renamed), ["s2"], what="chkpt-delta batch 3"
        )
    with pytest.raises(SchemaMismatchError, match="became column-mapped"):
        target.check_mapping(target.open(), None, ["n"], what="chkpt-delta batch 3")


def test_merge_schema_on_an_object_store_is_refused_naming_the_way_forward(
    tmp_path: Path,
) -> None:
    import dataclasses

    import pyarrow.fs as pafs

    target = column_mapped_table(tmp_path / "t", mode="name")
    planned = target.planned_mapping(ARROW.append(pa.field("c", pa.int64())))
    assert planned is not None
    # the same files seen through a filesystem that is not the local one (as S3's is)
    target.location = dataclasses.replace(
        target.location, fs=pafs.SubTreeFileSystem("/", pafs.LocalFileSystem())
    )
    with pytest.raises(SchemaMismatchError, match=r"mergeSchema would add column\(s\) c") as e:
        target.add_mapped_columns(target.open(), planned)
    assert "ALTER TABLE ... ADD COLUMNS" in str(e.value)
    assert target.open().version() == 0  # nothing committed


def test_the_sink_stages_with_the_tables_mapping_and_partition_columns(tmp_path: Path) -> None:
    from spark_chkpt.delta.sink.assembler import DeltaSink
    from spark_chkpt.delta.sink.options import DeltaSinkConfig

    target = column_mapped_table(tmp_path / "t", mode="id", partitioned=True)
    (tmp_path / "chk").mkdir()
    (tmp_path / "chk" / "metadata").write_text('{"id":"a1b2c3d4-0000-0000-0000-000000000000"}')
    options = {"path": target.uri, "checkpointLocation": str(tmp_path / "chk")}
    sink = DeltaSink.of(config=DeltaSinkConfig.from_options(options), schema=ARROW).mapped()
    assert sink.config.partition_by == ("part",)  # the table's, as delta-spark takes them
    assert sink.mapping == ColumnMapping.of_table(target.open())
    staged = sink.writer().write(iter([batch()]), batch_id=0, task=0)[0]
    assert sorted(f.partition_values["col-part-6"] for f in staged.files) == ["0", "1"]
    # a table that does not exist yet: created by the first batch, no mapping
    other = {**options, "path": str(tmp_path / "new")}
    fresh = DeltaSink.of(config=DeltaSinkConfig.from_options(other), schema=ARROW).mapped()
    assert fresh.mapping is None and fresh.config.partition_by == ()


def test_the_commit_adds_the_columns_the_tasks_staged_not_a_second_plan(tmp_path: Path) -> None:
    """Spark assembles the sink apart for the tasks and for the commit: each plans a new
    column's physical name anew (a fresh uuid); the commit must take the tasks'."""
    from spark_chkpt.delta.sink.committer import DeltaCoordinator
    from spark_chkpt.delta.sink.options import DeltaSinkConfig
    from spark_chkpt.delta.staging import StagedOutput

    target = column_mapped_table(tmp_path / "t", mode="name")
    wider = ARROW.append(pa.field("c", pa.int64()))
    tasks, committer_side = target.planned_mapping(wider), target.planned_mapping(wider)
    assert tasks is not None and committer_side is not None
    assert tasks.physical_name("c") != committer_side.physical_name("c")
    (tmp_path / "chk").mkdir()
    (tmp_path / "chk" / "metadata").write_text('{"id":"a1b2c3d4-0000-0000-0000-000000000000"}')
    config = DeltaSinkConfig.from_options(
        {"path": target.uri, "checkpointLocation": str(tmp_path / "chk")}
    )
    coordinator = DeltaCoordinator(config=config, snapshot=config.snapshot_settings())
    output = StagedOutput(attempt="a", batch_id=0, task=0, mapping=tasks)
    batch = coordinator.new_batch(
        batch_id=0, messages=[output, None], schema=wider, mapping=committer_side
    )
    assert batch.mapping is tasks
    empty = coordinator.new_batch(batch_id=0, messages=[], schema=wider, mapping=committer_side)
    assert empty.mapping is committer_side
