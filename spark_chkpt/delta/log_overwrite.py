"""The project's own Delta commit of a replacement (``outputMode("complete")``), for
tables delta-rs refuses to commit to (:mod:`spark_chkpt.delta.log_commit` does appends).

The commit is the append's (:func:`~spark_chkpt.delta.log_commit.build_append`: the
``commitInfo`` with the in-commit timestamp, the row-id high-water mark, the new files'
``add`` actions with fresh ``baseRowId``s above it, the ``txn(appId, N)``, other domains
kept) plus a ``remove`` for every live file of the version it builds on, as delta-spark's
``AddFile.removeWithTimestamp`` writes it (``deletionTimestamp``, ``dataChange``,
``extendedFileMetadata``, ``partitionValues``, ``size``, ``stats``, ``tags``,
``deletionVector``, ``baseRowId``, ``defaultRowCommitVersion``), and its ``commitInfo``
is delta-spark's overwrite (``WRITE``, mode ``Overwrite``, not a blind append). The live
files are read from the table's log: the newest checkpoint at or before the version
(classic, multi-part or v2 with sidecars) and the JSON commits after, a file known by its
path and deletion vector (PROTOCOL.md, "Reconciliation"). A lost race reads the commits
that won (:func:`~spark_chkpt.delta.log_commit.advance`) and builds the replacement again
on the newest version, so the files they added are removed too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spark_chkpt.delta.log_commit import MAX_RACES, LogState, advance, build_append
from spark_chkpt.delta.protocol import TableProtocol
from spark_chkpt.delta.staging import StagedFile
from spark_chkpt.errors import CommitConflictError
from spark_chkpt.fs import Location

# The fields of an add action a remove keeps (delta-spark's removeWithTimestamp).
_KEPT = (
    "partitionValues",
    "size",
    "stats",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
)


def _file_key(action: Mapping[str, Any]) -> tuple[str, str | None]:
    """A file's identity in the log: its path and its deletion vector's unique id."""
    dv = action.get("deletionVector")
    if isinstance(dv, Mapping) and dv.get("storageType"):
        unique = f"{dv['storageType']}{dv.get('pathOrInlineDv')}"
        if dv.get("offset") is not None:
            unique += f"@{dv['offset']}"
        return str(action["path"]), unique
    return str(action["path"]), None


def _clean(value: Any) -> Any:
    """An action read from a Parquet checkpoint as its JSON form: nulls dropped, maps
    (lists of key/value pairs in Arrow) as objects."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list) and all(isinstance(i, tuple) and len(i) == 2 for i in value):
        return {k: v for k, v in value}
    return value


