"""Savepoints: a snapshot kept on purpose, to stop, change, rewind
or fork a query and start it again from there.

More: docs/concepts/savepoints.md (spark_chkpt/savepoint/manifest.py).
"""

from __future__ import annotations

import json
import logging
import platform
import posixpath
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from spark_chkpt.errors import FormatError, SavepointError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.fs import Location, qualify, resolve
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.store import STORE_DIR, SnapshotStore
from spark_chkpt.state.files import StateFile, StateFilesError, state_files
from spark_chkpt.state.operators import Provider, check_retained, provider_of, state_operators

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint"
FORMAT = 1
IN_PROGRESS = ".inprogress"
Reason = Literal["manual", "stop"]


@dataclass(frozen=True)
class SinkInfo:
    """The sink of snapshot N as its record tells: ``kind`` is the writer
    (``chkpt-delta``, ``delta-upsert``, ``chkpt-kafka``), ``target`` its table or
    topic(s), ``table_version`` the Delta version of snapshot N's commit. A Kafka sink's
    snapshot N is barrier N of ``app_id`` in each topic. ``dead_letters``: the
    ``chkpt-delta`` sink's dead-letter table (``deadLetterPath``), and
    ``dead_letter_version`` its version holding snapshot N's dead letters (None: no such
    table yet at N); both None in manifests of earlier releases."""

    kind: str | None
    target: str | None
    table_version: int | None
    mode: str | None
    app_id: str
    dead_letters: str | None = None
    dead_letter_version: int | None = None


@dataclass(frozen=True)
class OperatorInfo:
    """One stateful operator's share of the savepoint."""

    operator_id: int
    name: str | None
    stores: list[str]
    partitions: int
    version: int
    keys: int | None  # from the snapshot record (Spark's progress), when known
    files: int  # files the savepoint copied for it
    bytes: int


@dataclass(frozen=True)
class SavepointManifest:
    """What a savepoint holds (``manifest.json``)."""

    savepoint_id: str
    batch_id: int
    query_id: str
    query_name: str | None
    checkpoint: str  # where it was taken from
    source_offsets: list[Any]
    sink: SinkInfo | None
    provider: str | None
    state_version: int | None  # None: a stateless query
    operators: list[OperatorInfo]
    files: list[StateFile]  # every file under checkpoint/, relative to it
    versions: dict[str, str]
    reason: str = "manual"
    record: dict[str, Any] | None = None
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    format: int = FORMAT

    @property
    def stateful(self) -> bool:
        return bool(self.operators)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def snapshot_record(self) -> SnapshotRecord | None:
        return SnapshotRecord.from_json(json.dumps(self.record)) if self.record else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SavepointManifest:
        doc = json.loads(text)
        if doc.get("format") != FORMAT:
            raise FormatError(f"manifest format {doc.get('format')!r}, this release reads {FORMAT}")
        known = {k: v for k, v in doc.items() if k in cls.__dataclass_fields__}
        sink = doc.get("sink")
        known["sink"] = (
            SinkInfo(**{k: v for k, v in sink.items() if k in SinkInfo.__dataclass_fields__})
            if sink
            else None
        )
        known["operators"] = [OperatorInfo(**o) for o in doc.get("operators") or ()]
        known["files"] = [StateFile(**f) for f in doc.get("files") or ()]
        return cls(**known)


@dataclass(frozen=True)
class Savepoint:
    """A complete savepoint: its folder and its manifest."""

    location: str
    manifest: SavepointManifest

    @property
    def checkpoint(self) -> str:
        """The savepoint's own checkpoint folder (a valid, read-only Spark checkpoint)."""
        return posixpath.join(self.location, CHECKPOINT)


def create_savepoint(
    *,
    checkpoint_location: str,
    savepoint_dir: str,
    batch_id: int | None = None,
    table: str | None = None,
    reason: Reason = "manual",
) -> Savepoint:
    """Savepoint snapshot ``batch_id`` (default: the newest completed one, Spark's newest
    ``commits/N``) of the query at ``checkpoint_location`` into a new folder under
    ``savepoint_dir``. The query may be running: its files are only read. ``table``
    names the sink's table when the snapshot record does not (the store no longer
    holds it)."""
    location = qualify(checkpoint_location)
    # Step 1: the snapshot: completed (commits/N), and its plan and record.
    batch = check_retained(checkpoint_location=location, batch_id=batch_id)
    spark_checkpoint = SparkCheckpoint(location=location)
    query_id = spark_checkpoint.query_id()
    plan = spark_checkpoint.plan(batch)
    record = SnapshotStore(checkpoint_location=location).get(batch)
    source = resolve(location)
    # Step 2: the files: Spark's logs of N, sources/, the state that loads N + 1.
    provider = provider_of(plan.metadata.get("conf"))
    files, state = _files_of(source, location, batch, record, provider)
    operators = _operators(location, batch, provider, record, state)
    # Step 3: copy into the in-progress folder, the manifest last, then publish.
    name, final, work = new_folder(savepoint_dir, f"savepoint-{batch}")
    try:
        _copy(files, source=source, work=work, location=location, batch=batch)
        manifest = SavepointManifest(
            savepoint_id=name,
            batch_id=batch,
            query_id=query_id,
            query_name=record.query_name if record is not None else None,
            checkpoint=location,
            source_offsets=list(plan.sources),
            sink=_sink_of(record, query_id, qualify(table) if table else None),
            provider=(provider or _provider_guess(state)) if operators else None,
            state_version=batch + 1 if operators else None,
            operators=operators,
            files=sorted(files, key=lambda f: f.path),
            versions=package_versions(),
            reason=reason,
            record=json.loads(record.to_json()) if record is not None else None,
        )
        work.child(MANIFEST).write_atomic(manifest.to_json() + "\n")
        if work != final:
            work.fs.move(work.path, final.path)
    except BaseException:
        discard_incomplete(work)
        raise
    log.info(
        "savepoint %s: snapshot %d of query %s (%d files, %d bytes)",
        final,
        batch,
        query_id,
        len(manifest.files),
        manifest.total_bytes,
    )
    return Savepoint(location=_uri(savepoint_dir, name), manifest=manifest)


