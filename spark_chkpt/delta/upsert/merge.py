"""A keyed MERGE of staged Parquet files into a Delta table, through delta-rs.

The upsert of a batch (:mod:`spark_chkpt.delta.upsert.committer`) stages its rows as Parquet
files in a hidden folder of the table (``_chkpt_staging/``: Delta readers skip folders
whose names start with ``_``) and :meth:`KeyedMerge.merge` makes them visible in one
Delta commit that also carries ``txn(appId, N)`` and the caller's commitInfo metadata:

* a staged row whose ``delete_column`` is true deletes the table's row with its keys;
* any other staged row replaces the table's row with its keys, or is inserted;
* the delete column itself is never written.

More: docs/concepts/delta-internals.md (spark_chkpt/delta/upsert/merge.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.log.state import delta_rs
from spark_chkpt.delta.log.upkeep import no_hooks, upkeep
from spark_chkpt.delta.table.actions import commit_properties
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import DuplicateKeyError, SchemaMismatchError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

STAGING_DIR = "_chkpt_staging"
SOURCE, TARGET = "s", "t"


@dataclass(frozen=True)
class MergeFigures:
    """What one MERGE did (delta-rs's metrics)."""

    source_rows: int
    inserted: int
    updated: int
    deleted: int

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any]) -> MergeFigures:
        """delta-rs's metrics (snake case), or delta-spark's (camel case, as strings)."""

        def figure(name: str) -> int:
            camel = "".join(w.title() if i else w for i, w in enumerate(name.split("_")))
            return int(metrics.get(name, metrics.get(camel, 0)) or 0)

        return cls(
            source_rows=figure("num_source_rows"),
            inserted=figure("num_target_rows_inserted"),
            updated=figure("num_target_rows_updated"),
            deleted=figure("num_target_rows_deleted"),
        )

    @classmethod
    def from_commit_info(cls, info: Mapping[str, Any]) -> MergeFigures | None:
        """The figures a MERGE commit's ``commitInfo`` carries; None for other commits."""
        metrics = info.get("operationMetrics")
        if info.get("operation") != "MERGE" or not isinstance(metrics, Mapping):
            return None
        return cls.from_metrics(metrics)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def quote(name: str) -> str:
    """A column name as a delta-rs SQL identifier (case and odd characters kept)."""
    return '"' + name.replace('"', '""') + '"'


