"""The project's own Delta commit of an append, for tables delta-rs refuses to commit to.

delta-rs 1.x commits to no table whose protocol lists rowTracking, domainMetadata (so
liquid clustering), inCommitTimestamp or typeWidening. For an append to such a table
(``chkpt-delta``'s batches and its dead-letter table's) the driver writes
``_delta_log/<version:020>.json`` itself, with the actions delta-spark writes: the
``commitInfo`` (first, with ``inCommitTimestamp`` when in-commit timestamps are on), a
``domainMetadata`` of ``delta.rowTracking`` with the new row-id high-water mark, the
staged files' ``add`` actions (``baseRowId`` and ``defaultRowCommitVersion``), the
``txn(appId, N)`` and the snapshot record in ``commitInfo`` as delta-rs puts it there.
Other domains (liquid clustering's ``delta.clustering``) are left as they are.

The file is created only if absent (:func:`~spark_chkpt.delta.log.commit_safety.put_if_absent`);
a lost race reads the commits that won (:func:`advance`): ``txn(appId) >= N`` there is
an idempotent success (nothing written), a protocol change is checked again (a feature
spark-chkpt cannot honour is a :class:`TableFeatureError`), a metadata change is a
:class:`CommitConflictError` (the coordinator checks the batch again from its step 3);
anything else (another append) moves the row ids and the timestamp on, and the commit
is tried at the next version. More: docs/concepts/delta-features.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

from spark_chkpt.delta.features.protocol import TableProtocol
from spark_chkpt.delta.log.commit_safety import put_if_absent_store
from spark_chkpt.delta.staging import StagedFile
from spark_chkpt.errors import CommitConflictError, TableFeatureError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.fs import Location
from spark_chkpt.version import __version__

# The writer features delta-rs 1.x refuses and this commit honours for appends.
OWN_COMMIT_FEATURES = frozenset(
    {
        "domainMetadata",
        "identityColumns",
        "rowTracking",
        "inCommitTimestamp",
        "clustering",
        "typeWidening",
        "typeWidening-preview",
    }
)
ROW_TRACKING_DOMAIN = "delta.rowTracking"
MAX_RACES = 10  # versions tried before the coordinator is handed a CommitConflictError


def needs_own_commit(found: TableProtocol) -> bool:
    """Whether appends to the table go through this commit (delta-rs refuses it)."""
    return bool(OWN_COMMIT_FEATURES & set(found.required()))


def check_own_commit_store(found: TableProtocol, *, writer: str, done: str = "") -> None:
    """Raise :class:`TableFeatureError` (ending in ``done``, else "Nothing was staged.") if
    appends to ``found`` need this commit and its store has no put-if-absent here."""
    store = put_if_absent_store(found.uri)
    if store is None or not needs_own_commit(found):
        return
    name = next(n for n in found.required() if n in OWN_COMMIT_FEATURES)
    raise TableFeatureError(
        f"{writer}: Delta table {found.uri} requires table feature '{name}': spark-chkpt "
        "commits to such tables itself, which needs a create-if-absent of the "
        f"commit file, and it has none for {store}. Way forward: write this table with "
        f"format('delta') (delta-spark), or keep it on a local file system or S3. "
        f"{done or 'Nothing was staged.'}",
        feature=name,
        table=found.uri,
    )


@dataclass(frozen=True)
class LogState:
    """What an append builds on: the table's ``version``, its in-commit timestamp, its
    domains (name to configuration JSON, removed ones gone), its writer features and
    configuration."""

    version: int
    ict: int | None
    domains: Mapping[str, str] = field(default_factory=dict)
    features: frozenset[str] = frozenset()
    configuration: Mapping[str, str] = field(default_factory=dict)

    def flag(self, key: str) -> bool:
        return str(self.configuration.get(key, "false")).strip().lower() == "true"

    @property
    def row_tracking(self) -> bool:
        """Row ids are assigned: the feature supported and not suspended (PROTOCOL.md)."""
        return "rowTracking" in self.features and not self.flag("delta.rowTrackingSuspended")

    @property
    def row_commit_versions(self) -> bool:
        """``defaultRowCommitVersion`` is set: row tracking, or type widening (which
        requires it of new files)."""
        widening = {"typeWidening", "typeWidening-preview"} & self.features
        return self.row_tracking or bool(widening)

    @property
    def in_commit_timestamps(self) -> bool:
        return self.flag("delta.enableInCommitTimestamps")

    def high_water_mark(self) -> int:
        """The highest row id assigned so far (-1: none)."""
        text = self.domains.get(ROW_TRACKING_DOMAIN)
        return int(json.loads(text)["rowIdHighWaterMark"]) if text else -1


@dataclass(frozen=True)
class NewFiles:
    """What an own commit adds (an append's or a replacement's): the staged ``files``, the
    ``txns`` (app id to version) and ``metadata`` of its commitInfo, the table's
    ``partition_by`` and ``meta``, a ``metaData`` action to write with them (identity
    high-water marks, :func:`spark_chkpt.delta.features.identity.identity_metadata`)."""

    files: Sequence[StagedFile]
    txns: Mapping[str, int]
    metadata: Mapping[str, Any]
    partition_by: Sequence[str]
    meta: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class OwnCommit:
    """The table an own commit goes to: ``location`` (``uri`` in its errors),
    ``put(location, text)`` creating a log file if absent (False: it exists), ``check``
    of the protocol a commit that won the race moved to, ``clock`` for its timestamp."""

    location: Location
    uri: str
    put: Callable[[Location, str], bool]
    check: Callable[[TableProtocol], None]
    clock: Callable[[], float] = time.time


def build_append(state: LogState, *, new: NewFiles, now_ms: int) -> str:
    """The JSON commit of version ``state.version + 1`` appending ``new`` (its files, its
    txns and metadata in the commitInfo, its ``metaData`` action if any; pure)."""
    files, txns, metadata, meta = new.files, new.txns, new.metadata, new.meta
    partition_by = new.partition_by
    version = state.version + 1
    operation = {
        "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": json.dumps(list(partition_by))},
        "readVersion": state.version,
        "isolationLevel": "WriteSerializable",
        "isBlindAppend": True,
    }
    info = commit_info(state, now_ms=now_ms, operation=operation, metadata=metadata)
    actions: list[dict[str, Any]] = [{"commitInfo": info}]
    if meta is not None:
        actions.append(dict(meta))
    next_id = state.high_water_mark() + 1
    adds = []
    for f in files:
        add: dict[str, Any] = {
            "path": quote(f.path, safe="/="),
            "partitionValues": dict(f.partition_values),
            "size": f.size,
            "modificationTime": f.modification_time,
            "dataChange": True,
            "stats": f.stats,
        }
        if state.row_tracking:
            add["baseRowId"] = next_id
            next_id += f.rows
        if state.row_commit_versions:
            add["defaultRowCommitVersion"] = version
        adds.append({"add": add})
    if state.row_tracking and next_id - 1 > state.high_water_mark():
        mark = json.dumps({"rowIdHighWaterMark": next_id - 1}, separators=(",", ":"))
        actions.append(
            {
                "domainMetadata": {
                    "domain": ROW_TRACKING_DOMAIN,
                    "configuration": mark,
                    "removed": False,
                }
            }
        )
    actions += adds
    return log_text(actions + txn_actions(txns, now_ms=now_ms))


def commit_info(
    state: LogState, *, now_ms: int, operation: Mapping[str, Any], metadata: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``commitInfo`` of the project's own commit on ``state``: its timestamp (an
    in-commit timestamp after the last one where the table keeps them), the
    ``operation``'s fields, the engine, ``metadata``, row tracking's tag."""
    info: dict[str, Any] = {"timestamp": now_ms}
    if state.in_commit_timestamps:
        ict = max(now_ms, (state.ict or 0) + 1)
        info = {"timestamp": ict, "inCommitTimestamp": ict}
    info |= {**operation, "engineInfo": f"spark-chkpt/{__version__}", **dict(metadata)}
    if state.row_tracking:
        info["tags"] = {"delta.rowTracking.preserved": "true"}
    return info