def _checkpoint_adds(log_dir: Location, version: int) -> tuple[int, list[dict[str, Any]]]:
    """The newest checkpoint at or before ``version`` (-1: none) and its add actions."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    found: dict[int, list[str]] = {}
    for info in log_dir.list():
        name = info.base_name
        head, _, rest = name.partition(".checkpoint")
        if rest and head.isdigit() and int(head) <= version and info.type == pafs.FileType.File:
            found.setdefault(int(head), []).append(name)
    if not found:
        return -1, []
    at = max(found)

    def parquet_actions(path: Location, columns: Sequence[str]) -> list[dict[str, Any]]:
        names = pq.read_schema(path.path, filesystem=log_dir.fs).names
        present = [c for c in columns if c in names]
        if not present:
            return []
        rows = pq.read_table(path.path, filesystem=log_dir.fs, columns=present).to_pylist()
        return [{k: _clean(v) for k, v in r.items() if v is not None} for r in rows]

    actions: list[dict[str, Any]] = []
    for name in sorted(found[at]):
        path = log_dir.child(name)
        if name.endswith(".json"):  # a v2 checkpoint's top-level file in JSON
            actions += [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        else:
            actions += parquet_actions(path, ("add", "sidecar"))
    adds = [a["add"] for a in actions if isinstance(a.get("add"), dict)]
    for a in actions:
        sidecar = a.get("sidecar")
        if isinstance(sidecar, dict) and sidecar.get("path"):
            side = log_dir.child("_sidecars", str(sidecar["path"]).rsplit("/", 1)[-1])
            adds += [x["add"] for x in parquet_actions(side, ("add",)) if "add" in x]
    return at, adds


def live_files(location: Location, *, version: int) -> list[dict[str, Any]]:
    """The add actions of every file of the table at ``location`` as of ``version``."""
    log_dir = location.child("_delta_log")
    start, adds = _checkpoint_adds(log_dir, version)
    live = {_file_key(a): a for a in adds}
    for v in range(start + 1, version + 1):
        text = log_dir.child(f"{v:020d}.json").read_text()
        for line in text.splitlines():
            if '"add"' not in line and '"remove"' not in line:
                continue
            action = json.loads(line)
            if isinstance(action.get("remove"), dict):
                live.pop(_file_key(action["remove"]), None)
            elif isinstance(action.get("add"), dict):
                live[_file_key(action["add"])] = action["add"]
    return list(live.values())


def remove_of(add: Mapping[str, Any], *, timestamp: int) -> dict[str, Any]:
    """The remove action of a live file, as delta-spark writes it."""
    remove: dict[str, Any] = {
        "path": add["path"],
        "deletionTimestamp": timestamp,
        "dataChange": True,
        "extendedFileMetadata": True,
    }
    remove |= {k: add[k] for k in _KEPT if add.get(k) is not None}
    remove.setdefault("partitionValues", {})
    return {"remove": remove}


def build_overwrite(
    state: LogState,
    *,
    live: Sequence[Mapping[str, Any]],
    files: Sequence[StagedFile],
    txns: Mapping[str, int],
    metadata: Mapping[str, Any],
    partition_by: Sequence[str],
    now_ms: int,
) -> str:
    """The JSON commit of version ``state.version + 1`` replacing the ``live`` files
    (their add actions) with ``files`` (pure)."""
    text = build_append(
        state, files=files, txns=txns, metadata=metadata, partition_by=partition_by, now_ms=now_ms
    )
    actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    info = actions[0]["commitInfo"]
    info["operationParameters"] = {
        "mode": "Overwrite",
        "partitionBy": json.dumps(list(partition_by)),
    }
    info["isBlindAppend"] = False
    stamp = int(info["timestamp"])
    removes = [remove_of(a, timestamp=stamp) for a in live]
    head = [a for a in actions if "commitInfo" in a or "domainMetadata" in a]
    rest = [a for a in actions if "commitInfo" not in a and "domainMetadata" not in a]
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in head + removes + rest)


def commit_overwrite(
    *,
    location: Location,
    uri: str,
    state: LogState,
    files: Sequence[StagedFile],
    app_id: str,
    txns: Mapping[str, int],
    metadata: Mapping[str, Any],
    partition_by: Sequence[str],
    put: Callable[[Location, str], bool],
    check: Callable[[TableProtocol], None],
    clock: Callable[[], float] = time.time,
) -> int | None:
    """Replace every file of the table with ``files`` on top of ``state``, as
    :func:`~spark_chkpt.delta.log_commit.commit_append` appends: the version committed,
    or None when a commit that won the race holds ``txn(app_id) >= txns[app_id]``."""
    log_dir = location.child("_delta_log")
    txn_version = txns.get(app_id, -1)
    for _ in range(MAX_RACES):
        version = state.version + 1
        text = build_overwrite(
            state,
            live=live_files(location, version=state.version),
            files=files,
            txns=txns,
            metadata=metadata,
            partition_by=partition_by,
            now_ms=int(clock() * 1000),
        )
        if put(log_dir.child(f"{version:020d}.json"), text):
            return version
        while True:
            try:
                theirs = log_dir.child(f"{state.version + 1:020d}.json").read_text()
            except FileNotFoundError:
                break
            moved = advance(
                state,
                version=state.version + 1,
                text=theirs,
                app_id=app_id,
                txn_version=txn_version,
                check=check,
                uri=uri,
            )
            if moved is None:
                return None
            state = moved
    raise CommitConflictError(
        f"Delta table {uri}: lost the race for the next version {MAX_RACES} times in a row"
    )
