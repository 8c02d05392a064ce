"""Bad files in the checkpoint folder: each gets an error naming the file, or is repaired
from what the table committed, and nothing already committed is lost (the README's
bad-input table lists these next to the option and record cases tested elsewhere)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.errors import ChkptError
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from tests.delta.sink.test_coordinator import SCHEMA, Query


def test_a_corrupt_snapshot_record_is_rewritten_from_the_commit(tmp_path: Path) -> None:
    q = Query(tmp_path)
    first = q.commit(0, q.stage(0, [1, 2]))
    stored = q.checkpoint / "chkpt" / "snapshots" / "0.json"
    stored.write_text('{"batch_id": 0, "app_')  # torn by a disk fault
    with pytest.raises(ChkptError, match=f"snapshot record .*{stored.name} is corrupt"):
        q.store().get(0)
    again = q.commit(0, q.stage(0, [1, 2]))  # Spark replays the batch
    assert (again.rows, again.table_version, again.outcome) == (2, 0, "committed")
    assert again.source_offsets == first.source_offsets
    assert q.store().get(0) == again
    assert q.rows() == [(1, "a"), (2, "a")]


def test_missing_offset_log_entry_names_the_file(tmp_path: Path) -> None:
    q = Query(tmp_path)
    with pytest.raises(ChkptError, match=r"no plan for batch 7: .*offsets/7 is missing"):
        SparkCheckpoint(location=str(q.checkpoint)).plan(7)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("v1\n", "is not a Spark offset log entry"), ('v1\n{"a":1}\n{broken', "malformed offset")],
)
def test_corrupt_offset_log_entry_names_the_file(tmp_path: Path, text: str, fragment: str) -> None:
    q = Query(tmp_path)
    (q.checkpoint / "offsets" / "3").write_text(text)
    with pytest.raises(ChkptError, match=rf"offsets/3.*{fragment}|{fragment}.*offsets/3"):
        SparkCheckpoint(location=str(q.checkpoint)).plan(3)


def test_corrupt_or_missing_query_metadata_names_the_file(tmp_path: Path) -> None:
    q = Query(tmp_path)
    (q.checkpoint / "metadata").write_text(json.dumps({"no": "id"}))
    with pytest.raises(ChkptError, match=r"metadata is not Spark query metadata"):
        SparkCheckpoint(location=str(q.checkpoint)).query_id()
    (q.checkpoint / "metadata").unlink()
    with pytest.raises(ChkptError, match=r"metadata does not exist: is .* a Spark streaming"):
        SparkCheckpoint(location=str(q.checkpoint)).query_id()


@pytest.mark.parametrize(
    ("ddl", "option", "fragment"),
    [
        ("key string", "value", "must have a 'value' column"),
        ("value int", "value", "must be string or binary"),
        ("value string, key array<int>", "key", "must be string or binary"),
        ("value string", "topic", "set option 'topic' or write a 'topic' column"),
        ("value string, topic int", "topic", "must be a string"),
        ("value string, topic string, partition string", "partition", "must be an int"),
        ("value string, topic string, headers array<string>", "headers", "array<struct<key"),
    ],
)
def test_kafka_sink_schema_errors_name_the_column(ddl: str, option: str, fragment: str) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    from spark_chkpt.errors import ConfigError
    from spark_chkpt.kafka.sink.options import KafkaSinkConfig, check_sink_schema

    types = {
        "string": StringType(),
        "int": IntegerType(),
        "binary": BinaryType(),
        "array<int>": ArrayType(IntegerType()),
        "array<string>": ArrayType(StringType()),
    }
    schema = StructType(
        [StructField(n, types[t]) for n, t in (c.strip().split(" ", 1) for c in ddl.split(","))]
    )
    config = KafkaSinkConfig.from_options(
        {"kafka.bootstrap.servers": "h:1", "checkpointLocation": "/tmp/chk"}
    )
    with pytest.raises(ConfigError, match=fragment) as info:
        check_sink_schema(schema, config)
    assert info.value.option == option


def test_a_new_query_on_another_querys_partitions_is_refused(tmp_path: Path) -> None:
    from spark_chkpt.errors import QueryIdentityError

    q = Query(tmp_path)
    q.commit(0, q.stage(0, [1, 2]))  # query APP_ID read events-0 and events-1
    # A new query id (the checkpoint was lost) on the same partitions: refused.
    with pytest.raises(QueryIdentityError, match=r"spark-chkpt recover --table .* --app-id"):
        q.commit(0, q.stage(0, [1, 2]), app_id="new-query", refuse_other_writers=True)
    assert q.rows() == [(1, "a"), (2, "a")]
    # Another topic's query may share the table.
    q.plan(0, {"clicks": {"0": 4}})
    other = q.coordinator(app_id="clicks-query", refuse_other_writers=True).commit(
        messages=[q.stage(0, [7])], batch_id=0, schema=SCHEMA
    )
    assert other.outcome == "committed"
    # And the same partitions, when the sink says so (otherWriters=allow).
    allowed = q.commit(0, q.stage(0, [9]), app_id="second-query", refuse_other_writers=False)
    assert allowed.outcome == "committed"


def test_other_writers_option_names_its_values() -> None:
    from spark_chkpt.delta.sink.options import DeltaSinkConfig
    from spark_chkpt.errors import ConfigError

    base = {"path": "/tmp/t", "checkpointLocation": "/tmp/c"}
    assert DeltaSinkConfig.from_options(base).other_writers == "refuse"
    assert DeltaSinkConfig.from_options({**base, "otherWriters": "ALLOW"}).other_writers == "allow"
    with pytest.raises(ConfigError, match=r"'otherWriters' = 'sometimes': 'refuse'"):
        DeltaSinkConfig.from_options({**base, "otherWriters": "sometimes"})


# -- DeltaUpsert (foreachBatch): checked before anything is written --------------------


def _counts_table(tmp_path: Path) -> tuple[Path, int]:
    """A table as an upsert of page-view counts leaves it: ``app string, count long``."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = tmp_path / "pv_counts"
    write_deltalake(str(table), pa.table({"app": ["app1", "app2"], "count": [3, 4]}))
    return table, DeltaTable(str(table)).version()


