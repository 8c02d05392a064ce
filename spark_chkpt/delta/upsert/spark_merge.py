"""``DeltaUpsert``'s MERGE through delta-spark, for tables delta-rs refuses to commit to.

delta-rs 1.x commits to no table whose protocol lists rowTracking, domainMetadata
(liquid clustering), inCommitTimestamp or typeWidening: the Databricks default table
among them. ``DeltaUpsert`` runs in ``foreachBatch`` on the driver, so it has the
query's SparkSession; when that session has delta-spark (its SQL extension or catalog
configured, or a Databricks runtime), the batch's MERGE runs there: ``MERGE INTO
delta.`<table>``` with the staged Parquet files as the source. delta-spark then writes
what its MERGE writes on such a table (row ids kept for updated rows, new ones above the
high-water mark, in-commit timestamps, domains, deletion vectors, change data files).

The batch's ``txn(appId, N)`` lands in the same commit through delta-spark's idempotent
DML session confs ``spark.databricks.delta.write.txnAppId`` / ``txnVersion``
(``MergeIntoCommand``: ``hasBeenExecuted`` skips a MERGE whose txn the table already
holds, ``createSetTransaction`` adds the txn to its commit), and the snapshot record
in commitInfo's ``userMetadata`` (``spark.databricks.delta.commitInfo.userMetadata``, a
JSON object of the project's keys; :func:`~spark_chkpt.delta.table.reader.project_info` reads
it back). The confs are set for the MERGE only and restored, on the session of the
batch's DataFrame: Spark runs each streaming query on a clone of the user's session, so
no other query's writes see them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def has_delta_spark(spark: Any) -> bool:
    """Whether ``spark`` (a SparkSession; None: none) runs Delta SQL: delta-spark's
    extension or catalog configured, or a Databricks runtime."""
    if spark is None:
        return False
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return True
    conf = spark.conf
    extensions = str(conf.get("spark.sql.extensions", "") or "")
    catalog = str(conf.get("spark.sql.catalog.spark_catalog", "") or "")
    return _EXTENSION in extensions or catalog == _CATALOG


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def merge_sql(
    *, table_path: str, view: str, columns: Sequence[str], keys: Sequence[str], delete: str | None
) -> str:
    """The MERGE statement of a keyed upsert of ``view`` into the Delta table at
    ``table_path`` (pure): keys match null-safely; with ``delete`` a source row whose
    flag is true deletes the matched row, any other replaces it or is inserted."""
    on = " AND ".join(f"t.{_ident(k)} <=> s.{_ident(k)}" for k in keys)
    sets = ", ".join(f"t.{_ident(c)} = s.{_ident(c)}" for c in columns)
    names = ", ".join(_ident(c) for c in columns)
    values = ", ".join(f"s.{_ident(c)}" for c in columns)
    target = "delta." + _ident(table_path)
    sql = f"MERGE INTO {target} AS t USING {_ident(view)} AS s ON {on} "
    insert = f"INSERT ({names}) VALUES ({values})"
    if delete is None:
        return sql + f"WHEN MATCHED THEN UPDATE SET {sets} WHEN NOT MATCHED THEN {insert}"
    flag = f"s.{_ident(delete)}"
    return sql + (
        f"WHEN MATCHED AND {flag} = true THEN DELETE "
        f"WHEN MATCHED AND {flag} IS NOT TRUE THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED AND {flag} IS NOT TRUE THEN {insert}"
    )


def merge_through_delta_spark(
    spark: Any,
    *,
    table_path: str,
    files: Sequence[str],
    columns: Sequence[str],
    keys: Sequence[str],
    delete: str | None,
    app_id: str,
    version: int,
    metadata: Mapping[str, Any],
) -> None:
    """One delta-spark MERGE of the staged Parquet ``files`` (absolute paths) into the
    table, with ``txn(app_id, version)`` and ``metadata`` (userMetadata) in its commit;
    nothing is committed if the table already holds ``txn(app_id) >= version``."""
    view = f"chkpt_upsert_{abs(hash((app_id, version))):x}"
    spark.read.parquet(*files).createOrReplaceTempView(view)
    confs = {
        TXN_APP_ID: app_id,
        TXN_VERSION: str(version),
        USER_METADATA: json.dumps(dict(metadata), separators=(",", ":")),
    }
    before = {k: spark.conf.get(k, None) for k in confs}
    try:
        for key, value in confs.items():
            spark.conf.set(key, value)
        spark.sql(
            merge_sql(table_path=table_path, view=view, columns=columns, keys=keys, delete=delete)
        ).collect()
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
        spark.catalog.dropTempView(view)
