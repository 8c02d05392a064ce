"""DeltaUpsert's MERGE through delta-spark (spark_chkpt/delta/upsert/spark_merge.py): the
statement and the session check, without a JVM. The MERGE itself on real tables:
tests/delta/test_delta_features.py."""

from __future__ import annotations

from typing import Any

import pytest

from spark_chkpt.delta.upsert.merge import MergeFigures
from spark_chkpt.delta.upsert.spark_merge import has_delta_spark, merge_sql


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Session:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = _Conf(values)


def test_the_merge_matches_keys_null_safely_and_never_writes_the_delete_column() -> None:
    sql = merge_sql(
        table_path="/data/t`x", view="v", columns=["id", "v"], keys=["id"], delete="_delete"
    )
    assert sql.startswith("MERGE INTO delta.`/data/t``x` AS t USING `v` AS s ON t.`id` <=> s.`id`")
    assert "WHEN MATCHED AND s.`_delete` = true THEN DELETE" in sql
    assert (
        "WHEN MATCHED AND s.`_delete` IS NOT TRUE THEN UPDATE SET t.`id` = s.`id`, t.`v` = s.`v`"
        in sql
    )
    assert (
        "WHEN NOT MATCHED AND s.`_delete` IS NOT TRUE THEN "
        "INSERT (`id`, `v`) VALUES (s.`id`, s.`v`)" in sql
    )
    plain = merge_sql(table_path="/t", view="v", columns=["a", "b"], keys=["a", "b"], delete=None)
    assert "ON t.`a` <=> s.`a` AND t.`b` <=> s.`b`" in plain and "DELETE" not in plain


def test_delta_spark_is_found_by_its_extension_or_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    assert not has_delta_spark(None)
    assert not has_delta_spark(_Session({}))
    ext = "org.x.Other,io.delta.sql.DeltaSparkSessionExtension"
    assert has_delta_spark(_Session({"spark.sql.extensions": ext}))
    catalog = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert has_delta_spark(_Session({"spark.sql.catalog.spark_catalog": catalog}))
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    assert has_delta_spark(_Session({}))


def test_merge_figures_read_delta_spark_metrics_as_delta_rs_metrics() -> None:
    info = {
        "operation": "MERGE",
        "operationMetrics": {
            "numSourceRows": "3",
            "numTargetRowsInserted": "1",
            "numTargetRowsUpdated": "1",
            "numTargetRowsDeleted": "1",
        },
    }
    assert MergeFigures.from_commit_info(info) == MergeFigures(
        source_rows=3, inserted=1, updated=1, deleted=1
    )
