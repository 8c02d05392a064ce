"""Which state files Spark needs to load snapshot N's state: the savepoint copies only those.

A store (one per operator, shuffle partition and store name, see
:mod:`spark_chkpt.state.operators`) loads state version V = N + 1 from the newest whole
copy at or below V and the changes after it, as found on disk (checked with Spark 4.2):

* ``hdfs``: the newest ``S.snapshot`` with S <= V (none: S = 0), then ``S+1.delta`` ..
  ``V.delta``;
* ``rocksdb`` with changelog checkpointing: the newest ``S.zip`` with S <= V, the SST
  files its ``metadata`` entry lists (``sstFiles[].dfsSstFileName``, in ``SSTs/``, shared
  with other zips), then ``S+1.changelog`` .. ``V.changelog``; without changelog
  checkpointing every version has its zip, so S = V.

More: docs/concepts/delta-internals.md (spark_chkpt/state/files.py).
"""

from __future__ import annotations

import io
import json
import posixpath
import re
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from spark_chkpt.errors import StateFilesError
from spark_chkpt.fs import Location, resolve
from spark_chkpt.state.operators import STATE_DIR, Provider, state_version

_VERSION_FILE = re.compile(r"^(\d+)(?:_([0-9A-Za-z-]+))?\.(delta|snapshot|changelog|zip)$")
_WHOLE = {"hdfs": "snapshot", "rocksdb": "zip"}
_CHANGES = {"hdfs": "delta", "rocksdb": "changelog"}
SST_DIR = "SSTs"


@dataclass(frozen=True)
class StateFile:
    """One file a savepoint copies: its path relative to the checkpoint, and its size."""

    path: str
    size: int


@dataclass(frozen=True)
class _VersionFile:
    name: str
    version: int
    unique_id: str | None
    kind: str
    size: int


def state_files(
    *,
    checkpoint_location: str,
    batch_id: int,
    provider: Provider | None,
    unique_ids: dict[str, Any] | None = None,
) -> list[StateFile]:
    """The files under ``state/`` that load snapshot ``batch_id``'s state (version
    ``batch_id + 1``) in every store, sorted; empty for a stateless query. ``provider``:
    the one the batch ran with (None: told by each store's file names).
    ``unique_ids``: ``stateUniqueIds`` of ``commits/<batch_id>`` (format 2 only)."""
    root = resolve(checkpoint_location)
    state = root.child(STATE_DIR)
    version = state_version(batch_id)
    listing = state.list(recursive=True)
    # Group every file by the folder it sits in (relative to state/).
    folders: dict[str, list[Any]] = defaultdict(list)
    for info in listing:
        if info.type.name != "File" or info.base_name.endswith(".crc"):
            continue
        rel = posixpath.relpath(info.path, state.path)
        folders[posixpath.dirname(rel)].append(info)
    chosen: list[StateFile] = []
    for folder, infos in sorted(folders.items()):
        parts = folder.split("/")
        in_partition = len(parts) >= 2 and parts[1].isdigit()
        versions = [_parse(i) for i in infos]
        if not in_partition or parts[-1] == SST_DIR or not any(versions):
            if parts[-1] != SST_DIR:  # SST files come with the zip that lists them
                chosen += [_file(f"{folder}/{i.base_name}", i) for i in infos]
            continue
        others = [i for i, v in zip(infos, versions, strict=True) if v is None]
        chosen += [_file(f"{folder}/{i.base_name}", i) for i in others]
        store = state.child(folder)
        files = [v for v in versions if v is not None]
        ids = _ids_of(unique_ids, parts)
        chosen += _store_plan(store, folder, files, version, provider, ids)
    return sorted({f.path: f for f in chosen}.values(), key=lambda f: f.path)


