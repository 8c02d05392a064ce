"""Phase 1 of the Delta commit: the Parquet files a task stages, their Hive folders,
names, sizes and Delta statistics. Real files in ``tmp_path``, no Spark."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_chkpt.delta.staging import (
    NULL_PARTITION,
    STAGED_NAME,
    ParquetStager,
    StagedFile,
    StagedOutput,
    app_tag,
    normalize_schema,
    partition_dir,
    partition_value_string,
)
from spark_chkpt.fs import resolve

SPARK_TS = pa.timestamp("us", tz="Etc/UTC")
UTC_TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("app", pa.string()),
        ("name", pa.string()),
        ("ts", SPARK_TS),
        ("payload", pa.binary()),
    ]
)
T0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)


def stager(
    table: Path,
    *,
    schema: pa.Schema = SCHEMA,
    partition_by: tuple[str, ...] = ("app",),
    batch_id: int | None = 7,
    task: int = 3,
    max_records: int = 1000,
    target_bytes: int = 1 << 26,
    max_open_files: int = 64,
) -> ParquetStager:
    return ParquetStager(
        table=resolve(str(table)),
        schema=schema,
        partition_by=partition_by,
        app_id="staging-test-app",
        batch_id=batch_id,
        task=task,
        max_records_per_file=max_records,
        target_file_bytes=target_bytes,
        max_open_files=max_open_files,
    )


def rows(ids: list[int], apps: list[str | None] | None = None) -> pa.RecordBatch:
    """``SCHEMA`` rows: name ``n<id>``, ts ``T0 + id seconds``, payload ``b"<id>"``."""
    return pa.record_batch(
        [
            pa.array(ids, pa.int64()),
            pa.array(apps if apps is not None else ["a"] * len(ids), pa.string()),
            pa.array([f"n{i}" for i in ids]),
            pa.array([T0 + dt.timedelta(seconds=i) for i in ids], SPARK_TS),
            pa.array([str(i).encode() for i in ids], pa.binary()),
        ],
        schema=SCHEMA,
    )


def read(table: Path, f: StagedFile) -> pa.Table:
    return pq.read_table(table / f.path)


def stats(f: StagedFile) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(f.stats)
    return doc


def files_on_disk(table: Path) -> list[Path]:
    return sorted(p for p in table.rglob("*") if p.is_file())


# -- partition folders ---------------------------------------------------------------


def test_partition_dir_is_hive_style_and_quoted() -> None:
    assert partition_dir(["app"], ["x"]) == "app=x"
    assert partition_dir(["app", "day"], ["a b/c", "2024-05-01"]) == "app=a%20b%2Fc/day=2024-05-01"
    assert partition_dir(["app"], [None]) == f"app={NULL_PARTITION}"
    assert NULL_PARTITION == "__HIVE_DEFAULT_PARTITION__"
    assert partition_dir(["app"], [""]) == "app=__HIVE_DEFAULT_PARTITION__"
    assert partition_dir(["p"], ["50%=ü"]) == "p=50%25%3D%C3%BC"
    with pytest.raises(ValueError):
        partition_dir(["a", "b"], ["x"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, "true"),
        (False, "false"),
        (42, "42"),
        (-1.5, "-1.5"),
        ("a b/c", "a b/c"),
        (dt.date(2024, 5, 1), "2024-05-01"),
        (dt.datetime(2024, 5, 1, 12, 30, 1, 5), "2024-05-01 12:30:01.000005"),
        (
            dt.datetime(2024, 5, 1, 14, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            "2024-05-01 12:30:00.000000",
        ),
        (b"raw", "raw"),
    ],
)
def test_partition_value_strings_are_deltas(value: Any, expected: str | None) -> None:
    assert partition_value_string(value) == expected


def test_rows_split_by_partition_value_into_hive_folders(tmp_path: Path) -> None:
    s = stager(tmp_path)
    s.add(rows([1, 2, 3, 4, 5], ["x", "a b/c", None, "x", "a b/c"]))
    out = s.finish()

    by_value = {f.partition_values["app"]: f for f in out.files}
    assert set(by_value) == {"x", "a b/c", None}
    assert by_value["a b/c"].path.startswith("app=a%20b%2Fc/")
    assert by_value[None].path.startswith("app=__HIVE_DEFAULT_PARTITION__/")
    for value, f in by_value.items():
        folder, name = f.path.rsplit("/", 1)
        assert folder == partition_dir(["app"], [value])
        assert (tmp_path / folder / name).is_file()
        data = read(tmp_path, f)
        assert data.column_names == ["id", "name", "ts", "payload"]  # no partition column
        assert f.rows == data.num_rows == stats(f)["numRecords"]
    assert sorted(read(tmp_path, by_value["x"]).column("id").to_pylist()) == [1, 4]
    assert sorted(read(tmp_path, by_value["a b/c"]).column("id").to_pylist()) == [2, 5]
    assert read(tmp_path, by_value[None]).column("id").to_pylist() == [3]
    assert out.rows == 5
    assert out.bytes == sum(p.stat().st_size for p in files_on_disk(tmp_path))


def test_several_partition_columns_of_other_types(tmp_path: Path) -> None:
    schema = pa.schema(
        [("id", pa.int64()), ("day", pa.date32()), ("ok", pa.bool_()), ("n", pa.int32())]
    )
    s = stager(tmp_path, schema=schema, partition_by=("day", "ok", "n"))
    s.add(
        pa.record_batch(
            [
                pa.array([1, 2, 3]),
                pa.array([dt.date(2024, 5, 1), dt.date(2024, 5, 1), None]),
                pa.array([True, False, True]),
                pa.array([5, 5, -1], pa.int32()),
            ],
            schema=schema,
        )
    )
    out = s.finish()

    got = {f.path.rsplit("/", 1)[0]: read(tmp_path, f).column("id").to_pylist() for f in out.files}
    assert got == {
        "day=2024-05-01/ok=true/n=5": [1],
        "day=2024-05-01/ok=false/n=5": [2],
        f"day={NULL_PARTITION}/ok=true/n=-1": [3],
    }
    assert {tuple(f.partition_values.items()) for f in out.files} == {
        (("day", "2024-05-01"), ("ok", "true"), ("n", "5")),
        (("day", "2024-05-01"), ("ok", "false"), ("n", "5")),
        (("day", None), ("ok", "true"), ("n", "-1")),
    }


def test_unpartitioned_files_sit_at_the_table_root(tmp_path: Path) -> None:
    s = stager(tmp_path, partition_by=())
    s.add(rows([1, 2]))
    (f,) = s.finish().files
    assert "/" not in f.path and f.partition_values == {}
    assert read(tmp_path, f).column_names == SCHEMA.names


def test_nan_partition_value_keeps_its_rows(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64())])
    s = stager(tmp_path, schema=schema, partition_by=("f",))
    s.add(
        pa.record_batch([pa.array([1, 2, 3]), pa.array([float("nan"), 1.5, None])], schema=schema)
    )
    out = s.finish()
    assert out.rows == 3


# -- file names and rolling ----------------------------------------------------------


def test_file_names_carry_batch_task_writer_and_attempt(tmp_path: Path) -> None:
    s = stager(tmp_path, batch_id=42, task=3)
    s.add(rows([1, 2], ["x", "y"]))
    out = s.finish()

    assert len(out.files) == 2
    assert len({f.path for f in out.files}) == 2
    for f in out.files:
        match = STAGED_NAME.match(f.path.rsplit("/", 1)[1])
        assert match is not None
        assert int(match["batch"]) == 42 and int(match["task"]) == 3
        assert match["attempt"] == out.attempt
        assert match["app"] == app_tag("staging-test-app")
    assert (out.batch_id, out.task) == (42, 3)
    tag = app_tag("staging-test-app")
    assert out.files[0].path.endswith(
        f"part-b00042-t00003-q{tag}-{out.attempt}-000.chkpt.snappy.parquet"
    )
    other = stager(tmp_path, batch_id=42, task=3).output.attempt
    assert other != out.attempt  # a retry of the same task is told apart


def test_writer_tag_is_stable_and_old_names_still_match() -> None:
    assert app_tag("3f9d0c1e-query-id") == app_tag("3f9d0c1e-query-id")
    assert app_tag("3f9d0c1e-query-id") != app_tag("3f9d0c1e-query-id2")
    assert len(app_tag("x")) == 8
    old = STAGED_NAME.match("part-b00042-t00003-0123456789ab-000.chkpt.snappy.parquet")
    assert old is not None and old["app"] is None and old["attempt"] == "0123456789ab"
    assert old["batch"] == "00042"


def test_without_batch_id_names_use_batch_zero(tmp_path: Path) -> None:
    s = stager(tmp_path, batch_id=None)
    s.add(rows([1]))
    (f,) = s.finish().files
    assert f.path.split("/")[-1].startswith("part-b00000-t00003-")
    assert STAGED_NAME.match(f.path.split("/")[-1])


def test_files_roll_at_max_records_per_file(tmp_path: Path) -> None:
    s = stager(tmp_path, max_records=4)
    for start in range(0, 10, 2):
        s.add(rows([start, start + 1]))
    out = s.finish()

    assert [f.rows for f in out.files] == [4, 4, 2]
    assert [f.path[-len("000.chkpt.snappy.parquet") :][:3] for f in out.files] == [
        "000",
        "001",
        "002",
    ]
    assert [read(tmp_path, f).column("id").to_pylist() for f in out.files] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
    ]
    assert [stats(f)["numRecords"] for f in out.files] == [4, 4, 2]


def test_rolling_is_per_partition(tmp_path: Path) -> None:
    s = stager(tmp_path, max_records=2)
    s.add(rows([1, 2, 3], ["x", "y", "x"]))
    s.add(rows([4, 5], ["y", "x"]))
    out = s.finish()

    per_app = Counter(f.partition_values["app"] for f in out.files)
    assert per_app == {"x": 2, "y": 1}
    assert sorted((f.partition_values["app"], f.rows) for f in out.files) == [
        ("x", 1),
        ("x", 2),
        ("y", 2),
    ]


def test_one_large_batch_is_split_at_max_records_per_file(tmp_path: Path) -> None:
    s = stager(tmp_path, max_records=3)
    s.add(rows(list(range(10))))
    out = s.finish()
    assert [f.rows for f in out.files] == [3, 3, 3, 1]


def test_files_roll_at_target_file_bytes(tmp_path: Path) -> None:
    s = stager(tmp_path, target_bytes=1)
    for i in range(3):
        s.add(rows([i]))
    out = s.finish()
    assert [f.rows for f in out.files] == [1, 1, 1]


def test_max_open_files_closes_the_oldest(tmp_path: Path) -> None:
    s = stager(tmp_path, max_open_files=2)
    s.add(rows([1, 2, 3], ["x", "y", "z"]))  # opening z closes x
    assert len(s.output.files) == 1 and s.output.files[0].partition_values == {"app": "x"}
    s.add(rows([4], ["x"]))  # x again: a new file
    out = s.finish()

    assert sorted((f.partition_values["app"], f.rows) for f in out.files) == [
        ("x", 1),
        ("x", 1),
        ("y", 1),
        ("z", 1),
    ]
    assert len({f.path for f in out.files}) == 4


def test_empty_batches_write_nothing(tmp_path: Path) -> None:
    s = stager(tmp_path)
    s.add(rows([]))
    out = s.finish()
    assert out.files == [] and out.rows == 0 and out.bytes == 0
    assert files_on_disk(tmp_path) == []


def test_file_metadata_matches_the_file_on_disk(tmp_path: Path) -> None:
    s = stager(tmp_path)
    before = int(dt.datetime.now().timestamp() * 1000)
    s.add(rows([1, 2, 3]))
    (f,) = s.finish().files
    after = int(dt.datetime.now().timestamp() * 1000)

    assert f.size == (tmp_path / f.path).stat().st_size
    assert before <= f.modification_time <= after
    meta = pq.read_metadata(tmp_path / f.path)
    assert meta.num_rows == 3
    assert meta.row_group(0).column(0).compression == "SNAPPY"


# -- statistics ------------------------------------------------------------------------


def test_stats_json_has_records_bounds_and_null_counts(tmp_path: Path) -> None:
    s = stager(tmp_path)
    batch = rows([5, 3, 9])
    names = pa.array(["beta", None, "alpha"])
    stamps = pa.array(
        [
            T0 + dt.timedelta(microseconds=123_456),
            T0 + dt.timedelta(seconds=1, microseconds=500),
            None,
        ],
        SPARK_TS,
    )
    s.add(batch.set_column(2, "name", names).set_column(3, "ts", stamps))
    s.add(rows([7]))
    (f,) = s.finish().files

    assert stats(f) == {
        "numRecords": 4,
        "minValues": {"id": 3, "name": "alpha", "ts": "2024-05-01T12:00:00.123Z"},
        # the maximum is rounded up to the next millisecond: still an upper bound
        "maxValues": {"id": 9, "name": "n7", "ts": "2024-05-01T12:00:07.000Z"},
        "nullCount": {"id": 0, "name": 1, "ts": 1},
    }
    assert "payload" not in stats(f)["minValues"] and "payload" not in stats(f)["maxValues"]
    assert "app" not in stats(f)["nullCount"]  # partition columns have no stats


def test_sub_millisecond_maximum_rounds_up(tmp_path: Path) -> None:
    s = stager(tmp_path)
    batch = rows([1, 2])
    s.add(
        batch.set_column(
            3,
            "ts",
            pa.array(
                [T0 + dt.timedelta(microseconds=999), T0 + dt.timedelta(seconds=2, microseconds=1)],
                SPARK_TS,
            ),
        )
    )
    (f,) = s.finish().files
    assert stats(f)["minValues"]["ts"] == "2024-05-01T12:00:00.000Z"
    assert stats(f)["maxValues"]["ts"] == "2024-05-01T12:00:02.001Z"


def test_all_null_and_long_string_columns_have_no_bounds(tmp_path: Path) -> None:
    s = stager(tmp_path)
    batch = rows([1, 2])
    s.add(
        batch.set_column(2, "name", pa.array(["x" * 65, "y"])).set_column(
            3, "ts", pa.array([None, None], SPARK_TS)
        )
    )
    (f,) = s.finish().files
    doc = stats(f)
    assert set(doc["minValues"]) == set(doc["maxValues"]) == {"id"}
    assert doc["nullCount"] == {"id": 0, "name": 0, "ts": 2}


def test_nested_and_boolean_columns_have_no_bounds(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("ok", pa.bool_()),
            ("tags", pa.list_(pa.string())),
            ("kv", pa.struct([("k", pa.string())])),
        ]
    )
    s = stager(tmp_path, schema=schema, partition_by=())
    s.add(
        pa.record_batch(
            [
                pa.array([1, 2]),
                pa.array([True, None]),
                pa.array([["a"], None]),
                pa.array([{"k": "v"}, None]),
            ],
            schema=schema,
        )
    )
    (f,) = s.finish().files
    doc = stats(f)
    assert set(doc["minValues"]) == set(doc["maxValues"]) == {"id"}
    assert doc["nullCount"] == {"id": 0, "ok": 1}


def test_dates_and_floats_have_bounds(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("x", pa.float64())])
    s = stager(tmp_path, schema=schema, partition_by=())
    s.add(
        pa.record_batch(
            [
                pa.array([1, 2]),
                pa.array([dt.date(2024, 5, 2), dt.date(2024, 4, 30)]),
                pa.array([2.5, -1.0]),
            ],
            schema=schema,
        )
    )
    (f,) = s.finish().files
    assert stats(f)["minValues"] == {"id": 1, "day": "2024-04-30", "x": -1.0}
    assert stats(f)["maxValues"] == {"id": 2, "day": "2024-05-02", "x": 2.5}


def test_decimal_columns_can_be_staged(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("price", pa.decimal128(10, 2))])
    s = stager(tmp_path, schema=schema, partition_by=())
    s.add(
        pa.record_batch(
            [
                pa.array([1, 2]),
                pa.array([decimal.Decimal("1.50"), decimal.Decimal("20.25")], pa.decimal128(10, 2)),
            ],
            schema=schema,
        )
    )
    (f,) = s.finish().files
    doc = stats(f)
    # Staged, counted, null-counted; no bounds, as JSON floats could not bound exactly.
    assert doc["numRecords"] == 2 and doc["nullCount"]["price"] == 0
    assert "price" not in doc["minValues"] and "price" not in doc["maxValues"]
    assert doc["minValues"]["id"] == 1


# -- timestamps ---------------------------------------------------------------------------


def test_spark_etc_utc_timestamps_are_written_as_utc(tmp_path: Path) -> None:
    s = stager(tmp_path)
    assert s.schema.field("ts").type == UTC_TS
    s.add(rows([1]))
    (f,) = s.finish().files
    data = read(tmp_path, f)
    assert data.schema.field("ts").type == UTC_TS
    assert data.column("ts").to_pylist() == [T0 + dt.timedelta(seconds=1)]


def test_other_zones_and_nanoseconds_become_utc_microseconds(tmp_path: Path) -> None:
    berlin = pa.timestamp("ns", tz="Europe/Berlin")
    schema = pa.schema([("id", pa.int64()), ("ts", berlin)])
    s = stager(tmp_path, schema=schema, partition_by=())
    s.add(pa.record_batch([pa.array([1]), pa.array([T0], berlin)], schema=schema))
    (f,) = s.finish().files
    data = read(tmp_path, f)
    assert data.schema.field("ts").type == UTC_TS
    assert data.column("ts").to_pylist() == [T0]  # the same instant
    assert stats(f)["minValues"]["ts"] == "2024-05-01T12:00:00.000Z"


def test_normalize_schema_reaches_nested_timestamps() -> None:
    schema = pa.schema(
        [
            ("plain", pa.timestamp("ns")),
            ("zoned", SPARK_TS),
            ("s", pa.struct([("t", SPARK_TS)])),
            ("l", pa.list_(SPARK_TS)),
            ("m", pa.map_(pa.string(), SPARK_TS)),
            ("n", pa.int64()),
        ],
        metadata={b"k": b"v"},
    )
    got = normalize_schema(schema)
    assert got.field("plain").type == pa.timestamp("us")
    assert got.field("zoned").type == UTC_TS
    assert got.field("s").type == pa.struct([("t", UTC_TS)])
    assert got.field("l").type.value_type == UTC_TS
    assert got.field("m").type.item_type == UTC_TS
    assert got.field("n").type == pa.int64()
    assert got.metadata == {b"k": b"v"}


# -- discard --------------------------------------------------------------------------------


def test_discard_removes_closed_and_open_files(tmp_path: Path) -> None:
    s = stager(tmp_path, max_records=2)
    s.add(rows([1, 2, 3], ["x", "x", "y"]))  # x closed (2 rows), y still open
    s.add(rows([4], ["z"]))
    assert len(s.output.files) == 1 and len(s._open) == 2
    assert len(files_on_disk(tmp_path)) == 3

    s.discard()

    assert files_on_disk(tmp_path) == []
    s.discard()  # a second discard finds nothing to delete


def test_discard_after_finish_removes_everything(tmp_path: Path) -> None:
    s = stager(tmp_path)
    s.add(rows([1, 2], ["x", None]))
    out: StagedOutput = s.finish()
    assert all((tmp_path / f.path).is_file() for f in out.files)
    s.discard()
    assert files_on_disk(tmp_path) == []


# -- every row lands in exactly one file ----------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.sampled_from(["x", "y", "a b/c", None, "é"]), min_size=0, max_size=12),
        min_size=1,
        max_size=4,
    ),
    max_records=st.integers(1, 6),
    max_open_files=st.integers(1, 3),
)
def test_every_row_is_staged_once_in_its_partition(
    batches: list[list[str | None]], max_records: int, max_open_files: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp)
        s = stager(table, max_records=max_records, max_open_files=max_open_files)
        expected: list[tuple[int, str | None]] = []
        next_id = 0
        for apps in batches:
            ids = list(range(next_id, next_id + len(apps)))
            next_id += len(apps)
            s.add(rows(ids, apps))
            expected += zip(ids, apps, strict=True)
        out = s.finish()

        got = []
        for f in out.files:
            assert f.path.rsplit("/", 1)[0] == partition_dir(["app"], [f.partition_values["app"]])
            ids = read(table, f).column("id").to_pylist()
            assert len(ids) == f.rows == stats(f)["numRecords"]
            got += [(i, f.partition_values["app"]) for i in ids]
        assert sorted(got, key=repr) == sorted(expected, key=repr)
        assert {p.relative_to(table).as_posix() for p in files_on_disk(table)} == {
            f.path for f in out.files
        }
