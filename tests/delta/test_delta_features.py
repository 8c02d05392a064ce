"""Delta table features (issue 47): tables delta-spark creates, one per feature, written
by ``chkpt-delta`` (and ``DeltaUpsert`` where it matters) and read back by delta-spark.

A supported table reads back exactly what ``format("delta")`` writes for the same input
into a twin table; a refused one fails at the query's start with the feature's named
error (``TableFeatureError``) and no Parquet file staged in its folder; a constraint or
generated-column violation fails naming it and commits nothing. One SparkSession, small
data, availableNow queries over a folder of JSON files (no broker needed).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from spark_chkpt import DeltaUpsert

pytestmark = pytest.mark.integration

INPUT_DDL = "id BIGINT, v STRING"


def create(
    spark: SparkSession, table: Path, ddl: str = "id BIGINT, v STRING", tail: str = ""
) -> None:
    spark.sql(f"CREATE TABLE delta.`{table}` ({ddl}) USING delta {tail}")


def rows_stream(
    spark: SparkSession, folder: Path, rows: list[dict[str, Any]], ddl: str = INPUT_DDL
) -> DataFrame:
    """A stream over one JSON file of ``rows`` (availableNow reads it in one batch)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{uuid.uuid4().hex}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return spark.readStream.schema(ddl).json(str(folder))


