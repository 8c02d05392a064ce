"""The keyed state in snapshot N: what Spark's state stores wrote for batch N, by listing.

Spark keeps each stateful operator's state (Flink's keyed state, seed 004) under
``<checkpointLocation>/state/<operatorId>/<partition>/``, one state store per shuffle
partition, versioned by batch: **batch N commits state version N + 1** (version 0 is
the empty state before batch 0). A stream-stream join keeps several stores per
partition, each in ``<partition>/<storeName>/``; every other operator has one store,
``default``, whose files sit in ``<partition>/`` itself. ``state/<operatorId>/_metadata/
metadata`` names the operator and its stores (``v1``, then JSON ``operatorInfo``
``{operatorId, operatorName}`` and ``stateStoreInfo`` ``[{storeName, numPartitions}]``).

More: docs/concepts/delta-internals.md (spark_chkpt/state/operators.py).
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from spark_chkpt.errors import ChkptError
from spark_chkpt.fs import Location, resolve

Provider = Literal["rocksdb", "hdfs"]

STATE_DIR = "state"
DEFAULT_STORE = "default"
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
PROVIDERS: dict[str, Provider] = {
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider": "rocksdb",
    "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider": "hdfs",
}
# A state file's name: version, optional unique id (checkpoint format 2), kind.
_VERSION_FILE = re.compile(r"^(\d+)(?:_[0-9A-Za-z-]+)?\.(delta|snapshot|changelog|zip)$")
_KIND_PROVIDER: dict[str, Provider] = {
    "delta": "hdfs",
    "snapshot": "hdfs",
    "changelog": "rocksdb",
    "zip": "rocksdb",
}


def state_version(batch_id: int) -> int:
    """The state store version batch ``batch_id`` commits."""
    return batch_id + 1


@dataclass(frozen=True)
class StateOperator:
    """One stateful operator's share of a snapshot (a ``SnapshotRecord.state_operators``
    entry as :meth:`as_dict`); ``keys`` and friends come later, from Spark's progress."""

    operator_id: int
    name: str | None  # Spark's operator name (stateStoreSave, dedupe, symmetricHashJoin...)
    store_names: list[str]
    version: int
    partitions: int
    provider: Provider | None  # None: neither the conf nor a file says
    files: int  # files of this version: deltas/changelogs, snapshots/zips present
    bytes: int
    snapshot_files: int = 0  # of ``files``: V.snapshot / V.zip (whole state, not changes)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.update(doc.pop("extra"))
        return doc


def provider_of(conf: dict[str, Any] | None) -> Provider | None:
    """The provider a batch ran with, from the ``conf`` of its ``offsets/N`` metadata."""
    return PROVIDERS.get(str((conf or {}).get(PROVIDER_CONF, "")))


def operator_ids(*, checkpoint_location: str) -> list[int]:
    """The stateful operators of a query: the numbered folders under ``state/``."""
    root = resolve(checkpoint_location).child(STATE_DIR)
    return sorted(
        int(info.base_name)
        for info in root.list()
        if info.base_name.isdigit() and info.type.name == "Directory"
    )


def operator_metadata(op_dir: Location) -> dict[str, Any]:
    """``state/<op>/_metadata/metadata`` as a dict (empty when absent or unreadable:
    queries started before Spark 4.0 have none)."""
    path = op_dir.child("_metadata", "metadata")
    try:
        lines = path.read_text().splitlines()
        doc = json.loads(lines[1]) if len(lines) > 1 else {}
    except (FileNotFoundError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def state_operators(
    *, checkpoint_location: str, batch_id: int, provider: Provider | None = None
) -> list[StateOperator]:
    """The stateful operators of a query and the files each wrote for snapshot
    ``batch_id`` (state version ``batch_id + 1``); empty for a stateless query.

    ``provider``: the one the batch ran with, if the caller knows it (see
    :func:`provider_of`); else guessed from the version's file names.
    """
    version = state_version(batch_id)
    root = resolve(checkpoint_location).child(STATE_DIR)
    result = []
    for op in operator_ids(checkpoint_location=checkpoint_location):
        op_dir = root.child(str(op))
        meta = operator_metadata(op_dir)
        stores = [s for s in meta.get("stateStoreInfo") or () if isinstance(s, dict)]
        store_names = [str(s.get("storeName", DEFAULT_STORE)) for s in stores]
        partition_dirs: set[str] = set()
        files = size = snapshots = 0
        kinds: set[str] = set()
        for info in op_dir.list(recursive=True):
            rel = posixpath.relpath(info.path, op_dir.path).split("/")
            if rel[0].isdigit():
                partition_dirs.add(rel[0])
            if len(rel) not in (2, 3) or not rel[0].isdigit() or info.type.name != "File":
                continue  # <partition>/<file> or <partition>/<store>/<file> only
            match = _VERSION_FILE.match(rel[-1])
            if match is None or int(match.group(1)) != version:
                continue
            kind = match.group(2)
            kinds.add(kind)
            files += 1
            size += int(info.size or 0)
            if kind in ("snapshot", "zip"):
                snapshots += 1
        partitions = max((int(s.get("numPartitions", 0)) for s in stores), default=0)
        guessed = {_KIND_PROVIDER[k] for k in kinds}
        result.append(
            StateOperator(
                operator_id=op,
                name=(meta.get("operatorInfo") or {}).get("operatorName"),
                store_names=store_names or [DEFAULT_STORE],
                version=version,
                partitions=partitions or len(partition_dirs),
                provider=provider or (guessed.pop() if len(guessed) == 1 else None),
                files=files,
                bytes=size,
                snapshot_files=snapshots,
            )
        )
    return result


def committed_batches(*, checkpoint_location: str) -> list[int]:
    """The batches in Spark's commit log (``commits/N``), oldest first: Spark purges the
    log with the state, keeping about ``minBatchesToRetain`` batches."""
    root = resolve(checkpoint_location).child("commits")
    return sorted(int(i.base_name) for i in root.list() if i.base_name.isdigit())


def check_retained(*, checkpoint_location: str, batch_id: int | None) -> int:
    """``batch_id`` (default: the newest committed batch) if its state can be read, else
    a :class:`ChkptError` naming the batch, the checkpoint and what it holds."""
    batches = committed_batches(checkpoint_location=checkpoint_location)
    if not batches:
        raise ChkptError(
            f"{checkpoint_location} has no committed batch (no commits/N): is it a Spark "
            "streaming checkpoint location whose query completed a batch?"
        )
    if batch_id is None:
        return batches[-1]
    if batch_id not in batches:
        held = f"batches {batches[0]}..{batches[-1]}"
        if batch_id > batches[-1]:
            why = f"batch {batch_id} is not committed (the newest committed batch is {batches[-1]})"
        else:
            why = (
                f"batch {batch_id} is no longer retained (Spark keeps minBatchesToRetain "
                "batches of state and purges older ones)"
            )
        raise ChkptError(f"{checkpoint_location}: {why}; the commit log holds {held}")
    return batch_id