def _store_plan(
    store: Location,
    folder: str,
    files: list[_VersionFile],
    version: int,
    provider: Provider | None,
    unique_id: str | None,
) -> list[StateFile]:
    """One store's files for ``version``: the newest whole copy at or below it, then the
    changes after it (see the module docstring)."""
    kinds = {f.kind for f in files}
    kind_provider: Provider = (
        provider
        if provider is not None
        else ("rocksdb" if kinds & {"zip", "changelog"} else "hdfs")
    )
    whole, changes = _WHOLE[kind_provider], _CHANGES[kind_provider]
    by_key: dict[tuple[int, str], list[_VersionFile]] = defaultdict(list)
    for f in files:
        if f.version <= version:
            by_key[(f.version, f.kind)].append(f)
    base = max((v for v, k in by_key if k == whole), default=0)
    plan: list[_VersionFile] = []
    if base:
        plan.append(_one(by_key[(base, whole)], folder, base, whole, version, unique_id))
    for v in range(base + 1, version + 1):
        found = by_key.get((v, changes))
        if not found:
            raise StateFilesError(
                f"state store {STATE_DIR}/{folder} cannot load version {version}: "
                f"{v}.{changes} is missing and no {whole} at or above version {v} is there "
                f"(Spark purged it, or the batch's state was never committed)"
            )
        plan.append(_one(found, folder, v, changes, version, unique_id))
    result = [StateFile(path=f"{folder}/{f.name}", size=f.size) for f in plan]
    if base and whole == "zip":
        result += _ssts(store, folder, plan[0].name)
    return result


def _one(
    found: list[_VersionFile],
    folder: str,
    version: int,
    kind: str,
    wanted: int,
    unique_id: str | None,
) -> _VersionFile:
    if len(found) == 1:
        return found[0]
    if version == wanted and unique_id is not None:
        for f in found:
            if f.unique_id == unique_id:
                return f
    names = ", ".join(sorted(f.name for f in found))
    raise StateFilesError(
        f"state store {STATE_DIR}/{folder}: {len(found)} files of version {version} "
        f"({names}) and no way to tell which one version {wanted}'s lineage holds"
    )


def _ssts(store: Location, folder: str, zip_name: str) -> list[StateFile]:
    """The SST files a RocksDB zip's ``metadata`` entry lists, with their sizes."""
    zip_path = store.child(zip_name)
    try:
        with zipfile.ZipFile(io.BytesIO(zip_path.read_bytes())) as archive:
            lines = archive.read("metadata").decode("utf-8").splitlines()
        doc = json.loads(lines[1] if lines and lines[0].startswith("v") else lines[0])
    except (KeyError, IndexError, ValueError, zipfile.BadZipFile) as e:
        raise StateFilesError(f"{zip_path}: unreadable RocksDB checkpoint metadata ({e})") from e
    result = []
    for sst in doc.get("sstFiles") or ():
        name = str(sst["dfsSstFileName"])
        result.append(StateFile(path=f"{folder}/{SST_DIR}/{name}", size=int(sst["sizeBytes"])))
    return result


def _parse(info: Any) -> _VersionFile | None:
    match = _VERSION_FILE.match(info.base_name)
    if match is None:
        return None
    return _VersionFile(
        name=info.base_name,
        version=int(match.group(1)),
        unique_id=match.group(2),
        kind=match.group(3),
        size=int(info.size or 0),
    )


def _file(path: str, info: Any) -> StateFile:
    return StateFile(path=path, size=int(info.size or 0))


def _ids_of(unique_ids: dict[str, Any] | None, parts: list[str]) -> str | None:
    """The unique id format 2's commit log gives this store's version (operator
    ``parts[0]``, partition ``parts[1]``; ``{op: [[id per store] per partition]]}``)."""
    if not unique_ids:
        return None
    try:
        per_partition = unique_ids[parts[0]][int(parts[1])]
        ids = per_partition if isinstance(per_partition, list) else [per_partition]
        return str(ids[0]) if len(ids) == 1 else None
    except (KeyError, IndexError, TypeError, ValueError):
        return None