def txn_actions(txns: Mapping[str, int], *, now_ms: int) -> list[dict[str, Any]]:
    """A ``txn`` action for each app id and its version."""
    return [{"txn": {"appId": app, "version": v, "lastUpdated": now_ms}} for app, v in txns.items()]


def log_text(actions: Sequence[Mapping[str, Any]]) -> str:
    """Actions as the lines of a JSON commit file."""
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)


def advance(
    state: LogState,
    *,
    version: int,
    text: str,
    app_id: str,
    txn_version: int,
    check: Callable[[TableProtocol], None],
    uri: str,
) -> LogState | None:
    """``state`` after another writer's commit ``version`` (its JSON ``text``), which
    won the race; None if it holds ``txn(app_id) >= txn_version`` (the batch is there);
    a protocol action is handed to ``check`` (which raises for a feature that cannot be
    honoured); a metadata action is a :class:`CommitConflictError`."""
    ict, domains, features = state.ict, dict(state.domains), state.features
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "txn" in action and action["txn"].get("appId") == app_id:
            if int(action["txn"]["version"]) >= txn_version:
                return None
        elif "commitInfo" in action:
            stamp = action["commitInfo"].get("inCommitTimestamp")
            ict = int(stamp) if stamp is not None else ict
        elif "domainMetadata" in action:
            dm = action["domainMetadata"]
            if dm.get("removed"):
                domains.pop(dm["domain"], None)
            else:
                domains[dm["domain"]] = dm["configuration"]
        elif "metaData" in action:
            raise CommitConflictError(
                f"Delta table {uri}: version {version}, committed by another writer, "
                "changed the table's metadata (schema or properties)"
            )
        elif "protocol" in action:
            p = action["protocol"]
            found = TableProtocol(
                uri=uri,
                min_reader_version=int(p.get("minReaderVersion", 1)),
                min_writer_version=int(p.get("minWriterVersion", 2)),
                reader_features=frozenset(p.get("readerFeatures") or ()),
                writer_features=frozenset(p.get("writerFeatures") or ()),
                configuration=dict(state.configuration),
            )
            check(found)
            features = frozenset(found.required())
    return replace(state, version=version, ict=ict, domains=domains, features=features)


