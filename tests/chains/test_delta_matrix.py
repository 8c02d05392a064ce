"""The Delta feature matrix through kill -9 (issue 47): one "production" table that
delta-spark creates with every table feature this project implements at once
(partitioned, column mapping ``name``, NOT NULL, a CHECK constraint, a generated column,
deletion vectors, change data feed, v2 checkpoints every two commits, a TIMESTAMP_NTZ
column) and the combination a Databricks workspace gives new tables on top (deletion
vectors + in-commit timestamps + row tracking + column mapping ``name``:
DATABRICKS_DEFAULTS), written by each writer as a real job killed with SIGKILL (the
whole process tree, from inside: :mod:`spark_chkpt.failpoints`) at the protocol's named
steps and restarted until done:

* ``chkpt-delta``: the real job (``python -m spark_chkpt.jobs.kafka_to_delta``): delta-rs
  refuses to commit to the table, so each batch is the project's own commit
  (:mod:`spark_chkpt.delta.log.commit`), killed right after its ``_delta_log/<v>.json``
  (``after-own-commit``) and after Spark's ``commits/N`` (``after-commit-log``);
* ``DeltaUpsert``: a user's ``foreachBatch`` job (``tests/user_scripts/upsert_job.py
  --delta-spark``, its session with delta-spark as a Databricks job's) whose input
  updates and deletes rows by key: each batch's MERGE is delta-spark's
  (:mod:`spark_chkpt.delta.upsert.spark_merge`, the batch's txn and snapshot record in
  its commit), killed right after that MERGE commit (``after-delta-commit``) and, on
  the restart that finds it in the table and commits nothing, after Spark's
  ``commits/N`` (``after-commit-log``).

Then delta-spark reads the table and it equals (chispa) what delta-spark itself writes for
the same input into a twin table created the same way (``format("delta")`` appends; its
own MERGE); every key once; delta-rs reads the same rows; both tables' change feeds agree
on the final state's keys; row ids are present and unique (kept by updated rows, as
delta-spark's MERGE keeps them) and in-commit timestamps increase. One job run per
kill, one chain per writer (CI time).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tests.chains.test_exactly_once import run_job, snapshots, spark_committed, txn_version
from tests.helpers import produce, user_env

pytestmark = pytest.mark.fault

COLUMNS = "id BIGINT, app STRING, v STRING, n BIGINT, at TIMESTAMP_NTZ"
# The table: every implemented feature that delta-spark accepts together.
TABLE_DDL = (
    "id BIGINT NOT NULL, app STRING, v STRING, n BIGINT, "
    "n2 BIGINT GENERATED ALWAYS AS (n * 2), at TIMESTAMP_NTZ"
)
TABLE_TAIL = (
    "PARTITIONED BY (app) TBLPROPERTIES ("
    "'delta.columnMapping.mode'='name', 'delta.enableDeletionVectors'='true', "
    "'delta.enableChangeDataFeed'='true', 'delta.checkpointPolicy'='v2', "
    "'delta.checkpointInterval'='2')"
)
# What a Databricks workspace turns on for new tables, on top of the above.
DATABRICKS_DEFAULTS = "'delta.enableRowTracking'='true', 'delta.enableInCommitTimestamps'='true', "
UPSERT_SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "upsert_job.py"


def create_production_table(
    spark: SparkSession, path: Path, *, databricks_defaults: bool = False
) -> None:
    """The table as delta-spark creates it, with a row deleted by a deletion vector
    (``databricks_defaults``: with row tracking and in-commit timestamps too)."""
    tail = TABLE_TAIL
    if databricks_defaults:
        tail = tail.replace("TBLPROPERTIES (", f"TBLPROPERTIES ({DATABRICKS_DEFAULTS}")
    spark.sql(f"CREATE TABLE delta.`{path}` ({TABLE_DDL}) USING delta {tail}")
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT nonneg CHECK (n >= 0)")
    spark.sql(
        f"INSERT INTO delta.`{path}` (id, app, v, n, at) VALUES "
        "(-1, 'app0', 'old', 1, TIMESTAMP_NTZ'2026-01-01 00:00:00'), "
        "(-2, 'app0', 'old', 2, TIMESTAMP_NTZ'2026-01-01 00:00:00')"
    )
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = -1")


def record(i: int, key: int, version: str, **extra: Any) -> bytes:
    value = {
        "id": key,
        "app": f"app{key % 3}",
        "v": version,
        "n": i,
        "at": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}.{i:06d}",
        **extra,
    }
    return json.dumps(value).encode()


def parsed(spark: SparkSession, values: list[bytes], ddl: str) -> DataFrame:
    """The records' values parsed as the jobs parse them."""
    raw = spark.createDataFrame([(v.decode(),) for v in values], "value STRING")
    return raw.select(F.from_json("value", ddl).alias("r")).select("r.*")


