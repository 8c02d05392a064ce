"""Tables delta-spark created with column mapping (``delta.columnMapping.mode`` =
``name`` / ``id``), written by ``chkpt-kafka`` → ``chkpt-delta`` and by ``DeltaUpsert``,
read back by delta-spark and by delta-rs (its DataFusion reader, which applies the
mapping) and compared with what ``format("delta")`` writes for the same input; the
staged files use the physical names and field ids, their statistics and partition
values the physical names; columns renamed, dropped and added (mergeSchema) by others
and by the sink read right."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable, QueryBuilder
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from spark_chkpt import DeltaUpsert
from tests.helpers import kafka_stream, produce

pytestmark = pytest.mark.integration

PHYSICAL = "delta.columnMapping.physicalName"
COLUMNS = "n BIGINT, part INT, off BIGINT, tag STRUCT<v: STRING, o: BIGINT>"


def create(
    spark: SparkSession, path: Path, *, mode: str, partitioned: bool, extra: str = ""
) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta "
        + ("PARTITIONED BY (part) " if partitioned else "")
        + f"TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}'{extra})"
    )


def source(spark: SparkSession, servers: str, topic: str, per_batch: int = 20) -> DataFrame:
    return kafka_stream(spark, servers, topic, maxOffsetsPerTrigger=str(per_batch)).selectExpr(
        "CAST(CAST(value AS STRING) AS long) AS n",
        "partition AS part",
        "offset AS off",
        "named_struct('v', CAST(value AS STRING), 'o', offset) AS tag",
    )


def run(df: DataFrame, chk: Path, *, fmt: str, table: Path, **options: str) -> None:
    writer = (
        df.writeStream.format(fmt)
        .option("path", str(table))
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start()
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()


def delta(spark: SparkSession, path: Path) -> DataFrame:
    return spark.read.format("delta").load(str(path))


def delta_rs_rows(path: Path) -> list[dict[str, Any]]:
    """delta-rs's read (DataFusion: the mapping applied), rows in one order."""
    table = DeltaTable(str(path))
    rows = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())
    return sorted(rows.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def same(a: DataFrame, b: DataFrame) -> None:
    columns = sorted(b.columns)
    assert_df_equality(
        a.select(*columns),
        b.select(*columns),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def log_actions(path: Path, kind: str) -> list[dict[str, Any]]:
    found = []
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if kind in action:
                found.append(action[kind])
    return found


def schema_fields(path: Path) -> dict[str, dict[str, Any]]:
    metadata = log_actions(path, "metaData")[-1]
    return {f["name"]: f for f in json.loads(metadata["schemaString"])["fields"]}


def check_physical_files(path: Path, *, chkpt_only: bool = True) -> None:
    """Every file the sink staged: physical names, field ids (nested too); its add
    action's statistics and partition values keyed by physical names."""
    fields = schema_fields(path)
    physical = {  # of every version's schema: older files hold columns dropped since
        f["metadata"][PHYSICAL]: f["metadata"]["delta.columnMapping.id"]
        for metadata in log_actions(path, "metaData")
        for f in json.loads(metadata["schemaString"])["fields"]
    }
    adds = [a for a in log_actions(path, "add") if ".chkpt." in a["path"] or not chkpt_only]
    assert adds
    for add in adds:
        schema = pq.read_schema(path / add["path"])
        for field in schema:
            assert field.name in physical, (field.name, add["path"])
            assert int(field.metadata[b"PARQUET:field_id"]) == physical[field.name]
        tag = fields["tag"]
        nested = {
            f["metadata"][PHYSICAL]: f["metadata"]["delta.columnMapping.id"]
            for f in tag["type"]["fields"]
        }
        struct = schema.field(tag["metadata"]["delta.columnMapping.physicalName"]).type
        assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in struct} == nested
        stats = json.loads(add["stats"])
        for key in ("minValues", "maxValues", "nullCount"):
            assert set(stats[key]) <= set(physical), stats[key]
        assert set(add["partitionValues"]) <= set(physical)


@pytest.mark.parametrize(
    ("mode", "partitioned", "extra"),
    [
        ("name", False, ""),
        ("id", True, ""),
        ("name", True, ", 'delta.enableDeletionVectors' = 'true'"),
    ],
    ids=["name", "id-partitioned", "name-partitioned-deletion-vectors"],
)
def test_chkpt_delta_writes_what_delta_spark_writes(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
    mode: str,
    partitioned: bool,
    extra: str,
) -> None:
    topic = make_topic(partitions=2)
    produce(producer, topic, [b"%d" % i for i in range(60)], partitions=2)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for table in (ours, theirs):
        create(spark, table, mode=mode, partitioned=partitioned, extra=extra)
    run(source(spark, bootstrap_servers, topic), tmp_path / "c1", fmt="chkpt-delta", table=ours)
    run(source(spark, bootstrap_servers, topic), tmp_path / "c2", fmt="delta", table=theirs)

    got = delta(spark, ours)
    assert got.where("n IS NULL OR tag.v IS NULL").count() == 0
    same(got, delta(spark, theirs))
    assert delta_rs_rows(ours) == delta_rs_rows(theirs)
    check_physical_files(ours)
    # Data skipping on the physical statistics: delta-spark prunes by them.
    assert delta(spark, ours).where("n >= 40").count() == 20
    assert delta(spark, ours).where("tag.o = 3").count() == 2


def test_delta_upsert_merges_into_a_column_mapped_table_with_deletion_vectors(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    """delta-rs's MERGE writes the physical names, field ids and statistics itself: the
    upserted table reads as delta-spark's own MERGE of the same batches does, also
    after delta-spark deleted rows with deletion vectors."""
    topic = make_topic()
    keys = [b"k%d" % (i % 7) for i in range(70)]
    produce(producer, topic, keys)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for table in (ours, theirs):
        spark.sql(
            f"CREATE TABLE delta.`{table}` (k STRING, count BIGINT) USING delta TBLPROPERTIES "
            "('delta.columnMapping.mode' = 'name', 'delta.enableDeletionVectors' = 'true')"
        )

    def counts() -> DataFrame:
        return (
            kafka_stream(spark, bootstrap_servers, topic, maxOffsetsPerTrigger="25")
            .selectExpr("CAST(value AS STRING) AS k")
            .groupBy("k")
            .count()
        )

    def spark_merge(batch: DataFrame, _: int) -> None:
        batch.createOrReplaceTempView("batch")
        batch.sparkSession.sql(
            f"MERGE INTO delta.`{theirs}` t USING batch s ON t.k = s.k "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )

    def run_both() -> None:
        upsert = DeltaUpsert(path=str(ours), keys=["k"], checkpoint_location=str(tmp_path / "c1"))
        for sink, chk in ((upsert, tmp_path / "c1"), (spark_merge, tmp_path / "c2")):
            query = (
                counts()
                .writeStream.outputMode("update")
                .foreachBatch(sink)
                .option("checkpointLocation", str(chk))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(240)
            assert query.exception() is None, query.exception()

    run_both()
    got = delta(spark, ours)
    assert got.where("k IS NULL OR count IS NULL").count() == 0
    same(got, delta(spark, theirs))
    for table in (ours, theirs):  # deletion vectors on both
        spark.sql(f"DELETE FROM delta.`{table}` WHERE k IN ('k1', 'k2')")
    produce(producer, topic, [b"k1", b"k3"])
    run_both()
    got = delta(spark, ours)
    same(got, delta(spark, theirs))
    assert {r.k: r["count"] for r in got.collect()} == {
        "k0": 10,
        "k1": 11,
        "k3": 11,
        "k4": 10,
        "k5": 10,
        "k6": 10,
    }
    assert delta_rs_rows(ours) == delta_rs_rows(theirs)
    fields = schema_fields(ours)
    physical = {f["metadata"][PHYSICAL] for f in fields.values()}
    for add in log_actions(ours, "add")[-2:]:
        assert set(pq.read_schema(ours / add["path"]).names) <= physical


def test_rename_drop_and_merge_schema_by_others_and_by_the_sink(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    topic = make_topic()
    table, chk = tmp_path / "table", tmp_path / "chk"
    create(spark, table, mode="name", partitioned=False)
    produce(producer, topic, [b"%d" % i for i in range(10)])
    run(source(spark, bootstrap_servers, topic), chk, fmt="chkpt-delta", table=table)

    # Renamed by delta-spark: the next batch, with the new name, lands in its column.
    spark.sql(f"ALTER TABLE delta.`{table}` RENAME COLUMN off TO position")
    produce(producer, topic, [b"%d" % i for i in range(10, 20)])
    renamed = source(spark, bootstrap_servers, topic).withColumnRenamed("off", "position")
    run(renamed, chk, fmt="chkpt-delta", table=table)
    got = delta(spark, table)
    assert got.count() == 20
    assert got.where("position IS NULL OR position != n").count() == 0

    # Dropped by delta-spark: a batch with the dropped name is a new column, refused
    # without mergeSchema ...
    spark.sql(f"ALTER TABLE delta.`{table}` DROP COLUMN part")
    dropped = schema_fields(table)
    assert "part" not in dropped
    produce(producer, topic, [b"%d" % i for i in range(20, 30)])
    with pytest.raises(StreamingQueryException, match=r"no column\(s\) part that the query"):
        run(renamed, chk, fmt="chkpt-delta", table=table)
    assert delta(spark, table).count() == 20
    # ... and added with mergeSchema: a new physical name and the next id, maxColumnId
    # advanced in the same metadata action; the dropped values stay dropped.
    before = log_actions(table, "metaData")[-1]["configuration"]
    run(renamed, chk, fmt="chkpt-delta", table=table, mergeSchema="true")
    after = schema_fields(table)
    part = after["part"]["metadata"]
    max_id = int(before["delta.columnMapping.maxColumnId"])
    assert part["delta.columnMapping.id"] == max_id + 1
    assert part[PHYSICAL].startswith("col-") and part[PHYSICAL] not in {
        f["metadata"][PHYSICAL] for f in dropped.values()
    }
    adding = [m for m in log_actions(table, "metaData") if "part" in m["schemaString"]][-1]
    assert adding["configuration"]["delta.columnMapping.maxColumnId"] == str(max_id + 1)
    got = delta(spark, table)
    assert got.count() == 30
    assert got.where("part IS NOT NULL").count() == 10  # only the new batch's rows
    assert got.where("n >= 20 AND part = 0").count() == 10
    check_physical_files(table)
    assert len(delta_rs_rows(table)) == 30


def test_kill_9_after_staging_on_a_column_mapped_table(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The job's driver SIGKILLs itself after batch 1 is staged (into random-prefix
    folders, physical names); the restart cleans those files and commits the batch
    once: delta-spark reads every event once, with its values."""
    from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, produce_page_views
    from tests.chains.test_exactly_once import (
        EVENTS,
        _killed,
        referenced,
        run_job,
        staged_files,
    )

    topic = make_topic(partitions=3)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=EVENTS)
    table = tmp_path / "table"
    spark.sql(
        f"CREATE TABLE delta.`{table}` ({PAGE_VIEW_SCHEMA_DDL}, kafka_partition int, "
        "kafka_offset long, kafka_timestamp timestamp) USING delta PARTITIONED BY (app) "
        "TBLPROPERTIES ('delta.columnMapping.mode' = 'id', "
        "'delta.enableDeletionVectors' = 'true')"
    )
    _killed(run_job(tmp_path, bootstrap_servers, topic, kill_at="after-staging@1"))
    staged_batch1 = {f for f in staged_files(table) if "part-b00001-" in f}
    assert staged_batch1 and not staged_batch1 & referenced(table)

    result = run_job(tmp_path, bootstrap_servers, topic)
    assert result.returncode == 0, result.stderr[-3000:]
    assert staged_files(table) == referenced(table)  # batch 1's first staging cleaned
    got = delta(spark, table)
    assert got.count() == EVENTS
    assert got.select("event_id").distinct().count() == EVENTS
    assert got.where("app IS NULL OR user_id IS NULL OR kafka_offset IS NULL").count() == 0
    assert len(delta_rs_rows(table)) == EVENTS


def test_savepoint_rewind_of_a_column_mapped_table_reads_back(
    spark: SparkSession,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    from spark_chkpt.savepoint.manifest import create_savepoint
    from spark_chkpt.savepoint.restore import restore_savepoint

    topic = make_topic()
    produce(producer, topic, [b"%d" % i for i in range(40)])
    table, chk = tmp_path / "table", tmp_path / "chk"
    create(spark, table, mode="name", partitioned=True)
    run(source(spark, bootstrap_servers, topic, 10), chk, fmt="chkpt-delta", table=table)
    point = create_savepoint(
        checkpoint_location=str(chk), savepoint_dir=str(tmp_path / "sp"), batch_id=1
    )
    new = tmp_path / "new"
    restore_savepoint(savepoint=point.location, checkpoint_location=str(new), mode="rewind")
    got = delta(spark, table)
    assert sorted(r.n for r in got.collect()) == list(range(20))
    assert got.where("tag.v IS NULL OR off IS NULL").count() == 0
    run(source(spark, bootstrap_servers, topic, 10), new, fmt="chkpt-delta", table=table)
    got = delta(spark, table)
    assert sorted(r.n for r in got.collect()) == list(range(40))
    assert len(delta_rs_rows(table)) == 40
