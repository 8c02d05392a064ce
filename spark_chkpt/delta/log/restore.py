"""The project's own Delta RESTORE commit, for tables delta-rs refuses to restore.

delta-rs 1.x ``restore`` commits to no table that needs the project's own commit
(:func:`~spark_chkpt.delta.log.commit.needs_own_commit`: row tracking, in-commit
timestamps, domain metadata, type widening). A savepoint rewind of such a table is
written here with the actions delta-spark's ``RESTORE`` writes: ``commitInfo`` first
(RESTORE, the in-commit timestamp, the caller's metadata at its top level), ``remove``
of each file (path and deletion vector) live now but not at the target version, ``add``
(``dataChange`` true) of each live at the target but not now with its ``baseRowId``,
``defaultRowCommitVersion`` and deletion vector, the target's domains but the row-id
high-water mark (never lowered), the target's metadata if it changed, the ``txn`` actions.
The file is created only if absent; a lost race is a
:class:`~spark_chkpt.errors.CommitConflictError` naming the version another writer took.
More: docs/concepts/delta-features.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_chkpt.delta.log.commit import (
    ROW_TRACKING_DOMAIN,
    LogState,
    checkpoint_files,
    commit_info,
    log_text,
    txn_actions,
)
from spark_chkpt.errors import CommitConflictError
from spark_chkpt.fs import Location

# An add action's fields a restore keeps, as the log has them.
ADD_FIELDS = (
    "path",
    "partitionValues",
    "size",
    "modificationTime",
    "dataChange",
    "stats",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
    "clusteringProvider",
)
FileKey = tuple[str, str | None]  # (path, deletion vector's unique id)


@dataclass(frozen=True)
class LogSnapshot:
    """What a restore reads of one version: its live files (by path and deletion
    vector), its metaData and protocol actions."""

    version: int
    files: Mapping[FileKey, Mapping[str, Any]]
    metadata: Mapping[str, Any]
    protocol: Mapping[str, Any]


def dv_id(dv: Mapping[str, Any] | None) -> str | None:
    """A deletion vector's unique id (PROTOCOL.md: storage type, path or inline data,
    ``@offset`` when there is one); None: no deletion vector."""
    if not dv:
        return None
    offset = dv.get("offset")
    return f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}" + (
        f"@{offset}" if offset is not None else ""
    )


def _key(add: Mapping[str, Any]) -> FileKey:
    return str(add["path"]), dv_id(add.get("deletionVector"))


def _plain(value: Any) -> Any:
    """A checkpoint row's value as the JSON log has it (pyarrow reads maps as lists of
    pairs); None fields dropped."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        return {str(k): v for k, v in value}
    return value


def _map_fields(add: dict[str, Any]) -> dict[str, Any]:
    for name in ("partitionValues", "tags"):
        if name in add and isinstance(add[name], list):
            add[name] = {str(k): v for k, v in add[name]}
    return add


