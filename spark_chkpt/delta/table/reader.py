"""A Delta table read: opened (fresh, kept across batches, or as of a version), its
commits read by version, the ``txn(appId)`` commit looked for, the files it references.

:class:`TableReader` is the reading part of the door to delta-rs
(:class:`~spark_chkpt.delta.table.target.DeltaTarget`); the table's protocol checks
(:mod:`~spark_chkpt.delta.table.protocol`) and its commits
(:mod:`~spark_chkpt.delta.table.writer`) build on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from spark_chkpt.delta.features.protocol import TableProtocol, check_table
from spark_chkpt.delta.log import state as log_state
from spark_chkpt.errors import (
    NotADeltaTableError,
)
from spark_chkpt.fs import Location, resolve
from spark_chkpt.snapshot.epoch import generation_app_id

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TxnCommit:
    """The commit that set ``txn(appId)`` to a version: its Delta version and commitInfo."""

    version: int
    info: dict[str, Any]
    txns: dict[str, int] = field(default_factory=dict)  # every txn it set (commit_at)


# How this process got its tables (spark_chkpt.delta.log.state): loaded, advanced, ...
LOADS = log_state.LOADS


class TableReader:
    """One Delta table addressed by URI, read: :meth:`latest` for a batch's decisions
    (one table per process, advanced by the new commits), :meth:`open` opened fresh."""

    def __init__(self, *, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self.location: Location = resolve(uri, storage_options=self.storage_options)

    def open(self) -> Any | None:
        """The ``DeltaTable`` at its latest version, or None if there is no table yet."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.uri, storage_options=self.storage_options or None):
            return None
        try:
            return DeltaTable(self.uri, storage_options=self.storage_options or None)
        except Exception:
            self.refuse_unloadable()
            raise

    def refuse_unloadable(self) -> None:
        """For a table delta-rs cannot load: :class:`~spark_chkpt.errors.TableFeatureError`
        naming the feature if its newest protocol action (read from the JSON commits)
        requires one spark-chkpt refuses or does not know (a catalog-managed table's
        ``catalogManaged``); else nothing (delta-rs's own error stands)."""
        log_dir = self.location.child("_delta_log")
        try:
            names = [i.base_name for i in log_dir.list()]
        except Exception:
            return
        versions = sorted(
            (int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()),
            reverse=True,
        )
        for version in versions:
            for line in log_dir.child(f"{version:020d}.json").read_text().splitlines():
                if '"protocol"' not in line:
                    continue
                p = json.loads(line).get("protocol")
                if not isinstance(p, dict):
                    continue
                found = TableProtocol(
                    uri=self.uri,
                    min_reader_version=int(p.get("minReaderVersion", 1)),
                    min_writer_version=int(p.get("minWriterVersion", 2)),
                    reader_features=frozenset(p.get("readerFeatures") or ()),
                    writer_features=frozenset(p.get("writerFeatures") or ()),
                )
                check_table(found, writer="spark-chkpt", operation="append")
                return

    def latest(self) -> Any | None:
        """The table at its latest version, or None if there is no table yet, as
        :meth:`open` but kept in this process across batches
        (:mod:`spark_chkpt.delta.log.state`): only the JSON commits made since it was
        last read are read, by version, so a batch's cost does not grow with the
        table's history. Every caller gets the same object (a
        :class:`~spark_chkpt.delta.log.state.KeptTable`); other writers' commits, a
        protocol or schema change, a table deleted or replaced at the same path are
        seen as by :meth:`open`."""
        return log_state.latest(self)

    def has_commit(self, version: int) -> bool:
        return self.location.child("_delta_log", f"{version:020d}.json").exists()

    def commit_bytes(self, version: int) -> bytes | None:
        """The JSON commit of ``version`` (None: there is none)."""
        try:
            return self.location.child("_delta_log", f"{version:020d}.json").read_bytes()
        except (FileNotFoundError, OSError):
            return None

    def commit_digest(self, version: int) -> str | None:
        """A digest of the JSON commit of ``version`` (None: there is none)."""
        data = self.commit_bytes(version)
        return hashlib.sha1(data, usedforsecurity=False).hexdigest() if data is not None else None

    def last_version(self, table: Any) -> int:
        """The table's latest version: ``table``'s, or a later one whose JSON commit is
        there (a commit made since ``table`` was read), found without listing the log."""
        version = int(table.version())
        while self.has_commit(version + 1):
            version += 1
        return version

    def require(self) -> Any:
        """The ``DeltaTable`` at its latest version; :class:`NotADeltaTableError` (with
        delta-rs's words) if there is none."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.uri, storage_options=dict(self.storage_options))
        except TableNotFoundError as e:
            # delta-rs adds its Rust error's debug form on a second line
            # ("Error: Os { code: 2, ... }"): one line is enough.
            raise NotADeltaTableError((str(e).strip().splitlines() or [repr(e)])[0]) from e
        except Exception:
            self.refuse_unloadable()
            raise

    def open_at(self, version: int) -> Any:
        """The ``DeltaTable`` as of ``version`` (time travel; its files must be there)."""
        from deltalake import DeltaTable

        return DeltaTable(self.uri, version=version, storage_options=self.storage_options or None)

    @staticmethod
    def arrow_schema(table: Any) -> pa.Schema:
        import pyarrow as pa

        return pa.schema(table.schema().to_arrow())

    def rows(self, table: Any) -> pa.Table:
        """Every row of ``table`` (an opened version) through delta-rs's DataFusion
        reader, which applies column mapping and deletion vectors
        (``to_pyarrow_table()`` does not apply column mapping)."""
        import pyarrow as pa
        from deltalake import QueryBuilder

        reader = QueryBuilder().register("t", log_state.delta_rs(table)).execute("SELECT * FROM t")
        return pa.table(reader.read_all())

    def generation(self, table: Any | None, *, app_id: str) -> int | None:
        """The generation of ``app_id`` the table records (:mod:`spark_chkpt.snapshot.epoch`;
        None: none recorded, a table no restore or recover of the app id touched)."""
        if table is None:
            return None
        version = table.transaction_version(generation_app_id(app_id))
        return int(version) if version is not None else None

    def commit_at(self, version: int) -> TxnCommit | None:
        """The commit of Delta ``version`` (its commitInfo and txn versions by app id), or
        None when its JSON commit is gone."""
        try:
            text = self.location.child("_delta_log", f"{version:020d}.json").read_text()
        except FileNotFoundError:
            return None
        info: dict[str, Any] = {}
        txns: dict[str, int] = {}
        for line in text.splitlines():
            if '"commitInfo"' not in line and '"txn"' not in line:
                continue
            action = json.loads(line)
            if isinstance(action.get("commitInfo"), dict):
                info = project_info(action["commitInfo"])
            elif isinstance(action.get("txn"), dict):
                txns[str(action["txn"].get("appId"))] = int(action["txn"]["version"])
        return TxnCommit(version=version, info=info, txns=txns)

    def find_txn_commit(self, table: Any, *, app_id: str, txn_version: int) -> TxnCommit | None:
        """The commit whose ``txn`` action set ``app_id`` to ``txn_version``, or None.

        Reads the JSON commits from the table's latest version (:meth:`last_version`:
        ``table`` may be older than the commit looked for) back, with no fixed limit
        (any number of other writers' commits may have followed), and stops at the first
        of: that commit; a commit of ``app_id`` with a lower txn version (``app_id``'s
        versions only grow, so the one wanted is not further back); a version whose JSON
        commit is gone (cleaned up after a checkpoint); version 0.
        """
        log_dir = self.location.child("_delta_log")
        for version in range(self.last_version(table), -1, -1):
            try:
                text = log_dir.child(f"{version:020d}.json").read_text()
            except FileNotFoundError:
                return None
            info: dict[str, Any] = {}
            txn: int | None = None
            for line in text.splitlines():
                if '"commitInfo"' not in line and '"txn"' not in line:
                    continue  # add actions: skip parsing their statistics
                action = json.loads(line)
                if isinstance(action.get("commitInfo"), dict):
                    info = project_info(action["commitInfo"])
                elif isinstance(action.get("txn"), dict) and action["txn"].get("appId") == app_id:
                    txn = int(action["txn"]["version"])
            if txn == txn_version:
                return TxnCommit(version=version, info=info)
            if txn is not None and txn < txn_version:
                return None
        return None

    def small_files(
        self, table: Any, *, below: int, partition_by: Sequence[str]
    ) -> dict[tuple[tuple[str, str | None], ...], int]:
        """How many of ``table``'s files are smaller than ``below`` bytes, per partition
        (its ``partition_by`` values as the log writes them, sorted by column; ``()``
        for an unpartitioned table)."""
        import pyarrow as pa

        adds = pa.table(table.get_add_actions(flatten=True))
        sizes = adds.column("size_bytes").to_pylist()
        names = sorted(partition_by)
        columns = [
            adds.column(f"partition.{n}").to_pylist()
            if f"partition.{n}" in adds.column_names
            else [None] * len(sizes)
            for n in names
        ]
        counts: dict[tuple[tuple[str, str | None], ...], int] = {}
        for i, size in enumerate(sizes):
            if size is None or size >= below:
                continue
            key = tuple(
                (n, None if c[i] is None else str(c[i]))
                for n, c in zip(names, columns, strict=True)
            )
            counts[key] = counts.get(key, 0) + 1
        return counts

    def referenced(self, table: Any, *, whole_log: bool = False) -> set[str]:
        """Relative paths the table references now; with ``whole_log``, also every path
        any JSON commit still in ``_delta_log`` added or removed (so time travel keeps
        its files)."""
        import pyarrow as pa

        if table is None:
            return set()
        adds = pa.table(table.get_add_actions(flatten=False))
        paths = {unquote(p) for p in adds.column("path").to_pylist()}
        if whole_log:
            log_dir = self.location.child("_delta_log")
            for info in log_dir.list():
                if not info.base_name.endswith(".json"):
                    continue
                for line in log_dir.child(info.base_name).read_text().splitlines():
                    if '"add"' in line or '"remove"' in line:
                        # a file a commit still in the log removes (an auto
                        # compaction's) is read by time travel before that commit
                        parsed = json.loads(line)
                        action = parsed.get("add") or parsed.get("remove")
                        if action:
                            paths.add(unquote(action["path"]))
        return paths


def project_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """A commit's commitInfo with the project's keys at the top level: delta-rs writes
    them there; a MERGE committed through delta-spark carries them as a JSON object in
    ``userMetadata`` (:mod:`spark_chkpt.delta.upsert.spark_merge`)."""
    found = dict(info)
    text = found.get("userMetadata")
    if isinstance(text, str) and text.startswith("{"):
        try:
            extra = json.loads(text)
        except ValueError:
            return found
        if isinstance(extra, dict):
            found |= {k: v for k, v in extra.items() if str(k).startswith("chkpt.")}
    return found
