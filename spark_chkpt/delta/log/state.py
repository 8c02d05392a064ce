"""The Delta table a process keeps across batches, advanced by reading new commits by version.

delta-rs lists the whole ``_delta_log`` whenever it loads or advances a table and twice
in a commit (~30 ms each at 10,000 versions). Here a process keeps, per table (URI and
storage options), a delta-rs table loaded once (``base``) and reads only the JSON
commits after it, by version (no listing): the txn versions they set, the newest
commit's in-commit timestamp, the row tracking domain. :class:`KeptTable` answers
``version()`` and ``transaction_version()`` from them, ``schema()`` / ``metadata()`` /
``protocol()`` from ``base`` (a ``metaData`` or ``protocol`` action makes the table
load again), anything else from ``base`` brought up to date (one listing). An append to
a local table is then the project's own put-if-absent commit
(:mod:`spark_chkpt.delta.log.commit`) on the kept state.

Loaded again from scratch when in doubt: the JSON commit of the version last read has
other bytes (deleted or replaced at the same path), the JSON commit of ``base``'s
checkpoint is gone (log clean-up), the metadata, protocol or table id changed; and after
:data:`INCREMENTAL_VERSIONS` versions advanced by delta-rs's ``update_incremental``
(which holds memory for each). More: docs/concepts/delta-internals.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from spark_chkpt.delta.log.commit import LogState, load_state
from spark_chkpt.delta.log.upkeep import last_checkpoint
from spark_chkpt.fs import Location


class DeltaTarget(Protocol):
    """What the kept table needs of :class:`spark_chkpt.delta.table.target.DeltaTarget`."""

    uri: str
    storage_options: dict[str, str]
    location: Location

    def open(self) -> Any | None: ...
    def has_commit(self, version: int) -> bool: ...
    def commit_bytes(self, version: int) -> bytes | None: ...
    def commit_digest(self, version: int) -> str | None: ...
    def latest(self) -> Any | None: ...
    def open_at(self, version: int) -> Any: ...


log = logging.getLogger(__name__)

# How this process got its tables: "loaded" from scratch (a listing), "advanced" by new
# commits only, "listed": a kept table brought up to date by delta-rs (a listing),
# "read": JSON commits read by version.
LOADS: dict[str, int] = {"loaded": 0, "advanced": 0, "listed": 0, "read": 0}

_Key = tuple[str, tuple[tuple[str, str], ...]]

# The versions a kept delta-rs table is advanced over by ``update_incremental`` before it
# is loaded afresh instead (one load from the last checkpoint, per this many commits).
INCREMENTAL_VERSIONS = 100


@dataclass
class _Kept:
    """One table kept in this process: ``base`` (delta-rs, at ``base_version``, loaded
    at ``loaded_version``), the commits read after it (``version``: the newest,
    ``digest``: of its JSON commit; ``txns``: the txn versions they set), the table's id,
    the checkpoint ``base`` was loaded from (``anchor``, 0: none)."""

    base: Any
    base_version: int
    version: int
    digest: str
    table_id: str
    anchor: int
    loaded_version: int = 0
    txns: dict[str, int] = field(default_factory=dict)
    ict: int | None = None  # the newest commit's inCommitTimestamp
    ict_known: bool = False
    domains: dict[str, str] | None = None  # at ``version`` (None: not read yet)


_KEPT: dict[_Key, _Kept] = {}
_VIEWS: dict[_Key, KeptTable] = {}
_LOCK = threading.RLock()


class KeptTable:
    """A delta-rs ``DeltaTable`` as :meth:`DeltaTarget.latest` keeps it: at the newest
    version read; ``version()``, ``transaction_version()``, ``schema()``, ``metadata()``
    and ``protocol()`` without a listing, any other attribute from the delta-rs table
    brought up to date (:meth:`current`)."""

    def __init__(self, target: DeltaTarget, kept: _Kept) -> None:
        self._target = target
        self._kept = kept  # advanced in place; a table loaded again gets a new view

    @property
    def kept(self) -> _Kept:
        return self._kept

    def version(self) -> int:
        return self.kept.version

    def transaction_version(self, app_id: str) -> int | None:
        kept = self.kept
        if app_id in kept.txns:
            return kept.txns[app_id]
        found = kept.base.transaction_version(app_id)
        return int(found) if found is not None else None

    def schema(self) -> Any:
        return self.kept.base.schema()

    def metadata(self) -> Any:
        return self.kept.base.metadata()

    def protocol(self) -> Any:
        return self.kept.base.protocol()

    def current(self) -> Any:
        """The delta-rs table at this table's version or later (one listing if commits
        were read since it was loaded)."""
        with _LOCK:
            kept = self.kept
            if kept.base_version == kept.version:
                return kept.base
            LOADS["listed"] += 1
            if kept.version - kept.loaded_version > INCREMENTAL_VERSIONS:
                anchor = last_checkpoint(self._target) or 0  # before the load, as latest()
                fresh = self._target.open()  # bounded memory: see the module docstring
                if fresh is None:
                    raise FileNotFoundError(f"Delta table {self._target.uri} is gone")
                kept.base, kept.loaded_version = fresh, int(fresh.version())
                kept.anchor = anchor
            else:
                try:
                    kept.base.update_incremental()
                except Exception as e:  # gone or unreadable: the next latest() decides
                    log.debug("Delta table %s: update_incremental failed (%s)", self._target.uri, e)
                    raise
            version = int(kept.base.version())
            if version < kept.version or str(kept.base.metadata().id) != kept.table_id:
                # replaced under us: a table loaded afresh, this view follows it
                fresh = self._target.open()
                if fresh is None:
                    raise FileNotFoundError(f"Delta table {self._target.uri} is gone")
                kept.base, version = fresh, int(fresh.version())
                kept.table_id, kept.loaded_version = str(fresh.metadata().id), version
                kept.domains = None
            if version != kept.version:
                kept.ict_known = False
                kept.domains = None
            kept.base_version = kept.version = version
            kept.txns = {}
            kept.digest = self._target.commit_digest(version) or ""
            return kept.base

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.current(), name)

    def log_state(self, *, features: frozenset[str], configuration: Mapping[str, str]) -> LogState:
        """The :class:`LogState` an append on this table builds on, from what was read
        (the row tracking domain read once from the log, then kept)."""
        with _LOCK:
            kept = self.kept
            if not kept.ict_known:
                data = self._target.commit_bytes(kept.version)
                kept.ict = _ict(data.decode() if data is not None else None)
                kept.ict_known = True
            if kept.domains is None:
                if {"domainMetadata", "rowTracking", "clustering"} & features:
                    kept.domains = dict(
                        load_state(
                            self._target.location,
                            version=kept.version,
                            features=features,
                            configuration=configuration,
                        ).domains
                    )
                else:
                    kept.domains = {}
            return LogState(
                version=kept.version,
                ict=kept.ict,
                domains=dict(kept.domains),
                features=features,
                configuration=dict(configuration),
            )


def delta_rs(table: Any) -> Any:
    """The delta-rs ``DeltaTable`` behind ``table`` (a :class:`KeptTable`'s, brought up to
    date; any other table as it is), for delta-rs calls that take the table itself
    (``QueryBuilder.register`` reads its private ``_table``)."""
    return table.current() if isinstance(table, KeptTable) else table


def latest(target: DeltaTarget) -> Any | None:
    """``target``'s table kept in this process, advanced by the commits made since it was
    last read (see the module docstring); None if there is no table."""
    key = (target.uri, tuple(sorted(target.storage_options.items())))
    with _LOCK:
        kept = _KEPT.pop(key, None)
        if kept is not None and _advance(target, kept):
            LOADS["advanced"] += 1
            log.debug("Delta table %s advanced to version %s", target.uri, kept.version)
        else:
            anchor = last_checkpoint(target) or 0
            table = target.open()
            if table is None:
                _VIEWS.pop(key, None)
                return None
            LOADS["loaded"] += 1
            version = int(table.version())
            kept = _Kept(
                base=table,
                base_version=version,
                version=version,
                digest=target.commit_digest(version) or "",
                table_id=str(table.metadata().id),
                anchor=anchor,
                loaded_version=version,
            )
            log.debug("Delta table %s loaded at version %s", target.uri, version)
        if not kept.digest or not target.has_commit(kept.anchor):
            # no JSON commit to check it by next time: a plain table, not kept
            _VIEWS.pop(key, None)
            return kept.base if kept.base_version == kept.version else target.open()
        _KEPT[key] = kept
        view = _VIEWS.get(key)
        if view is None or view.kept is not kept:
            view = _VIEWS[key] = KeptTable(target, kept)
        return view


def _advance(target: DeltaTarget, kept: _Kept) -> bool:
    """Read the JSON commits after ``kept.version`` into it; False if the table must be
    loaded again (see the module docstring)."""
    if target.commit_digest(kept.version) != kept.digest:
        return False  # deleted, replaced, or that commit cleaned up
    if not target.has_commit(kept.anchor):
        return False  # the log base reads lazily was cleaned up
    while True:
        data = target.commit_bytes(kept.version + 1)
        if data is None:
            return True
        text = data.decode()
        LOADS["read"] += 1
        version = kept.version + 1
        ict: int | None = None
        for line in text.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "metaData" in action or "protocol" in action:
                return False  # schema, properties, features: delta-rs loads them
            txn = action.get("txn")
            if isinstance(txn, dict):
                kept.txns[str(txn.get("appId"))] = int(txn["version"])
            info = action.get("commitInfo")
            if isinstance(info, dict) and info.get("inCommitTimestamp") is not None:
                ict = int(info["inCommitTimestamp"])
            dm = action.get("domainMetadata")
            if isinstance(dm, dict) and kept.domains is not None:
                if dm.get("removed"):
                    kept.domains.pop(dm["domain"], None)
                else:
                    kept.domains[dm["domain"]] = dm["configuration"]
        kept.version, kept.ict, kept.ict_known = version, ict, True
        kept.digest = _digest(data)


def _ict(text: str | None) -> int | None:
    for line in (text or "").splitlines():
        if '"commitInfo"' in line:
            info = json.loads(line).get("commitInfo")
            if isinstance(info, dict) and info.get("inCommitTimestamp") is not None:
                return int(info["inCommitTimestamp"])
    return None


def _digest(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


def forget(target: DeltaTarget) -> None:
    """Drop ``target``'s kept table (the next :func:`latest` loads it afresh)."""
    key = (target.uri, tuple(sorted(target.storage_options.items())))
    with _LOCK:
        _KEPT.pop(key, None)
        _VIEWS.pop(key, None)
