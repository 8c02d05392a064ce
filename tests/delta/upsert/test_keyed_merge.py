"""The upsert's keyed MERGE (spark_chkpt.delta.upsert.merge) on real delta-rs tables in
``tmp_path``, no Spark: null keys match null keys (issue 24, hole 5), and a key staged
twice in one batch refuses the batch before anything is written, whether the key is new
or already in the table (issue 24, the duplicate-key rule)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.delta.upsert.merge import STAGING_DIR, KeyedMerge
from spark_chkpt.errors import DuplicateKeyError

SCHEMA = pa.schema([("app", pa.string()), ("count", pa.int64())])
WITH_DELETE = SCHEMA.append(pa.field("_delete", pa.bool_()))


class Table:
    """A counts table keyed by ``app`` and the batches staged into it."""

    def __init__(
        self,
        root: Path,
        rows: list[dict[str, object]],
        *,
        schema: pa.Schema = SCHEMA,
        configuration: dict[str, str | None] | None = None,
    ) -> None:
        self.root = root
        table = pa.Table.from_pylist(rows, schema=schema)
        write_deltalake(str(root), table, configuration=configuration)
        self.target = DeltaTarget(uri=str(root))
        self.merger = KeyedMerge(target=self.target, keys=["app"], delete_column="_delete")
        self.batch = 0

    def upsert(self, rows: list[dict[str, object]], *, schema: pa.Schema = SCHEMA) -> None:
        self.batch += 1
        (self.root / STAGING_DIR).mkdir(exist_ok=True)
        name = f"{STAGING_DIR}/batch-{self.batch}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), str(self.root / name))
        self.merger.merge(
            DeltaTable(str(self.root)),
            files=[name],
            schema=schema,
            app_id="app-1",
            version=self.batch,
            metadata={},
            batch_size=1024,
        )

    def rows(self) -> list[tuple[object, object]]:
        table = DeltaTable(str(self.root)).to_pyarrow_table()
        return sorted(
            ((r["app"], r["count"]) for r in table.to_pylist()), key=lambda r: (r[0] or "", r[1])
        )


def test_a_null_key_is_updated_not_inserted_again(tmp_path: Path) -> None:
    """groupBy("app").count() with null apps: each batch's count of app=None replaces
    the row, as any other key's does."""
    table = Table(tmp_path / "counts", [{"app": "a", "count": 1}, {"app": None, "count": 2}])
    table.upsert([{"app": None, "count": 5}, {"app": "a", "count": 3}])
    table.upsert([{"app": None, "count": 9}])
    assert table.rows() == [(None, 9), ("a", 3)]
    assert DeltaTable(str(tmp_path / "counts")).transaction_version("app-1") == 2


def test_a_delete_on_a_null_key_deletes_its_row(tmp_path: Path) -> None:
    table = Table(tmp_path / "counts", [{"app": "a", "count": 1}, {"app": None, "count": 2}])
    table.upsert([{"app": None, "count": 0, "_delete": True}], schema=WITH_DELETE)
    assert table.rows() == [("a", 1)]


@pytest.mark.parametrize("key", ["new", "a", None], ids=["new key", "key in the table", "null key"])
def test_a_key_twice_in_one_batch_is_refused_before_anything_is_written(
    tmp_path: Path, key: str | None
) -> None:
    """One rule whether the key is new (delta-rs would insert it twice) or in the table
    (delta-rs fails on "multiple source rows"): the batch is refused with the key named,
    and the table stays at its version."""
    table = Table(tmp_path / "counts", [{"app": "a", "count": 1}, {"app": None, "count": 2}])
    with pytest.raises(DuplicateKeyError) as info:
        table.upsert([{"app": key, "count": 4}, {"app": "b", "count": 1}, {"app": key, "count": 7}])
    message = str(info.value)
    assert f"app={key!r}" in message and "2 rows" in message and "batch 1" in message
    assert "Nothing was written" in message
    assert DeltaTable(str(tmp_path / "counts")).version() == 0
    assert table.rows() == [(None, 2), ("a", 1)]


@pytest.mark.parametrize("rule", ["NOT NULL", "CHECK"])
def test_a_delete_of_an_absent_key_beside_an_insert_on_a_change_feed_table(
    tmp_path: Path, rule: str
) -> None:
    """A table with change data feed and a NOT NULL column or a CHECK constraint: a batch
    inserting a key and deleting one the table does not have. delta-rs's MERGE failed it
    ("1 rows failed validation check", a row of NULLs: the absent key's row that no
    clause acts on), so such a batch could never commit; delta-spark's MERGE takes it."""
    schema = pa.schema([pa.field("app", pa.string(), nullable=rule != "NOT NULL")]).append(
        pa.field("count", pa.int64())
    )
    table = Table(
        tmp_path / "counts",
        [{"app": "a", "count": 1}],
        schema=schema,
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    if rule == "CHECK":
        DeltaTable(str(tmp_path / "counts")).alter.add_constraint({"positive": "count > 0"})
    rows = [
        {"app": "b", "count": 2, "_delete": False},
        {"app": "gone", "count": 3, "_delete": True},
        {"app": "a", "count": 4, "_delete": None},
    ]
    table.upsert(rows, schema=schema.append(pa.field("_delete", pa.bool_())))
    assert table.rows() == [("a", 4), ("b", 2)]
    assert DeltaTable(str(tmp_path / "counts")).transaction_version("app-1") == 1
