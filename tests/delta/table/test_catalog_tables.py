"""Tables named as users name them (spark_chkpt/delta/table/catalog.py): the name's parts, the
refusal of a table in another catalog, the chkpt-delta options that name a table, and
``deadLetterTable`` resolved by a real SparkSession (the other names a real session
resolves: test_delta_features.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.delta.table.catalog import check_catalog, name_parts
from spark_chkpt.errors import CatalogTableError, ConfigError
from tests.delta.test_delta_features import INPUT_DDL, ROWS, assert_same, database, rows_stream


def test_name_parts() -> None:
    assert name_parts("events") == ["events"]
    assert name_parts("db.events") == ["db", "events"]
    assert name_parts("spark_catalog.db.events") == ["spark_catalog", "db", "events"]
    assert name_parts("`my.db`.`ev``ts`") == ["my.db", "ev`ts"]
    for bad in ("", "db.", "a.b.c.d", "`db.events"):
        with pytest.raises(ConfigError, match="option 'table'"):
            name_parts(bad)


def test_a_table_of_another_catalog_is_refused_naming_it() -> None:
    assert check_catalog("db.events", current_catalog="spark_catalog", writer="x") == [
        "db",
        "events",
    ]
    with pytest.raises(CatalogTableError) as raised:
        check_catalog("main.db.events", current_catalog="spark_catalog", writer="chkpt-delta")
    message = str(raised.value)
    assert message.startswith("chkpt-delta: table main.db.events is in catalog 'main'")
    assert "Unity Catalog" in message and "Nothing was staged." in message
    # a two-part name in a session whose current catalog is Unity Catalog's
    with pytest.raises(CatalogTableError, match="in catalog 'main'"):
        check_catalog("db.events", current_catalog="main", writer="chkpt-delta")


def base(tmp_path: Path, **options: str) -> dict[str, str]:
    return {"checkpointlocation": str(tmp_path / "chk"), **options}


def test_the_sink_takes_the_location_the_driver_resolved(tmp_path: Path) -> None:
    config = DeltaSinkConfig.from_options(
        base(
            tmp_path,
            table="db.events",
            tablelocation=str(tmp_path / "wh" / "events"),
            deadlettertable="db.bad",
            deadlettertablelocation=str(tmp_path / "wh" / "bad"),
        )
    )
    assert config.path.endswith("/wh/events")
    assert config.dead_letter_path is not None and config.dead_letter_path.endswith("/wh/bad")


def test_path_and_table_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        DeltaSinkConfig.from_options(
            base(tmp_path, path=str(tmp_path / "t"), table="db.events", tablelocation="/x")
        )
    assert str(raised.value) == (
        "option 'table' = 'db.events': give either option path or option table, not both"
    )
    with pytest.raises(ConfigError, match="deadLetterPath or option deadLetterTable"):
        DeltaSinkConfig.from_options(
            base(
                tmp_path,
                path=str(tmp_path / "t"),
                deadletterpath=str(tmp_path / "d"),
                deadlettertable="db.bad",
            )
        )


def test_a_table_the_driver_did_not_resolve_names_register(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        DeltaSinkConfig.from_options(base(tmp_path, table="db.events"))
    assert "spark_chkpt.register(spark) before start()" in str(raised.value)


def test_delta_upsert_takes_path_or_table_and_needs_the_session_for_a_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql import SparkSession

    from spark_chkpt import DeltaUpsert

    # No session in this process (an earlier test of the same worker may have left one
    # active: the refusal is about a process without one).
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    chk = str(tmp_path / "chk")
    with pytest.raises(ConfigError, match="give either path or table, not both"):
        DeltaUpsert(
            path=str(tmp_path / "t"), table="db.events", keys=["id"], checkpoint_location=chk
        )
    with pytest.raises(ConfigError, match="resolved with the active SparkSession"):
        DeltaUpsert(table="db.events", keys=["id"], checkpoint_location=chk)


@pytest.mark.integration
def test_dead_letters_go_to_a_catalog_table_named_by_dead_letter_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    db = database(spark, tmp_path)
    spark.sql(f"CREATE TABLE {db}.events (id BIGINT, v STRING) USING delta")
    spark.sql(f"CREATE TABLE {db}.bad (v STRING, error STRING) USING delta")
    letter = F.struct(F.col("v"), F.lit("id too big").alias("error"))
    df = rows_stream(spark, tmp_path / "in", ROWS).withColumn(
        "_dead_letter", F.when(F.col("id") >= 15, letter)
    )
    query = (
        df.writeStream.format("chkpt-delta")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .option("deadLetterTable", f"{db}.bad")
        .trigger(availableNow=True)
        .toTable(f"{db}.events")
    )
    query.awaitTermination(240)
    assert query.exception() is None, str(query.exception())[:3000]
    good = spark.createDataFrame([(r["id"], r["v"]) for r in ROWS if r["id"] < 15], INPUT_DDL)
    assert_same(spark.table(f"{db}.events"), good)
    bad = [(f"v{i}", "id too big") for i in range(15, len(ROWS))]
    assert_same(spark.table(f"{db}.bad"), spark.createDataFrame(bad, "v STRING, error STRING"))