class KeyedMerge:
    """Upserts (and deletes) rows of one Delta table by key columns."""

    def __init__(
        self, *, target: DeltaTarget, keys: Sequence[str], delete_column: str | None
    ) -> None:
        self.target = target
        self.keys = tuple(keys)
        self.delete_column = delete_column

    # -- checks before anything is written ---------------------------------------------

    def check_schema(self, table: Any, batch_schema: pa.Schema) -> None:
        """Raise :class:`SchemaMismatchError` unless the batch's columns (the delete column
        aside) are the table's, with the same types; a key column is named as such."""
        data = without_column(batch_schema, self.delete_column)
        plan = self.target.plan_schema(table, data)
        current = self.target.arrow_schema(table)
        keys = [c for c in plan.type_changes if c.split(":", 1)[0] in self.keys]
        if keys:
            raise SchemaMismatchError(
                f"Delta table {self.target.uri}: key column type changed ({'; '.join(keys)})."
                " A key's type must stay the table's: cast it in the query. Nothing was "
                "written."
            )
        if plan.type_changes:
            raise SchemaMismatchError(
                f"Delta table {self.target.uri}: column types differ "
                f"({'; '.join(plan.type_changes)}). Cast the columns in the query. Nothing "
                "was written."
            )
        missing = [f.name for f in current if f.name not in data.names]
        if plan.new_columns or missing:
            parts = []
            if plan.new_columns:
                parts.append(f"the batch has column(s) {', '.join(plan.new_columns)} it lacks")
            if missing:
                parts.append(f"it has column(s) {', '.join(missing)} the batch lacks")
            raise SchemaMismatchError(
                f"Delta table {self.target.uri}: {'; '.join(parts)}. An upsert writes whole "
                "rows and never changes the table's columns: select the table's columns "
                f"({', '.join(current.names)}). Nothing was written."
            )

    def check_unique(self, files: Sequence[str], *, schema: pa.Schema, version: int) -> None:
        """Raise :class:`DuplicateKeyError` naming the keys that the staged ``files``
        (paths relative to the table root) hold more than once (null keys equal each
        other), before anything is written. Only the key columns are read."""
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        if not files:
            return
        paths = [self.target.location.child(f).path for f in files]
        keys = (
            ds.dataset(paths, schema=schema, format="parquet", filesystem=self.target.location.fs)
            .to_table(columns=list(self.keys))
            .group_by(list(self.keys), use_threads=False)
            .aggregate([([], "count_all")])
        )
        repeated = keys.filter(pc.greater(keys["count_all"], 1))
        if not repeated.num_rows:
            return
        shown = [
            ", ".join(f"{k}={row[k]!r}" for k in self.keys) + f" ({row['count_all']} rows)"
            for row in repeated.slice(0, 5).to_pylist()
        ]
        more = f" and {repeated.num_rows - 5} more" if repeated.num_rows > 5 else ""
        raise DuplicateKeyError(
            f"Delta table {self.target.uri}: batch {version} holds {repeated.num_rows} key(s) "
            f"more than once: {'; '.join(shown)}{more}. An upsert takes one row per key "
            f"({', '.join(self.keys)}) and a batch's row order does not say which wins. "
            "Reduce the batch to one row per key before the upsert, e.g. aggregate by the "
            f"keys, or foreachBatch(lambda df, n: upsert(df.dropDuplicates({list(self.keys)!r}"
            "), n)) to keep any one. Nothing was written."
        )

    def absent_deletes(self, table: Any, *, staged: Any, delete: str) -> set[tuple[Any, ...]]:
        """The keys (none NULL) of ``staged`` rows flagged ``delete`` that ``table`` does
        not hold, on a table with change data feed; else none. delta-rs's MERGE fails a
        batch holding such a row and an insert on a table with a NOT NULL column or a
        CHECK constraint (it checks the unmatched row, all NULLs, against them: "rows
        failed validation check"); the row deletes nothing, so it is left out."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from deltalake import QueryBuilder

        configuration = table.metadata().configuration
        if str(configuration.get("delta.enableChangeDataFeed", "")).lower() != "true":
            return set()
        flagged = staged.to_table(columns=list(self.keys), filter=pc.field(delete))
        for key in self.keys:
            flagged = flagged.filter(pc.is_valid(flagged.column(key)))
        if flagged.num_rows == 0:
            return set()
        columns = ", ".join(quote(k) for k in self.keys)
        query = QueryBuilder().register("t", delta_rs(table)).execute(f"SELECT {columns} FROM t")
        held = pa.table(query.read_all()).select(list(self.keys)).cast(flagged.schema)
        absent = flagged.join(held, keys=list(self.keys), join_type="left anti")
        return set(zip(*(absent.column(k).to_pylist() for k in self.keys), strict=True))

    # -- the commit --------------------------------------------------------------------

    def merge(
        self,
        table: Any,
        *,
        files: Sequence[str],
        schema: pa.Schema,
        app_id: str,
        version: int,
        metadata: Mapping[str, Any],
        batch_size: int,
    ) -> MergeFigures:
        """One MERGE commit of the staged ``files`` (paths relative to the table root,
        all of ``schema``) with ``txn(app_id, version)`` and ``metadata``.

        The source streams in batches of ``batch_size`` rows, one file at a time.
        ``schema`` decides whether the delete column is there (files staged without it
        only upsert). Keys match null-safely. Raises :class:`DuplicateKeyError` when a
        key repeats (:meth:`check_unique`, before delta-rs runs); other errors (commit
        conflicts among them) are delta-rs's own.
        """
        import pyarrow.dataset as ds

        delete = self.delete_column if self.delete_column in schema.names else None
        paths = [self.target.location.child(f).path for f in files]
        staged = ds.dataset(
            paths, schema=schema, format="parquet", filesystem=self.target.location.fs
        )
        source = staged.scanner(
            batch_size=batch_size, batch_readahead=1, fragment_readahead=1
        ).to_reader()
        if delete is not None:
            absent = self.absent_deletes(table, staged=staged, delete=delete)
            if absent:
                source = without_rows(source, absent, keys=self.keys, delete=delete)
        self.check_unique(files, schema=schema, version=version)
        on = " AND ".join(
            f"{TARGET}.{quote(k)} IS NOT DISTINCT FROM {SOURCE}.{quote(k)}" for k in self.keys
        )
        props = commit_properties(metadata=metadata, app_id=app_id, version=version)
        merger = table.merge(
            source,
            predicate=on,
            source_alias=SOURCE,
            target_alias=TARGET,
            streamed_exec=True,
            commit_properties=props,
            post_commithook_properties=no_hooks(),
        )
        if delete is not None:
            flag = f"{SOURCE}.{quote(delete)}"
            keep = f"{flag} IS NOT TRUE"
            merger = (
                merger.when_matched_delete(predicate=f"{flag} = true")
                .when_matched_update_all(predicate=keep, except_cols=[delete])
                .when_not_matched_insert_all(predicate=keep, except_cols=[delete])
            )
        else:
            merger = merger.when_matched_update_all().when_not_matched_insert_all()
        try:
            metrics = merger.execute()
        except Exception as e:
            if "multiple source rows" in str(e):
                raise DuplicateKeyError(
                    f"Delta table {self.target.uri}: batch {version} holds a key "
                    f"({', '.join(self.keys)}) more than once, so the MERGE cannot tell which "
                    "row wins. Each key must appear once per batch: aggregate by the keys or "
                    f"dropDuplicates({list(self.keys)!r}) before the upsert. Nothing was "
                    f"written. (delta-rs: {e})"
                ) from e
            raise
        upkeep(self.target)  # checkpoint and clean-up by the table's properties
        return MergeFigures.from_metrics(metrics)


def without_rows(
    reader: pa.RecordBatchReader, keys_of: set[tuple[Any, ...]], *, keys: Sequence[str], delete: str
) -> pa.RecordBatchReader:
    """``reader`` without its delete-flagged rows whose keys are in ``keys_of``."""
    import pyarrow as pa

    def batches() -> Any:
        for batch in reader:
            flags = batch.column(delete).to_pylist()
            if any(flags):
                columns = [batch.column(k).to_pylist() for k in keys]
                keep = [
                    not (flag and tuple(c[i] for c in columns) in keys_of)
                    for i, flag in enumerate(flags)
                ]
                batch = batch.filter(pa.array(keep))
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def without_column(schema: pa.Schema, name: str | None) -> pa.Schema:
    index = schema.get_field_index(name) if name else -1
    return schema.remove(index) if index >= 0 else schema