def load_state(
    location: Location, *, version: int, features: frozenset[str], configuration: Mapping[str, str]
) -> LogState:
    """The :class:`LogState` of the table at ``location`` as of ``version``: its domains
    from the newest checkpoint at or before it and the JSON commits after, its
    in-commit timestamp from the commit of ``version``."""
    log_dir = location.child("_delta_log")
    start, domains = _checkpoint_domains(log_dir, version)
    ict = None
    for v in range(start + 1, version + 1):
        for action in _actions(log_dir.child(f"{v:020d}.json").read_text()):
            dm = action.get("domainMetadata")
            if isinstance(dm, dict):
                if dm.get("removed"):
                    domains.pop(dm["domain"], None)
                else:
                    domains[dm["domain"]] = dm["configuration"]
    try:
        for action in _actions(log_dir.child(f"{version:020d}.json").read_text()):
            if isinstance(action.get("commitInfo"), dict):
                stamp = action["commitInfo"].get("inCommitTimestamp")
                ict = int(stamp) if stamp is not None else None
    except FileNotFoundError:
        ict = None
    return LogState(
        version=version,
        ict=ict,
        domains=domains,
        features=features,
        configuration=dict(configuration),
    )


def _actions(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def checkpoint_files(log_dir: Location, version: int) -> tuple[int, list[str]]:
    """The newest checkpoint at or before ``version`` (-1: none) and its files, sorted."""
    import pyarrow.fs as pafs

    found: dict[int, list[str]] = {}
    for info in log_dir.list():
        name = info.base_name
        head, _, rest = name.partition(".checkpoint")
        if rest and head.isdigit() and int(head) <= version and info.type == pafs.FileType.File:
            found.setdefault(int(head), []).append(name)
    if not found:
        return -1, []
    at = max(found)
    return at, sorted(found[at])


def _checkpoint_domains(log_dir: Location, version: int) -> tuple[int, dict[str, str]]:
    """The newest checkpoint at or before ``version`` (-1: none) and its domains."""
    import pyarrow.parquet as pq

    at, names = checkpoint_files(log_dir, version)
    domains: dict[str, str] = {}
    for name in names:
        path = log_dir.child(name)
        if name.endswith(".json"):  # a v2 checkpoint's top-level file in JSON
            rows = [a.get("domainMetadata") for a in _actions(path.read_text())]
        else:
            schema = pq.read_schema(path.path, filesystem=log_dir.fs)
            if "domainMetadata" not in schema.names:
                continue
            table = pq.read_table(path.path, filesystem=log_dir.fs, columns=["domainMetadata"])
            rows = table.column("domainMetadata").to_pylist()
        for dm in rows:
            if isinstance(dm, dict) and dm.get("domain") and not dm.get("removed"):
                domains[dm["domain"]] = dm["configuration"]
    return at, domains


def commit_append(*, to: OwnCommit, state: LogState, app_id: str, new: NewFiles) -> int | None:
    """Append ``new`` on top of ``state`` to the table ``to``: the version committed, or
    None when a commit that won the race already holds ``txn(app_id) >= new.txns[app_id]``
    (nothing written). ``to.put`` creates the file if absent. After :data:`MAX_RACES` lost
    races, a :class:`CommitConflictError`; also a race lost to another writer's metaData
    when ``new.meta`` is written."""
    return commit_actions(
        to=to,
        state=state,
        app_id=app_id,
        new=new,
        build=lambda at, now_ms: build_append(at, new=new, now_ms=now_ms),
    )


def commit_actions(
    *,
    to: OwnCommit,
    state: LogState,
    app_id: str,
    new: NewFiles,
    build: Callable[[LogState, int], str],
) -> int | None:
    """The own commit's loop (append or replacement of ``new``): ``build(state, now_ms)``
    put as the next version if absent; a lost race read by version (:func:`advance`) and
    built again. The version, or None when a winner holds the txn; MAX_RACES losses:
    CommitConflictError."""
    location, uri, put, check, metadata = to.location, to.uri, to.put, to.check, new.metadata
    txns, clock = new.txns, to.clock
    log_dir = location.child("_delta_log")
    txn_version = txns.get(app_id, -1)
    for _ in range(MAX_RACES):
        version = state.version + 1
        text = build(state, int(clock() * 1000))
        if put(log_dir.child(f"{version:020d}.json"), text):
            # the fault tests' kill point inside the own commit of batch chkpt.batchId to
            # the sink's table (its dead-letter table's commit has after-dead-letters)
            batch = metadata.get("chkpt.batchId")
            if "chkpt.deadLetters" not in metadata:
                failpoint(FaultPoint.AFTER_OWN_COMMIT, int(batch) if batch is not None else None)
            return version
        # lost the race: read every commit that won, by version
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
