"""Reading the keyed state of snapshot N back, through Spark's state data source.

``spark.read.format("statestore")`` (Spark 4.0+, experimental) reads one state store of
one operator as a batch DataFrame: option ``path`` (or ``load(path)``) is the
checkpoint location, ``batchId`` the batch whose state to read (the state *after* that
batch, version N + 1; default the newest committed batch; it must be committed and
not yet purged), ``operatorId`` (default 0) and ``storeName`` (default ``default``;
stream-stream joins have several). Rows are ``key`` (struct), ``value`` (struct) and
``partition_id``.

:func:`read_state` checks the batch against Spark's commit log first, so a batch that
is not committed or no longer retained is a :class:`~spark_chkpt.errors.ChkptError`
naming it, the checkpoint and what it holds, and flattens each row into one dict of the
key's and the value's columns (for ``groupBy("app").count()``: ``{"app": ..., "count":
...}``), sorted by key. ``spark-chkpt state`` prints it; the savepoint feature reads
state through it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_chkpt.errors import ChkptError
from spark_chkpt.fs import qualify, resolve
from spark_chkpt.state.operators import (
    DEFAULT_STORE,
    STATE_DIR,
    check_retained,
    operator_ids,
    operator_metadata,
    state_version,
)

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession


@dataclass(frozen=True)
class StateSnapshot:
    """The keyed state of one operator's store at snapshot ``batch_id``."""

    checkpoint_location: str
    batch_id: int
    operator_id: int
    operator_name: str | None
    store_name: str
    version: int  # the state store version: batch_id + 1
    keys: int  # every key in the state, even when ``rows`` is limited
    key_columns: list[str]
    value_columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)  # sorted by key


def read_state(
    spark: SparkSession,
    *,
    checkpoint_location: str,
    batch_id: int | None = None,
    operator_id: int = 0,
    store_name: str = DEFAULT_STORE,
    limit: int | None = None,
) -> StateSnapshot:
    """The keyed state of operator ``operator_id`` after batch ``batch_id`` (default:
    the newest batch in Spark's commit log); ``limit`` caps the rows returned, not
    ``keys``."""
    location = qualify(checkpoint_location)
    batch = check_retained(checkpoint_location=location, batch_id=batch_id)
    meta = _operator_metadata(location, operator_id, store_name)
    # RocksDB's loader reports to the driver's StateStoreCoordinator, an RPC endpoint
    # Spark registers with the session's StreamingQueryManager: in a session that never
    # touched spark.streams the read fails with "Cannot find endpoint: StateStoreCoordinator".
    _ = spark.streams
    try:
        df = (
            spark.read.format("statestore")
            .option("batchId", str(batch))
            .option("operatorId", str(operator_id))
            .option("storeName", store_name)
            .load(location)
        )
        key_columns = _field_names(df.schema["key"].dataType)
        value_columns = _field_names(df.schema["value"].dataType)
        keys = df.count()
        ordered = df.orderBy("key")
        collected = (ordered.limit(limit) if limit is not None else ordered).collect()
    except Exception as e:  # Spark's own errors (files purged, unreadable) name no batch
        raise ChkptError(
            f"cannot read the state of batch {batch} (operator {operator_id}, store "
            f"{store_name!r}) from {location}: {str(e).splitlines()[0]}"
        ) from e
    rows = [_flat(row) for row in collected]
    return StateSnapshot(
        checkpoint_location=location,
        batch_id=batch,
        operator_id=operator_id,
        operator_name=(meta.get("operatorInfo") or {}).get("operatorName"),
        store_name=store_name,
        version=state_version(batch),
        keys=keys,
        key_columns=key_columns,
        value_columns=[f"value.{c}" if c in key_columns else c for c in value_columns],
        rows=rows,
    )


def _operator_metadata(location: str, operator_id: int, store_name: str) -> dict[str, Any]:
    """The metadata of stateful operator ``operator_id``, which must hold store
    ``store_name``."""
    operators = operator_ids(checkpoint_location=location)
    if operator_id not in operators:
        held = ", ".join(map(str, operators)) or "none: the query is stateless"
        raise ChkptError(
            f"{location} has no stateful operator {operator_id} (operators under "
            f"{STATE_DIR}/: {held})"
        )
    meta = operator_metadata(resolve(location).child(STATE_DIR, str(operator_id)))
    stores = [str(s.get("storeName")) for s in meta.get("stateStoreInfo") or ()]
    if stores and store_name not in stores:
        raise ChkptError(
            f"operator {operator_id} of {location} has no state store {store_name!r} "
            f"(it has {', '.join(stores)})"
        )
    return meta


def _flat(row: Row) -> dict[str, Any]:
    """A state row's key and value fields side by side (a value field named like a key
    field as ``value.<name>``)."""
    flat: dict[str, Any] = dict(row["key"].asDict(recursive=True))
    value = row["value"].asDict(recursive=True) if row["value"] is not None else {}
    for name, item in value.items():
        flat[f"value.{name}" if name in flat else name] = item
    return flat


def _field_names(data_type: Any) -> list[str]:
    """A struct's field names (the reader's ``key`` and ``value`` are structs)."""
    from pyspark.sql.types import StructType

    return list(data_type.fieldNames()) if isinstance(data_type, StructType) else []