def _actions(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _checkpoint(log_dir: Location, version: int) -> tuple[int, list[dict[str, Any]]]:
    """The newest checkpoint at or before ``version`` (-1: none) and its actions (add,
    remove, metaData, protocol; a v2 checkpoint's sidecars read too)."""
    import pyarrow.parquet as pq

    at, names = checkpoint_files(log_dir, version)
    if at < 0:
        return -1, []
    wanted = ("add", "remove", "metaData", "protocol", "sidecar")
    actions: list[dict[str, Any]] = []

    def parquet(path: Location) -> None:
        names = pq.read_schema(path.path, filesystem=log_dir.fs).names
        columns = [c for c in wanted if c in names]
        table = pq.read_table(path.path, filesystem=log_dir.fs, columns=columns)
        for row in table.to_pylist():
            for column in columns:
                if row.get(column) is not None:
                    actions.append({column: _map_fields(_plain(row[column]))})

    for name in names:
        path = log_dir.child(name)
        if name.endswith(".json"):
            actions += _actions(path.read_text())
        else:
            parquet(path)
    for sidecar in [a["sidecar"] for a in actions if "sidecar" in a]:
        parquet(log_dir.child("_sidecars", str(sidecar["path"]).rsplit("/", 1)[-1]))
    return at, actions


def read_snapshot(location: Location, version: int) -> LogSnapshot:
    """The live files, metaData and protocol of the table at ``location`` as of
    ``version``: its newest checkpoint at or before it and the JSON commits after."""
    log_dir = location.child("_delta_log")
    start, actions = _checkpoint(log_dir, version)
    for v in range(start + 1, version + 1):
        actions += _actions(log_dir.child(f"{v:020d}.json").read_text())
    files: dict[FileKey, dict[str, Any]] = {}
    metadata: dict[str, Any] = {}
    protocol: dict[str, Any] = {}
    for action in actions:
        if isinstance(action.get("add"), dict):
            add = {k: action["add"][k] for k in ADD_FIELDS if action["add"].get(k) is not None}
            files[_key(add)] = add
        elif isinstance(action.get("remove"), dict):
            files.pop(_key(action["remove"]), None)
        elif isinstance(action.get("metaData"), dict):
            metadata = action["metaData"]
        elif isinstance(action.get("protocol"), dict):
            protocol = action["protocol"]
    return LogSnapshot(version=version, files=files, metadata=metadata, protocol=protocol)


def remove_of(add: Mapping[str, Any], *, timestamp: int) -> dict[str, Any]:
    """The remove action of a live file, as delta-spark's ``removeWithTimestamp`` writes
    it (a restore's and a complete-mode replacement's)."""
    remove: dict[str, Any] = {
        "path": add["path"],
        "deletionTimestamp": timestamp,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add.get("partitionValues", {}),
        "size": add.get("size", 0),
    }
    for name in ("stats", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"):
        if add.get(name) is not None:
            remove[name] = add[name]
    return remove


def build_restore(
    now: LogState,
    at: LogState,
    *,
    current: LogSnapshot,
    target: LogSnapshot,
    txns: Mapping[str, int],
    metadata: Mapping[str, Any],
    now_ms: int,
) -> str:
    """The JSON commit of version ``now.version + 1`` restoring the table to
    ``target`` (``at``: its :class:`LogState`) from ``current`` (``now``), with
    ``txns`` (app id to version) and ``metadata`` in its commitInfo (pure)."""
    gone = [k for k in current.files if k not in target.files]
    removes = [remove_of(current.files[k], timestamp=now_ms) for k in gone]
    adds = [dict(target.files[k], dataChange=True) for k in target.files if k not in current.files]
    operation = {
        "operation": "RESTORE",
        "operationParameters": {"version": target.version},
        "readVersion": now.version,
        "isolationLevel": "Serializable",
        "isBlindAppend": False,
        "operationMetrics": {
            "numRestoredFiles": str(len(adds)),
            "restoredFilesSize": str(sum(int(a.get("size", 0)) for a in adds)),
            "numRemovedFiles": str(len(removes)),
            "removedFilesSize": str(sum(int(r.get("size", 0)) for r in removes)),
            "numOfFilesAfterRestore": str(len(target.files)),
            "tableSizeAfterRestore": str(sum(int(a.get("size", 0)) for a in target.files.values())),
        },
    }
    info = commit_info(now, now_ms=now_ms, operation=operation, metadata=metadata)
    actions: list[dict[str, Any]] = [{"commitInfo": info}]
    if target.protocol and current.protocol:
        merged = _merged_protocol(target.protocol, current.protocol)
        if merged != dict(current.protocol):
            actions.append({"protocol": merged})
    if target.metadata and dict(target.metadata) != dict(current.metadata):
        actions.append({"metaData": dict(target.metadata)})
    for domain, config in sorted(at.domains.items()):
        if domain != ROW_TRACKING_DOMAIN and now.domains.get(domain) != config:
            dm = {"domain": domain, "configuration": config, "removed": False}
            actions.append({"domainMetadata": dm})
    for domain, config in sorted(now.domains.items()):
        if domain != ROW_TRACKING_DOMAIN and domain not in at.domains:
            dm = {"domain": domain, "configuration": config, "removed": True}
            actions.append({"domainMetadata": dm})
    # the row-id high-water mark stays where it is: now's is the highest (never lowered)
    actions += [{"remove": r} for r in removes]
    actions += [{"add": a} for a in adds]
    return log_text(actions + txn_actions(txns, now_ms=now_ms))


def _merged_protocol(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` with ``old``'s features added (a restore never downgrades a protocol)."""
    merged = dict(new)
    for key in ("minReaderVersion", "minWriterVersion"):
        merged[key] = max(int(old.get(key, 1)), int(new.get(key, 1)))
    for key in ("readerFeatures", "writerFeatures"):
        names = set(old.get(key) or ()) | set(new.get(key) or ())
        if names:
            merged[key] = sorted(names)
    return merged


def commit_restore(
    *,
    location: Location,
    uri: str,
    now: LogState,
    at: LogState,
    txns: Mapping[str, int],
    metadata: Mapping[str, Any],
    put: Callable[[Location, str], bool],
    clock: Callable[[], float] = time.time,
) -> int:
    """Restore the table at ``location`` to ``at.version`` in one commit on top of
    ``now`` with ``txns`` and ``metadata``: the version committed. ``put(location,
    text)`` creates the file if absent; False (another writer's commit of that version
    is there) is a :class:`CommitConflictError` naming the table and the version."""
    current = read_snapshot(location, now.version)
    target = read_snapshot(location, at.version)
    text = build_restore(
        now,
        at,
        current=current,
        target=target,
        txns=txns,
        metadata=metadata,
        now_ms=int(clock() * 1000),
    )
    version = now.version + 1
    if not put(location.child("_delta_log", f"{version:020d}.json"), text):
        raise CommitConflictError(
            f"Delta table {uri}: another writer committed version {version} while the "
            f"restore to version {at.version} was being written (read at version "
            f"{now.version}); nothing was restored"
        )
    return version