def delta(spark: SparkSession, path: Path) -> DataFrame:
    return spark.read.format("delta").load(str(path))


def assert_same_table(spark: SparkSession, table: Path, twin: Path) -> list[Any]:
    """delta-spark reads ``table`` as ``twin``; every key once; delta-rs reads the same
    rows; the change feeds agree on the final keys. Returns the rows."""
    got, expected = delta(spark, table), delta(spark, twin)
    columns = sorted(expected.columns)
    assert_df_equality(
        got.select(*columns),
        expected.select(*columns),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    rows = got.select(*columns).collect()
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)), "a key more than once"
    # delta-rs's read through DataFusion (its to_pyarrow_table refuses the columnMapping,
    # deletionVectors and v2Checkpoint reader features)
    query = QueryBuilder().register("t", DeltaTable(str(table)))
    arrow = pa.table(query.execute("SELECT * FROM t").read_all()).select(columns)
    assert sorted(tuple(r.values()) for r in arrow.to_pylist()) == sorted(tuple(r) for r in rows)
    final = set(ids)
    assert final_keys_of_change_feed(spark, table) == final
    assert final_keys_of_change_feed(spark, twin) == final
    return rows


def final_keys_of_change_feed(spark: SparkSession, path: Path) -> set[int]:
    """The keys the change feed leaves: each key's last change (by commit version) is an
    insert or an update's post-image."""
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(str(path))
        .where("_change_type != 'update_preimage'")
        .select("id", "_change_type", "_commit_version")
        .collect()
    )
    last: dict[int, tuple[int, str]] = {}
    for change in changes:
        seen = last.get(change.id)
        if seen is None or change._commit_version >= seen[0]:
            last[change.id] = (change._commit_version, change._change_type)
    return {key for key, (_, kind) in last.items() if kind != "delete"}


def log_commits(path: Path) -> list[list[dict[str, Any]]]:
    """The table's JSON commits, by version (none missing)."""
    log = path / "_delta_log"
    versions = sorted(int(p.stem) for p in log.glob("*.json") if p.stem.isdigit())
    assert versions == list(range(len(versions))), versions
    return [
        [json.loads(line) for line in (log / f"{v:020d}.json").read_text().splitlines()]
        for v in versions
    ]


def assert_row_tracking(spark: SparkSession, path: Path, *, engine: str) -> None:
    """delta-spark reads a row id for every row, each once; every commit has an
    in-commit timestamp, strictly increasing; the commits of ``engine`` (its
    ``engineInfo``) are there and are what set the row ids of their files."""
    ids = [r.row_id for r in delta(spark, path).select("_metadata.row_id").collect()]
    assert None not in ids and len(ids) == len(set(ids)), "row ids not unique"
    stamps, ours = [], 0
    for version, actions in enumerate(log_commits(path)):
        info = actions[0]["commitInfo"]  # first, with in-commit timestamps on
        stamps.append(info["inCommitTimestamp"])
        if str(info.get("engineInfo", "")).startswith(engine):
            adds = [a["add"] for a in actions if "add" in a]
            assert all("baseRowId" in a for a in adds), f"version {version}"
            ours += 1
    assert all(a < b for a, b in itertools.pairwise(stamps)), stamps
    assert ours, f"no commit by {engine}"


def _killed(result: subprocess.CompletedProcess[str], point: str) -> None:
    assert result.returncode == -signal.SIGKILL, (
        f"expected SIGKILL at {point}, got {result.returncode}\n{result.stderr[-3000:]}"
    )


# -- chkpt-delta -----------------------------------------------------------------------

EVENTS, PER_BATCH = 450, 150  # 3 partitions, 3 batches