def run(df: DataFrame, table: Path, chk: Path, **options: str) -> BaseException | None:
    writer = (
        df.writeStream.format("chkpt-delta")
        .option("path", str(table))
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start()
    with contextlib.suppress(Exception):
        query.awaitTermination(240)
    return query.exception()


def upsert(df: DataFrame, table: Path, chk: Path, keys: list[str]) -> BaseException | None:
    query = (
        df.writeStream.foreachBatch(
            DeltaUpsert(path=str(table), keys=keys, checkpoint_location=str(chk))
        )
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(Exception):
        query.awaitTermination(240)
    return query.exception()


def parquet_files(table: Path) -> set[str]:
    """Every Parquet file under the table's folder but the log."""
    return {
        p.relative_to(table).as_posix()
        for p in table.rglob("*.parquet")
        if "_delta_log" not in p.parts
    }


def delta(spark: SparkSession, table: Path) -> DataFrame:
    return spark.read.format("delta").load(str(table))


def assert_same(actual: DataFrame, expected: DataFrame) -> None:
    assert_df_equality(
        actual.select(*sorted(expected.columns)),
        expected.select(*sorted(expected.columns)),
        ignore_row_order=True,
        ignore_nullable=True,
    )


ROWS = [{"id": i, "v": f"v{i}"} for i in range(20)]

# feature -> how delta-spark creates a table that requires it
REFUSED = {
    "allowColumnDefaults": (
        "id BIGINT, v STRING",
        "TBLPROPERTIES ('delta.feature.allowColumnDefaults'='supported')",
    ),
}
ICT = "TBLPROPERTIES ('delta.enableInCommitTimestamps'='true')"


@pytest.mark.parametrize("feature", sorted(REFUSED))
def test_a_refused_feature_fails_at_start_naming_it_with_nothing_staged(
    spark: SparkSession, tmp_path: Path, capfd: pytest.CaptureFixture[str], feature: str
) -> None:
    table = tmp_path / "table"
    create(spark, table, *REFUSED[feature])
    before = parquet_files(table)
    error = run(rows_stream(spark, tmp_path / "in", ROWS), table, tmp_path / "chk")
    assert error is not None
    text = str(error)
    assert "TableFeatureError" in text and str(table) in text, text[:2000]
    assert f"requires table feature '{feature}'" in text
    assert parquet_files(table) == before  # nothing staged
    assert "commit conflict" not in capfd.readouterr().err


# name -> (columns, the rest of CREATE TABLE, what delta-spark runs after): tables whose
# features delta-rs refuses, appended to by spark-chkpt's own commit
OWN_COMMIT = {
    # what a Databricks workspace gives new tables
    "databricks": (
        "id BIGINT, v STRING",
        "TBLPROPERTIES ('delta.enableDeletionVectors'='true', "
        "'delta.enableInCommitTimestamps'='true', 'delta.enableRowTracking'='true', "
        "'delta.columnMapping.mode'='name')",
        "",
    ),
    "clustered": ("id BIGINT, v STRING", "CLUSTER BY (id)", ""),
    "widened": (
        "id INT, v STRING",
        "TBLPROPERTIES ('delta.enableTypeWidening'='true')",
        "ALTER TABLE delta.`{table}` ALTER COLUMN id TYPE BIGINT",
    ),
}


@pytest.mark.parametrize("name", sorted(OWN_COMMIT))
def test_a_table_delta_rs_refuses_takes_appends_read_back_by_delta_spark_and_delta_rs(
    spark: SparkSession, tmp_path: Path, name: str
) -> None:
    from spark_chkpt.delta.table.target import DeltaTarget

    ddl, tail, after = OWN_COMMIT[name]
    table, chk, folder = tmp_path / "table", tmp_path / "chk", tmp_path / "in"
    create(spark, table, ddl, tail)
    spark.sql(f"INSERT INTO delta.`{table}` VALUES (-1, 'x'), (-2, 'y')")
    if after:
        spark.sql(after.format(table=table))
    df = rows_stream(spark, folder, ROWS)
    error = run(df, table, chk)
    assert error is None, str(error)[:3000]
    expected = [(-1, "x"), (-2, "y")] + [(r["id"], r["v"]) for r in ROWS]
    assert_same(delta(spark, table), spark.createDataFrame(expected, INPUT_DDL))
    # delta-rs reads the same rows (column mapping applied); a type-widened table it
    # does not read at all (typeWidening is a reader feature delta-rs 1.6 lacks)
    target = DeltaTarget(uri=str(table))
    if name == "widened":
        with pytest.raises(Exception, match=r"(?i)typeWidening"):
            target.rows(target.require())
    else:
        got = target.rows(target.require()).select(["id", "v"]).to_pylist()
        assert sorted((r["id"], r["v"]) for r in got) == sorted(expected)
    version = target.require().version()
    # a replayed batch (Spark runs batch 0 again, as after a kill -9 before its
    # commits/0): the table's txn has it, nothing is committed
    (chk / "commits" / "0").unlink()
    assert run(df, table, chk) is None
    assert target.require().version() == version
    assert delta(spark, table).count() == len(expected)
    if name == "databricks":
        spark.sql(f"INSERT INTO delta.`{table}` VALUES (-3, 'z')")  # delta-spark after us
        ids = delta(spark, table).select("_metadata.row_id").collect()
        assert len(ids) == len(expected) + 1 == len({r.row_id for r in ids})
        history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
        stamps = [h.timestamp for h in history]
        assert stamps == sorted(set(stamps)), stamps  # in-commit timestamps: increasing
    if name == "clustered":
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()
        assert detail is not None and list(detail["clusteringColumns"]) == ["id"]


def _mark(table: Path, column: str = "id") -> int:
    """The identity column's high-water mark in the table's schema (its Delta log)."""
    from deltalake import DeltaTable

    (field,) = [f for f in DeltaTable(str(table)).schema().fields if f.name == column]
    return int(field.metadata["delta.identity.highWaterMark"])


def test_identity_columns_are_generated_unique_above_the_mark_across_batches_and_tasks(
    spark: SparkSession, tmp_path: Path
) -> None:
    from spark_chkpt.delta.table.target import DeltaTarget

    table, chk, folder = tmp_path / "always", tmp_path / "chk", tmp_path / "in"
    create(spark, table, "id BIGINT GENERATED ALWAYS AS IDENTITY, v STRING")
    spark.sql(f"INSERT INTO delta.`{table}` (v) VALUES ('x'), ('y')")  # delta-spark: 1, 2
    # (a query giving the GENERATED ALWAYS column is refused at planning: test_identity.py)
    # two batches (one file each), two write tasks each
    for part in range(2):
        rows_stream(spark, folder, [{"v": f"b{part}-{i}"} for i in range(10)], ddl="v STRING")
    df = spark.readStream.schema("v STRING").option("maxFilesPerTrigger", 1).json(str(folder))
    target = DeltaTarget(uri=str(table))
    version = target.require().version()
    assert run(df.repartition(2), table, chk) is None
    assert target.require().version() == version + 2  # two batches, one commit each
    ours = [r.id for r in delta(spark, table).where("v LIKE 'b%'").select("id").collect()]
    assert len(ours) == len(set(ours)) == 20 and min(ours) > 2
    assert _mark(table) == max(ours)
    # a replay of batch 1 (as after a kill -9 before Spark's commits/1) commits nothing
    (chk / "commits" / "1").unlink()
    assert run(df.repartition(2), table, chk) is None
    assert target.require().version() == version + 2
    # delta-spark's own INSERT after ours generates above ours
    spark.sql(f"INSERT INTO delta.`{table}` (v) VALUES ('z')")
    after = delta(spark, table).where("v = 'z'").first()
    assert after is not None and after.id > max(ours)
    ids = [r.id for r in delta(spark, table).select("id").collect()]
    assert len(ids) == len(set(ids)) == 23

    # BY DEFAULT, START WITH 100 INCREMENT BY -5: given ids kept, NULL ones generated
    by_default = tmp_path / "by_default"
    create(
        spark,
        by_default,
        "id BIGINT GENERATED BY DEFAULT AS IDENTITY (START WITH 100 INCREMENT BY -5), v STRING",
    )
    rows = [{"id": i if i % 2 else None, "v": f"d{i}"} for i in range(12)]
    given = rows_stream(spark, tmp_path / "in-default", rows).repartition(2)
    assert run(given, by_default, tmp_path / "chk-default") is None
    got = {r.v: r.id for r in delta(spark, by_default).collect()}
    assert all(got[f"d{i}"] == i for i in range(1, 12, 2))
    generated = [got[f"d{i}"] for i in range(0, 12, 2)]
    assert len(set(generated)) == 6
    assert all(g <= 100 and (100 - g) % 5 == 0 for g in generated)
    assert _mark(by_default) == min(generated)
    spark.sql(f"INSERT INTO delta.`{by_default}` (v) VALUES ('z')")
    after = delta(spark, by_default).where("v = 'z'").first()
    assert after is not None and after.id < min(generated)


def test_complete_mode_on_an_identity_table_generates_new_values_above_the_mark(
    spark: SparkSession, tmp_path: Path
) -> None:
    """outputMode("complete") replaces the rows with new identity values above the
    high-water mark, which only goes up (delta-spark's INSERT OVERWRITE does the same)."""
    from pyspark.sql import functions as F

    table, chk, folder = tmp_path / "t", tmp_path / "chk", tmp_path / "in"
    create(spark, table, "id BIGINT GENERATED ALWAYS AS IDENTITY, v STRING, n BIGINT")
    spark.sql(f"INSERT INTO delta.`{table}` (v, n) VALUES ('x', 0)")  # delta-spark: id 1
    for rows in (["a", "b"], ["b", "c"]):  # two batches: the second replaces the first
        rows_stream(spark, folder, [{"v": v} for v in rows], ddl="v STRING")
    counts = (
        spark.readStream.schema("v STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .groupBy("v")
        .agg(F.count("*").alias("n"))
    )
    error = write_complete(counts, table, chk)
    assert error is None, str(error)[:3000]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
    assert [h.operationParameters.get("mode") for h in history[-2:]] == ["Overwrite"] * 2
    got = {r.v: (r.id, r.n) for r in delta(spark, table).collect()}
    assert {v: n for v, (_, n) in got.items()} == {"a": 1, "b": 2, "c": 1}
    ids = [i for i, _ in got.values()]
    assert len(set(ids)) == 3 and min(ids) > 1 and _mark(table) == max(ids)
    # the first batch's values lay below the second's: read them at its version
    at_first = spark.read.format("delta").option("versionAsOf", history[-2].version)
    earlier = [r.id for r in at_first.load(str(table)).collect()]
    assert len(earlier) == 2 and max(earlier) < min(ids)
    spark.sql(f"INSERT INTO delta.`{table}` (v, n) VALUES ('z', 0)")
    after = delta(spark, table).where("v = 'z'").first()
    assert after is not None and after.id > max(ids)


def twin_write(spark: SparkSession, folder: Path, twin: Path, ddl: str = INPUT_DDL) -> None:
    """What ``format("delta")`` writes for the same input (a batch append)."""
    spark.read.schema(ddl).json(str(folder)).write.format("delta").mode("append").save(str(twin))


# name -> (columns, the rest of CREATE TABLE): tables chkpt-delta writes as delta-spark does
SUPPORTED = {
    "plain": ("id BIGINT, v STRING", ""),
    "partitioned": ("id BIGINT, v STRING", "PARTITIONED BY (v)"),
    "deletionVectors": (
        "id BIGINT, v STRING",
        "TBLPROPERTIES ('delta.enableDeletionVectors'='true')",
    ),
    "changeDataFeed": (
        "id BIGINT, v STRING",
        "TBLPROPERTIES ('delta.enableChangeDataFeed'='true')",
    ),
    "v2Checkpoint": (
        "id BIGINT, v STRING",
        "TBLPROPERTIES ('delta.checkpointPolicy'='v2', 'delta.checkpointInterval'='1')",
    ),
    "appendOnly": ("id BIGINT, v STRING", "TBLPROPERTIES ('delta.appendOnly'='true')"),
    "notNull": ("id BIGINT NOT NULL, v STRING", ""),
    "check": ("id BIGINT, v STRING", "CHECK"),
    "generated": ("id BIGINT, v STRING, id2 BIGINT GENERATED ALWAYS AS (id * 2)", ""),
}


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_a_supported_table_reads_back_as_format_delta_writes_it(
    spark: SparkSession, tmp_path: Path, name: str
) -> None:
    ddl, tail = SUPPORTED[name]
    table, twin = tmp_path / "table", tmp_path / "twin"
    for path in (table, twin):
        create(spark, path, ddl, "" if tail == "CHECK" else tail)
        if tail == "CHECK":
            spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT small CHECK (id < 150)")
        if name == "deletionVectors":  # rows delta-spark deleted with a deletion vector
            spark.sql(f"INSERT INTO delta.`{path}` VALUES (-1, 'x'), (-2, 'y')")
            spark.sql(f"DELETE FROM delta.`{path}` WHERE id = -1")
    folder = tmp_path / "in"
    options = {"partitionBy": "v"} if name == "partitioned" else {}
    error = run(rows_stream(spark, folder, ROWS), table, tmp_path / "chk", **options)
    assert error is None, str(error)[:3000]
    twin_write(spark, folder, twin)
    got = delta(spark, table)
    assert_same(got, delta(spark, twin))
    assert got.count() == len(ROWS) + (1 if name == "deletionVectors" else 0)
    if name == "changeDataFeed":
        changes = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", 1)
            .load(str(table))
        )
        assert changes.where("_change_type = 'insert'").count() == len(ROWS)


def test_a_check_constraint_violation_fails_naming_it_and_commits_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "table"
    create(spark, table)
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT small CHECK (id < 150)")
    version = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").count()
    rows = [{"id": i, "v": f"v{i}"} for i in range(140, 160)]
    folder = tmp_path / "in"
    error = run(rows_stream(spark, folder, rows), table, tmp_path / "chk")
    assert error is not None
    text = str(error)
    assert "ConstraintViolationError" in text and "CHECK constraint small: id < 150" in text
    assert "10 row(s)" in text and "id=150" in text
    assert spark.sql(f"DESCRIBE HISTORY delta.`{table}`").count() == version  # no commit
    assert parquet_files(table) == set()  # the failed task staged nothing
    # delta-spark refuses the same rows
    with pytest.raises(Exception, match="DELTA_VIOLATE_CONSTRAINT"):
        twin_write(spark, folder, table)


def test_a_generated_column_given_another_value_fails_naming_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "table"
    create(spark, table, "id BIGINT, v STRING, id2 BIGINT GENERATED ALWAYS AS (id * 2)")
    rows = [{"id": i, "v": "v", "id2": i * 3} for i in range(1, 5)]
    error = run(
        rows_stream(spark, tmp_path / "in", rows, "id BIGINT, v STRING, id2 BIGINT"),
        table,
        tmp_path / "chk",
    )
    assert error is not None
    text = str(error)
    assert "generated column id2" in text and "id2=3 (expected 2)" in text
    assert delta(spark, table).count() == 0


def test_delta_upsert_writes_the_change_feed_and_refuses_append_only(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "cdf"
    create(spark, table, tail="TBLPROPERTIES ('delta.enableChangeDataFeed'='true')")
    spark.sql(f"INSERT INTO delta.`{table}` VALUES (1, 'old'), (2, 'old')")
    rows = [{"id": 1, "v": "new"}, {"id": 3, "v": "new"}]
    assert (
        upsert(rows_stream(spark, tmp_path / "in", rows), table, tmp_path / "chk", ["id"]) is None
    )
    changes = {
        (r.id, r.v, r._change_type)
        for r in spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 2)
        .load(str(table))
        .collect()
    }
    assert changes == {
        (1, "old", "update_preimage"),
        (1, "new", "update_postimage"),
        (3, "new", "insert"),
    }

    frozen = tmp_path / "frozen"
    create(spark, frozen, tail="TBLPROPERTIES ('delta.appendOnly'='true')")
    spark.sql(f"INSERT INTO delta.`{frozen}` VALUES (1, 'old')")
    before = parquet_files(frozen)
    error = upsert(rows_stream(spark, tmp_path / "in2", rows), frozen, tmp_path / "chk2", ["id"])
    assert error is not None and "'appendOnly'" in str(error) and "TableFeatureError" in str(error)
    assert parquet_files(frozen) == before


def test_delta_options_set_table_properties_on_creation(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "table"
    error = run(
        rows_stream(spark, tmp_path / "in", ROWS),
        table,
        tmp_path / "chk",
        **{"delta.enableChangeDataFeed": "true", "delta.appendOnly": "true"},
    )
    assert error is None, str(error)[:3000]
    props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{table}`").collect()}
    assert props.get("delta.enableChangeDataFeed") == "true"
    assert props.get("delta.appendOnly") == "true"
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(str(table))
    )
    assert changes.where("_change_type = 'insert'").count() == len(ROWS)


# -- tables named as users name them (option table, toTable, DeltaUpsert(table=...)) ------


def database(spark: SparkSession, tmp_path: Path) -> str:
    """A database of the session catalog whose managed tables live under ``tmp_path``."""
    name = f"db_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {name} LOCATION '{tmp_path / 'warehouse'}'")
    return name


def start_named(df: DataFrame, chk: Path, table: str, *, to_table: bool = False) -> Any:
    writer = (
        df.writeStream.format("chkpt-delta")
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
    )
    return writer.toTable(table) if to_table else writer.option("table", table).start()


def test_a_catalog_table_is_written_by_name_with_to_table_and_delta_upsert(
    spark: SparkSession, tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    db = database(spark, tmp_path)
    # interval 2: delta-spark's INSERT is version 1, the sink's commit version 2 and its
    # checkpoint (log/upkeep.py), which delta-spark reads the table from below
    spark.sql(
        f"CREATE TABLE {db}.events (id BIGINT, v STRING) USING delta "
        "TBLPROPERTIES ('delta.checkpointInterval'='2')"
    )
    spark.sql(f"INSERT INTO {db}.events VALUES (100, 'v100')")
    more = [{"id": 100, "v": "v100"}]
    # toTable(name) is option("table", name).start() (one query proves both: CI time)
    query = start_named(
        rows_stream(spark, tmp_path / "in", ROWS), tmp_path / "chk", f"{db}.events", to_table=True
    )
    query.awaitTermination(240)
    assert query.exception() is None, str(query.exception())[:3000]
    expected = spark.createDataFrame([(r["id"], r["v"]) for r in ROWS + more], INPUT_DDL)
    assert_same(spark.table(f"{db}.events"), expected)
    location = spark.sql(f"DESCRIBE DETAIL {db}.events").first()["location"]  # type: ignore[index]
    assert location.startswith("file:") and str(tmp_path / "warehouse") in location
    log_dir = Path(location.removeprefix("file:")) / "_delta_log"
    assert sorted(p.name for p in log_dir.glob("*.checkpoint.parquet")) == [
        f"{2:020d}.checkpoint.parquet"
    ]
    assert sorted(DeltaTable(location).to_pyarrow_table().column("id").to_pylist()) == sorted(
        r["id"] for r in ROWS + more
    )
    # DeltaUpsert by name
    changed = [{"id": 1, "v": "new"}, {"id": 999, "v": "new"}]
    writer = DeltaUpsert(table=f"{db}.events", keys=["id"], checkpoint_location=str(tmp_path / "u"))
    query = (
        rows_stream(spark, tmp_path / "in3", changed)
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(tmp_path / "u"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None, str(query.exception())[:3000]
    got = {r.id: r.v for r in spark.table(f"{db}.events").collect()}
    assert len(got) == len(ROWS) + len(more) + 1 and got[1] == "new" and got[999] == "new"


def test_a_catalog_table_that_cannot_be_written_is_refused_at_start_naming_why(
    spark: SparkSession, tmp_path: Path
) -> None:
    from spark_chkpt.errors import CatalogTableError, ConfigError

    db = database(spark, tmp_path)
    spark.sql(f"CREATE TABLE {db}.events (id BIGINT, v STRING) USING delta")
    spark.sql(f"CREATE TABLE {db}.plain (id BIGINT, v STRING) USING parquet")
    spark.sql(f"CREATE VIEW {db}.recent AS SELECT * FROM {db}.events")
    df = rows_stream(spark, tmp_path / "in", ROWS)
    refusals = {
        f"{db}.missing": f"chkpt-delta: table {db}.missing does not exist in the session catalog",
        f"{db}.plain": f"chkpt-delta: table {db}.plain is a parquet table, not a Delta table",
        f"{db}.recent": f"chkpt-delta: table {db}.recent is a view, not a table",
    }
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "errors.md").read_text()
    for name, message in refusals.items():
        with pytest.raises(CatalogTableError) as raised:
            start_named(df, tmp_path / "chk", name)
        assert str(raised.value).startswith(message), str(raised.value)
        assert f"`{str(raised.value).replace(db, 'DB')}`" in page  # the errors page's row
    with pytest.raises(CatalogTableError, match="does not exist"):
        start_named(df, tmp_path / "chk", f"{db}.created", to_table=True)
    assert not spark.catalog.tableExists(f"{db}.created")  # nothing registered
    with pytest.raises(ConfigError, match="give either option path or option table"):
        (
            df.writeStream.format("chkpt-delta")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .option("table", f"{db}.events")
            .start(str(tmp_path / "t"))
        )
    with pytest.raises(CatalogTableError, match="is a parquet table"):
        DeltaUpsert(table=f"{db}.plain", keys=["id"], checkpoint_location=str(tmp_path / "u"))
    assert not (tmp_path / "chk").exists()  # no query started


def test_a_savepoint_rewind_of_a_databricks_default_table_keeps_row_ids_and_resumes_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 47: a rewind of a table delta-rs cannot restore (row tracking, in-commit
    timestamps, deletion vectors, column mapping) is the project's own RESTORE commit."""
    from spark_chkpt.delta.table.target import DeltaTarget
    from spark_chkpt.savepoint.manifest import create_savepoint
    from spark_chkpt.savepoint.restore import restore_savepoint

    ddl, tail, _ = OWN_COMMIT["databricks"]
    table, chk, folder = tmp_path / "table", tmp_path / "chk", tmp_path / "in"
    create(spark, table, ddl, tail)
    folder.mkdir()
    batches = [[{"id": 10 * b + i, "v": f"b{b}"} for i in range(5)] for b in range(3)]
    for b, rows in enumerate(batches):  # one file a batch, in this order (by mtime)
        (folder / f"{b}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(folder / f"{b}.json", (1_700_000_000 + b, 1_700_000_000 + b))

    def stream() -> DataFrame:
        return spark.readStream.schema(INPUT_DDL).option("maxFilesPerTrigger", 1).json(str(folder))

    assert run(stream(), table, chk) is None
    assert (chk / "commits" / "2").exists()  # three snapshots
    snap1 = sorted((r["id"], r["v"]) for r in batches[0] + batches[1])
    target = DeltaTarget(uri=str(table))
    app_id = json.loads((chk / "metadata").read_text())["id"]
    commit = target.find_txn_commit(target.require(), app_id=app_id, txn_version=1)
    assert commit is not None
    ids_at_1 = {
        (r.id, r.row_id)
        for r in spark.read.format("delta")
        .option("versionAsOf", commit.version)
        .load(str(table))
        .select("id", "_metadata.row_id")
        .collect()
    }
    assert sorted(i for i, _ in ids_at_1) == [i for i, _ in snap1]
    point = create_savepoint(
        checkpoint_location=str(chk), savepoint_dir=str(tmp_path / "sp"), batch_id=1
    )
    new = tmp_path / "new"
    restore_savepoint(savepoint=point.location, checkpoint_location=str(new), mode="rewind")
    got = delta(spark, table).select("id", "v", "_metadata.row_id").collect()
    assert sorted((r.id, r.v) for r in got) == snap1
    assert {(r.id, r.row_id) for r in got} == ids_at_1  # row ids unchanged
    last = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()[-1]
    assert last.operation == "RESTORE"
    # the query continues from snapshot 1: batch 2 again, once
    assert run(stream(), table, new) is None
    final = delta(spark, table).select("id", "v", "_metadata.row_id").collect()
    everything = sorted((r["id"], r["v"]) for rows in batches for r in rows)
    assert sorted((r.id, r.v) for r in final) == everything
    assert len({r.row_id for r in final}) == len(final)
    stamps = [
        h.timestamp
        for h in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
    ]
    assert stamps == sorted(set(stamps)), stamps  # in-commit timestamps: increasing


def run_complete(df: DataFrame, table: Path, chk: Path) -> BaseException | None:
    """``df`` aggregated by ``id`` (complete mode needs an aggregate) into ``table`` with
    outputMode("complete"): each batch replaces the table's rows."""
    from pyspark.sql import functions as F

    return write_complete(df.groupBy("id").agg(F.max("v").alias("v")), table, chk)


def write_complete(aggregated: DataFrame, table: Path, chk: Path) -> BaseException | None:
    """The streaming aggregate ``aggregated`` into ``table`` with outputMode("complete"),
    availableNow: the query's error (None: it ran to its end)."""
    query = (
        aggregated.writeStream.format("chkpt-delta")
        .outputMode("complete")
        .option("path", str(table))
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(Exception):
        query.awaitTermination(240)
    return query.exception()


def assert_row_tracking_and_timestamps(spark: SparkSession, table: Path, rows: int) -> None:
    """Row ids unique across the table's rows; DESCRIBE HISTORY's (in-commit)
    timestamps strictly increasing."""
    ids = delta(spark, table).select("_metadata.row_id").collect()
    assert len(ids) == rows == len({r.row_id for r in ids}), ids
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
    stamps = [h.timestamp for h in history]
    assert stamps == sorted(set(stamps)), stamps


@pytest.mark.parametrize("name", ["clustered", "databricks"])
def test_complete_mode_replaces_the_rows_of_a_table_delta_rs_refuses(
    spark: SparkSession, tmp_path: Path, name: str
) -> None:
    from spark_chkpt.delta.table.target import DeltaTarget

    ddl, tail, _ = OWN_COMMIT[name]
    table, chk, folder = tmp_path / "table", tmp_path / "chk", tmp_path / "in"
    create(spark, table, ddl, tail)
    spark.sql(f"INSERT INTO delta.`{table}` VALUES (-1, 'x'), (-2, 'y'), (-3, 'z')")
    # a deletion vector on the file (the Databricks table has them): its remove must
    # name it, else delta-spark keeps reading the file
    spark.sql(f"DELETE FROM delta.`{table}` WHERE id = -2")
    target = DeltaTarget(uri=str(table))
    # the second batch replaces the first's files, committed by spark-chkpt itself (on
    # the Databricks table; one batch keeps the clustered case short)
    batches = (ROWS[:12], ROWS[12:]) if name == "databricks" else (ROWS,)
    for batch, rows in enumerate(batches):
        df = rows_stream(spark, folder, rows)
        error = run_complete(df, table, chk)
        assert error is None, str(error)[:3000]
        expected = [(r["id"], r["v"]) for r in ROWS[: 12 if batch + 1 < len(batches) else None]]
        assert_same(delta(spark, table), spark.createDataFrame(expected, INPUT_DDL))
        got = target.rows(target.require()).select(["id", "v"]).to_pylist()
        assert sorted((r["id"], r["v"]) for r in got) == sorted(expected)
        if name == "databricks":  # row tracking and in-commit timestamps
            assert_row_tracking_and_timestamps(spark, table, len(expected))
    last = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()[-1]
    assert last.operation == "WRITE" and last.operationParameters["mode"] == "Overwrite"
    if name == "clustered":
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()
        assert detail is not None and list(detail["clusteringColumns"]) == ["id"]


UPSERT_DDL = "id BIGINT, v STRING, _delete BOOLEAN"
CDF = "'delta.enableChangeDataFeed'='true'"


@pytest.mark.parametrize("name", ["clustered", "databricks"])
def test_delta_upsert_merges_into_a_table_delta_rs_refuses_through_delta_spark(
    spark: SparkSession, tmp_path: Path, name: str
) -> None:
    """The session has delta-spark: DeltaUpsert's MERGE is delta-spark's, with the txn
    and the snapshot record in its commit (a replay commits nothing) and its change
    feed."""
    from spark_chkpt.delta.table.target import DeltaTarget
    from spark_chkpt.snapshot.record import SNAPSHOT_KEY

    ddl, tail, _ = OWN_COMMIT[name]
    tail = tail.replace("TBLPROPERTIES (", f"TBLPROPERTIES ({CDF}, ")
    tail = tail if CDF in tail else f"{tail} TBLPROPERTIES ({CDF})"
    table, chk, folder = tmp_path / "table", tmp_path / "chk", tmp_path / "in"
    create(spark, table, ddl, tail)
    spark.sql(f"INSERT INTO delta.`{table}` VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    tracked = name == "databricks"  # row tracking and in-commit timestamps
    before = row_ids(spark, table) if tracked else {}
    target = DeltaTarget(uri=str(table))
    start = target.require().version()
    batch = [
        {"id": 2, "v": "B", "_delete": False},
        {"id": 3, "v": None, "_delete": True},
        {"id": 4, "v": "d", "_delete": False},
    ]
    df = rows_stream(spark, folder, batch, UPSERT_DDL)
    error = upsert(df, table, chk, ["id"])
    assert error is None, str(error)[:3000]
    expected = [(1, "a"), (2, "B"), (4, "d")]
    assert_same(delta(spark, table), spark.createDataFrame(expected, INPUT_DDL))
    if tracked:
        after = row_ids(spark, table)
        # delta-spark's MERGE keeps the row ids of the rows it updates
        assert after[1] == before[1] and after[2] == before[2], (before, after)
        assert len(set(after.values())) == 3 and after[4] not in before.values()
    version = target.require().version()
    assert version == start + 1
    commit = target.find_txn_commit(target.require(), app_id=_app_id(chk), txn_version=0)
    assert commit is not None and commit.version == version
    assert commit.info.get("operation") == "MERGE" and SNAPSHOT_KEY in commit.info
    # a replayed batch 0 (a kill -9 before its commits/0): the txn is there, nothing
    # is committed
    (chk / "commits" / "0").unlink()
    assert upsert(df, table, chk, ["id"]) is None
    assert target.require().version() == version
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version)
        .load(str(table))
        .select("id", "_change_type")
        .collect()
    )
    assert sorted((r.id, r._change_type) for r in changes) == [
        (2, "update_postimage"),
        (2, "update_preimage"),
        (3, "delete"),
        (4, "insert"),
    ]
    if tracked:
        history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
        stamps = [h.timestamp for h in history]
        assert stamps == sorted(set(stamps)), stamps


def row_ids(spark: SparkSession, table: Path) -> dict[int, int]:
    rows = delta(spark, table).select("id", "_metadata.row_id").collect()
    return {r.id: r.row_id for r in rows}


def _app_id(chk: Path) -> str:
    """The query id of the checkpoint (DeltaUpsert's app id by default)."""
    return str(json.loads((chk / "metadata").read_text().splitlines()[0])["id"])


def test_optimize_vacuum_and_another_writer_between_runs_each_row_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The sink's Python workers keep the table across batches and queries
    (spark_chkpt/delta/log/state.py): delta-spark's OPTIMIZE, VACUUM and append between
    two runs of the query are read as new commits, and delta-spark reads every row once."""
    table, chk, src = tmp_path / "t", tmp_path / "chk", tmp_path / "in"
    create(spark, table)
    assert run(rows_stream(spark, src, [{"id": i, "v": "a"} for i in range(3)]), table, chk) is None
    assert (
        run(rows_stream(spark, src, [{"id": i, "v": "b"} for i in range(3, 5)]), table, chk) is None
    )
    spark.sql(f"OPTIMIZE delta.`{table}`")
    confs = ("retentionDurationCheck.enabled", "false"), ("vacuum.logging.enabled", "true")
    for key, value in confs:
        spark.conf.set(f"spark.databricks.delta.{key}", value)
    try:
        spark.sql(f"VACUUM delta.`{table}` RETAIN 0 HOURS")
    finally:
        for key, _ in confs:
            spark.conf.unset(f"spark.databricks.delta.{key}")
    spark.createDataFrame([(100, "other")], INPUT_DDL).write.format("delta").mode("append").save(
        str(table)
    )
    assert run(rows_stream(spark, src, [{"id": 5, "v": "c"}]), table, chk) is None
    got = sorted(r.id for r in spark.read.format("delta").load(str(table)).collect())
    assert got == [0, 1, 2, 3, 4, 5, 100]
    ops = [r.operation for r in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()]
    assert "OPTIMIZE" in ops and "VACUUM END" in ops