def new_folder(savepoint_dir: str, prefix: str) -> tuple[str, Location, Location]:
    """A new savepoint's name (``prefix``, the time, a random tag), its folder under
    ``savepoint_dir``, and the folder it is written in (on a local file system a hidden
    in-progress one, moved into place when complete)."""
    name = f"{prefix}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"
    root = resolve(qualify(savepoint_dir))
    final = root.child(name)
    return name, final, root.child(f".{name}{IN_PROGRESS}") if final.is_local else final


def discard_incomplete(work: Location, *, what: str = "savepoint") -> None:
    """An incomplete savepoint's folder removed (if that fails, it has no manifest:
    listings skip it anyway)."""
    try:
        work.delete_dir()
    except OSError as cleanup:
        log.warning("could not remove the incomplete %s %s: %s", what, work, cleanup)


def _files_of(
    source: Location,
    location: str,
    batch: int,
    record: SnapshotRecord | None,
    provider: Provider | None,
) -> tuple[list[StateFile], list[StateFile]]:
    """Step 2: the files a savepoint of ``batch`` copies (Spark's logs of N, sources/, the
    state that loads N + 1, under ``state/``), and the state files as the state lists
    them."""
    commit_text = source.child("commits", str(batch)).read_text()
    logs = [f"offsets/{batch}", f"commits/{batch}", "metadata"]
    if batch > 0 and source.child("offsets", str(batch - 1)).exists():
        logs.append(f"offsets/{batch - 1}")
    if record is not None:
        logs.append(f"{STORE_DIR}/{batch}.json")
    files = [StateFile(path=p, size=_size(source.child(p))) for p in logs]
    files += [
        StateFile(path=posixpath.relpath(i.path, source.path), size=int(i.size or 0))
        for i in source.child("sources").list(recursive=True)
        if i.type.name == "File" and not i.base_name.endswith(".crc")
    ]
    try:
        state = state_files(
            checkpoint_location=location,
            batch_id=batch,
            provider=provider,
            unique_ids=_unique_ids(commit_text),
        )
    except StateFilesError as e:
        raise SavepointError(f"cannot savepoint snapshot {batch} of {location}: {e}") from e
    files += [replace(f, path=f"state/{f.path}") for f in state]
    return files, state


def _copy(
    files: list[StateFile], *, source: Location, work: Location, location: str, batch: int
) -> None:
    """Step 3: each file into ``work``'s checkpoint; a size that changed since it was
    listed is put in ``files`` as copied."""
    for i, f in enumerate(files):
        if i == len(files) // 2:
            failpoint(FaultPoint.IN_SAVEPOINT, batch)
        try:
            copied = source.child(f.path).copy_to(work.child(CHECKPOINT, f.path))
        except FileNotFoundError as e:
            raise SavepointError(
                f"{location}/{f.path} vanished while the savepoint copied it (Spark's "
                f"cleanup purged snapshot {batch}'s files); try again, or savepoint a "
                "newer snapshot"
            ) from e
        if copied != f.size:
            files[files.index(f)] = replace(f, size=copied)


def load_savepoint(*, location: str) -> Savepoint:
    """The savepoint at ``location``; :class:`SavepointError` if it has no readable
    manifest (an incomplete savepoint, or not one)."""
    folder = resolve(qualify(location))
    path = folder.child(MANIFEST)
    try:
        manifest = SavepointManifest.from_json(path.read_text())
    except FileNotFoundError as e:
        raise SavepointError(
            f"{location} is not a complete savepoint: {MANIFEST} is missing (a savepoint "
            "whose creation did not finish, or another folder)"
        ) from e
    except (ValueError, TypeError, KeyError) as e:
        raise SavepointError(f"{path}: unreadable savepoint manifest ({e})") from e
    return Savepoint(location=qualify(location), manifest=manifest)