def test_chkpt_delta_writes_the_production_table_through_kill_9(
    spark: SparkSession,
    tmp_path: Path,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
) -> None:
    table, twin = tmp_path / "table", tmp_path / "twin"
    for path in (table, twin):
        create_production_table(spark, path, databricks_defaults=True)
    topic = make_topic(partitions=3)
    values = [record(i, i, "v0") for i in range(EVENTS)]
    produce(producer, topic, values, partitions=3)
    extra = [
        "--schema",
        COLUMNS,
        "--max-offsets-per-trigger",
        str(PER_BATCH),
        "--set",
        "job.kafkaColumns=false",
    ]

    def run(kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_job(tmp_path, bootstrap_servers, topic, kill_at=kill_at, extra=extra)

    # The own commit of batch 1 written (_delta_log/<v>.json), nothing after it: no log
    # upkeep, no snapshot record, no commits/1. (A kill before the commit file, at
    # after-staging, is the same state as any other: tests/chains/test_exactly_once.py.)
    _killed(run("after-own-commit@1"), "after-own-commit@1")
    assert txn_version(tmp_path) == 1 and snapshots(tmp_path) == [0]
    assert spark_committed(tmp_path) == [0]
    # The restart finds batch 1 in the table (its snapshot record written from the
    # commit), writes commits/1 and dies: batch 2 is not planned twice.
    _killed(run("after-commit-log@1"), "after-commit-log@1")
    assert spark_committed(tmp_path)[:2] == [0, 1] and snapshots(tmp_path)[:2] == [0, 1]
    done = run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert snapshots(tmp_path) == [0, 1, 2] and txn_version(tmp_path) == 2

    parsed(spark, values, COLUMNS).write.format("delta").mode("append").save(str(twin))
    rows = assert_same_table(spark, table, twin)
    assert sorted(r.id for r in rows) == [-2, *range(EVENTS)]
    assert all(r.n2 == r.n * 2 for r in rows)  # the generated column computed
    # the table's features are the ones delta-spark created it with
    props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{table}`").collect()}
    assert props["delta.columnMapping.mode"] == "name"
    assert props["delta.checkpointPolicy"] == "v2"
    assert props["delta.enableRowTracking"] == props["delta.enableInCommitTimestamps"] == "true"
    assert_row_tracking(spark, table, engine="spark-chkpt/")
    assert_row_tracking(spark, twin, engine="Apache-Spark/")
    checkpoints = sorted((table / "_delta_log").glob("*.checkpoint*.parquet"))
    assert checkpoints, "no checkpoint"
    for checkpoint in checkpoints:  # v2: each holds its checkpointMetadata action
        actions = pq.read_table(checkpoint, columns=["checkpointMetadata"])
        assert actions.column(0).null_count < actions.num_rows, checkpoint.name


# -- DeltaUpsert -----------------------------------------------------------------------

KEYS = 60  # one topic partition; batch k is round k: each key at most once per batch


def upsert_rounds() -> list[list[bytes]]:
    """Round 0 inserts keys 0..59; round 1 deletes every 4th key and updates the others;
    round 2 updates keys 0..29 (inserting the deleted ones again) and deletes a key
    never written."""
    rounds: list[list[bytes]] = []
    i = 0
    for number, keys in enumerate((range(KEYS), range(KEYS), range(30))):
        values = []
        for key in keys:
            delete = number == 1 and key % 4 == 0
            values.append(record(i, key, f"r{number}", _delete=delete))
            i += 1
        rounds.append(values)
    rounds[2].append(record(i, 1000, "r2", _delete=True))
    return rounds


def twin_merge(spark: SparkSession, twin: Path, values: list[bytes]) -> None:
    """delta-spark's own MERGE of one round, by key, ``_delete`` deleting."""
    parsed(spark, values, f"{COLUMNS}, _delete BOOLEAN").createOrReplaceTempView("round")
    names = ("id", "app", "v", "n", "at")
    spark.sql(
        f"MERGE INTO delta.`{twin}` t USING round s ON t.id = s.id "
        "WHEN MATCHED AND s._delete THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {', '.join(f't.{c} = s.{c}' for c in names)} "
        f"WHEN NOT MATCHED AND NOT s._delete THEN INSERT ({', '.join(names)}) "
        f"VALUES ({', '.join(f's.{c}' for c in names)})"
    )
    spark.catalog.dropTempView("round")


def test_delta_upsert_merges_into_the_production_table_through_kill_9(
    spark: SparkSession,
    tmp_path: Path,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
) -> None:
    table, twin = tmp_path / "table", tmp_path / "twin"
    for path in (table, twin):
        create_production_table(spark, path, databricks_defaults=True)
    created = len(log_commits(table))  # create, constraint, insert, delete
    topic = make_topic(partitions=1)
    rounds = upsert_rounds()
    produce(producer, topic, [v for values in rounds for v in values], partitions=1)
    chk = tmp_path / "chk"
    jars = os.environ.get("SPARK_CHKPT_JARS_DIR")

    def run(kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
        env = user_env(
            **({"SPARK_CHKPT_JARS_DIR": jars} if jars else {}),
            **({"SPARK_CHKPT_KILL_AT": kill_at} if kill_at else {}),
        )
        return subprocess.run(
            [
                sys.executable,
                str(UPSERT_SCRIPT),
                bootstrap_servers,
                topic,
                str(table),
                str(chk),
                f"{COLUMNS}, _delete BOOLEAN",
                str(KEYS),
                "--delta-spark",
            ],
            cwd=tmp_path,
            env=env,
            start_new_session=True,
            capture_output=True,
            text=True,
            timeout=420,
        )

    # Batch 1's MERGE committed by delta-spark (its txn and snapshot record in the
    # commit), neither the snapshot store nor Spark's commits/1 written.
    _killed(run("after-delta-commit@1"), "after-delta-commit@1")
    assert txn_version(tmp_path) == 1 and spark_committed(tmp_path) == [0]
    assert snapshots(tmp_path) == [0]
    merged = len(log_commits(table))
    # The restart replays batch 1: the table's txn says it is in, nothing is committed
    # (no MERGE runs again), its record comes from the commit; commits/1, then the kill.
    _killed(run("after-commit-log@1"), "after-commit-log@1")
    assert spark_committed(tmp_path)[:2] == [0, 1] and snapshots(tmp_path)[:2] == [0, 1]
    assert len(log_commits(table)) == merged
    done = run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert snapshots(tmp_path) == [0, 1, 2] and txn_version(tmp_path) == 2

    # every batch one MERGE of delta-spark's (spark_merge), with the batch's txn
    app_id = json.loads((chk / "metadata").read_text())["id"]
    batches = log_commits(table)[created:]
    assert [c[0]["commitInfo"]["operation"] for c in batches] == ["MERGE"] * 3
    assert all(c[0]["commitInfo"]["engineInfo"].startswith("Apache-Spark/") for c in batches)
    txns = [[(a["txn"]["appId"], a["txn"]["version"]) for a in c if "txn" in a] for c in batches]
    assert txns == [[(app_id, 0)], [(app_id, 1)], [(app_id, 2)]]

    for values in rounds:
        twin_merge(spark, twin, values)
    rows = assert_same_table(spark, table, twin)
    deleted = {k for k in range(30, KEYS) if k % 4 == 0}
    assert sorted(r.id for r in rows) == sorted({-2, *range(KEYS)} - deleted)
    assert all(r.n2 == r.n * 2 for r in rows)
    for path in (table, twin):
        assert_row_tracking(spark, path, engine="Apache-Spark/")
        assert_row_ids_kept(spark, path, round_0=created)
    # the change files: every update and delete of DeltaUpsert's MERGEs is in the feed
    kinds = {
        r._change_type: r["count"]
        for r in spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", created)
        .load(str(table))
        .groupBy("_change_type")
        .count()
        .collect()
    }
    # inserts: round 0's 60 and round 2's 8 again; updates: 45 and 22; deletes: 15
    assert kinds == {"insert": 68, "update_preimage": 67, "update_postimage": 67, "delete": 15}


def assert_row_ids_kept(spark: SparkSession, path: Path, *, round_0: int) -> None:
    """Row tracking through the rounds, as delta-spark's MERGE keeps it: a row updated
    (never deleted) keeps the row id it had after round 0 (table version ``round_0``);
    a key deleted and inserted again gets a new one."""

    def row_ids(version: int | None = None) -> dict[int, int]:
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        rows = reader.load(str(path)).select("id", "_metadata.row_id").collect()
        return {r.id: r.row_id for r in rows}

    before, after = row_ids(round_0), row_ids()
    kept = [k for k in range(KEYS) if k % 4 != 0] + [-2]
    assert {k: after[k] for k in kept} == {k: before[k] for k in kept}, path.name
    again = range(0, 30, 4)
    assert all(after[k] not in before.values() for k in again), path.name