def _unchanged(table: Path, version: int) -> None:
    from deltalake import DeltaTable

    delta = DeltaTable(str(table))
    assert delta.version() == version
    assert sorted(delta.to_pyarrow_table().to_pylist(), key=lambda r: r["app"]) == [
        {"app": "app1", "count": 3},
        {"app": "app2", "count": 4},
    ]


def _schema(**columns: str) -> Any:
    from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructType

    types = {"string": StringType(), "int": IntegerType(), "long": LongType()}
    types["boolean"] = BooleanType()
    schema = StructType()
    for name, kind in columns.items():
        schema = schema.add(name, types[kind])
    return schema


@pytest.mark.parametrize("keys", [[], (), "app", ["app", ""], ["app", "app"]])
def test_upsert_needs_key_columns(tmp_path: Path, keys: Any) -> None:
    from spark_chkpt import DeltaUpsert
    from spark_chkpt.errors import ConfigError

    table, version = _counts_table(tmp_path)
    with pytest.raises(ConfigError, match=r"option 'keys' = .*(key column|each key)") as info:
        DeltaUpsert(path=str(table), keys=keys, checkpoint_location=str(tmp_path / "chk"))
    assert info.value.option == "keys"
    _unchanged(table, version)


def test_upsert_key_missing_from_the_batch_names_it_and_the_columns(tmp_path: Path) -> None:
    from spark_chkpt import DeltaUpsert
    from spark_chkpt.errors import ConfigError

    table, version = _counts_table(tmp_path)
    upsert = DeltaUpsert(
        path=str(table), keys=["app", "day"], checkpoint_location=str(tmp_path / "chk")
    )
    with pytest.raises(ConfigError, match=r"key column\(s\) day not in the batch") as info:
        upsert.check(_schema(app="string", count="long"))
    assert info.value.option == "keys" and "its columns are app, count" in str(info.value)
    _unchanged(table, version)


def test_upsert_key_type_change_names_the_column_and_both_types(tmp_path: Path) -> None:
    from spark_chkpt import DeltaUpsert
    from spark_chkpt.errors import SchemaMismatchError

    table, version = _counts_table(tmp_path)
    upsert = DeltaUpsert(path=str(table), keys=["app"], checkpoint_location=str(tmp_path / "chk"))
    with pytest.raises(
        SchemaMismatchError, match=r"key column type changed \(app: table string, batch int32\)"
    ):
        upsert.check(_schema(app="int", count="long"))
    with pytest.raises(
        SchemaMismatchError, match=r"column types differ \(count: table int64, batch int32\)"
    ):
        upsert.check(_schema(app="string", count="int"))
    with pytest.raises(SchemaMismatchError, match=r"batch has column\(s\) extra it lacks"):
        upsert.check(_schema(app="string", count="long", extra="string"))
    with pytest.raises(SchemaMismatchError, match=r"it has column\(s\) count the batch lacks"):
        upsert.check(_schema(app="string"))
    _unchanged(table, version)
    # The delete column is no table column, and a boolean one passes.
    upsert.check(_schema(app="string", count="long", _delete="boolean"))


def test_upsert_delete_column_must_be_boolean(tmp_path: Path) -> None:
    from spark_chkpt import DeltaUpsert
    from spark_chkpt.errors import ConfigError

    table, version = _counts_table(tmp_path)
    upsert = DeltaUpsert(path=str(table), keys=["app"], checkpoint_location=str(tmp_path / "chk"))
    with pytest.raises(ConfigError, match=r"column _delete is string; it must be boolean") as info:
        upsert.check(_schema(app="string", count="long", _delete="string"))
    assert info.value.option == "delete_column"
    with pytest.raises(ConfigError, match="not a key") as info:
        DeltaUpsert(path=str(table), keys=["app"], checkpoint_location="c", delete_column="app")
    _unchanged(table, version)


def test_upsert_key_twice_in_a_batch_is_refused_naming_the_fix(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_chkpt.delta.table.target import DeltaTarget
    from spark_chkpt.delta.upsert.merge import STAGING_DIR, DuplicateKeyError, KeyedMerge

    table, version = _counts_table(tmp_path)
    staged = pa.table({"app": ["app1", "app1"], "count": [5, 6]})
    (table / STAGING_DIR).mkdir()
    pq.write_table(staged, table / STAGING_DIR / "dup.parquet")
    target = DeltaTarget(uri=str(table))
    merge = KeyedMerge(target=target, keys=["app"], delete_column="_delete")
    with pytest.raises(DuplicateKeyError, match=r"more than once.*dropDuplicates\(\['app'\]\)"):
        merge.merge(
            target.open(),
            files=[f"{STAGING_DIR}/dup.parquet"],
            schema=staged.schema,
            app_id="q",
            version=0,
            metadata={},
            batch_size=10,
        )
    _unchanged(table, version)