def list_savepoints(*, savepoint_dir: str) -> list[Savepoint]:
    """The complete savepoints under ``savepoint_dir``, oldest first; folders without a
    manifest (in progress, or left by a crash) are skipped."""
    root = resolve(qualify(savepoint_dir))
    found = []
    for info in root.list():
        if info.type.name != "Directory" or info.base_name.startswith("."):
            continue
        if not root.child(info.base_name, MANIFEST).exists():
            continue
        try:
            found.append(load_savepoint(location=_uri(savepoint_dir, info.base_name)))
        except SavepointError as e:
            log.warning("skipping %s: %s", info.path, e)
    return sorted(found, key=lambda s: (s.manifest.created_ms, s.manifest.savepoint_id))


def verify_files(savepoint: Savepoint) -> None:
    """Every file the manifest lists is in the savepoint with its size, else a
    :class:`SavepointError` naming the first one that is not."""
    folder = resolve(savepoint.checkpoint)
    sizes = {
        posixpath.relpath(i.path, folder.path): int(i.size or 0)
        for i in folder.list(recursive=True)
        if i.type.name == "File"
    }
    for f in savepoint.manifest.files:
        if f.path not in sizes:
            raise SavepointError(
                f"savepoint {savepoint.location} is damaged: {CHECKPOINT}/{f.path} is "
                f"missing (the manifest lists it, {f.size} bytes)"
            )
        if sizes[f.path] != f.size:
            raise SavepointError(
                f"savepoint {savepoint.location} is damaged: {CHECKPOINT}/{f.path} has "
                f"{sizes[f.path]} bytes, the manifest says {f.size}"
            )


def package_versions() -> dict[str, str]:
    """Versions of what wrote the savepoint (Spark's state format may change with them)."""
    from importlib.metadata import PackageNotFoundError, version

    from spark_chkpt.version import __version__

    found = {"spark_chkpt": __version__, "python": platform.python_version()}
    for package in ("pyspark", "deltalake"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found


def _operators(
    location: str,
    batch: int,
    provider: Any,
    record: SnapshotRecord | None,
    copied: list[StateFile],
) -> list[OperatorInfo]:
    recorded = {
        int(o.get("operator_id", -1)): o for o in (record.state_operators if record else [])
    }
    result = []
    for op in state_operators(checkpoint_location=location, batch_id=batch, provider=provider):
        mine = [f for f in copied if f.path.split("/", 1)[0] == str(op.operator_id)]
        keys = recorded.get(op.operator_id, {}).get("keys")
        result.append(
            OperatorInfo(
                operator_id=op.operator_id,
                name=op.name,
                stores=list(op.store_names),
                partitions=op.partitions,
                version=op.version,
                keys=int(keys) if keys is not None else None,
                files=len(mine),
                bytes=sum(f.size for f in mine),
            )
        )
    return result


def _sink_of(record: SnapshotRecord | None, query_id: str, table: str | None) -> SinkInfo | None:
    if record is None and table is None:
        return None
    return SinkInfo(
        kind=record.sink if record is not None else "chkpt-delta",
        target=table if table is not None else (record.target if record is not None else None),
        table_version=record.table_version if record is not None else None,
        mode=record.mode if record is not None else None,
        app_id=record.app_id if record is not None else query_id,
        dead_letters=record.dead_letter_target if record is not None else None,
        dead_letter_version=record.dead_letter_version if record is not None else None,
    )


def _provider_guess(files: list[StateFile]) -> str | None:
    names = {posixpath.basename(f.path).rsplit(".", 1)[-1] for f in files}
    if names & {"zip", "changelog"}:
        return "rocksdb"
    if names & {"delta", "snapshot"}:
        return "hdfs"
    return None


def _unique_ids(commit_text: str) -> dict[str, Any] | None:
    """``stateUniqueIds`` of a ``commits/N`` file (checkpoint format 2), else None."""
    lines = commit_text.splitlines()
    try:
        doc = json.loads(lines[1]) if len(lines) > 1 else {}
    except ValueError:
        return None
    ids = doc.get("stateUniqueIds") if isinstance(doc, dict) else None
    return ids if isinstance(ids, dict) else None


def _size(location: Location) -> int:
    info = location.fs.get_file_info(location.path)
    if info.type.name != "File":
        raise SavepointError(f"{location} is missing: the checkpoint cannot be savepointed")
    return int(info.size or 0)


def _uri(directory: str, name: str) -> str:
    return posixpath.join(qualify(directory), name)


def describe(manifest: SavepointManifest) -> Mapping[str, Any]:
    """The manifest's figures in one flat mapping (what ``spark-chkpt savepoint list``
    prints)."""
    sink = manifest.sink
    return {
        "savepoint": manifest.savepoint_id,
        "batch": manifest.batch_id,
        "query": manifest.query_name or manifest.query_id,
        "sink": sink.kind if sink else None,
        "table_version": sink.table_version if sink else None,
        "operators": len(manifest.operators),
        "keys": sum(o.keys or 0 for o in manifest.operators)
        if any(o.keys is not None for o in manifest.operators)
        else None,
        "files": len(manifest.files),
        "bytes": manifest.total_bytes,
        "reason": manifest.reason,
        "created": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(manifest.created_ms / 1000)),
    }
