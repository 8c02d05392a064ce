"""The Delta table a sink writes: schema checks, atomic commits through delta-rs, orphans.

:class:`DeltaTarget` is the one door to delta-rs (``deltalake``) for the engine: the
transactions (``txn(appId)``), the commit of staged files with their ``commitInfo``
(:func:`commit_properties`), a lost race as ``CommitConflictError`` (:func:`committing`),
``restore_to`` for a rewind, the schema rules and the orphaned files of failed
attempts. More: docs/concepts/delta-internals.md (spark_chkpt/delta/table/target.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence, Set
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from spark_chkpt.delta.features.column_mapping import ColumnMapping
from spark_chkpt.delta.features.constraints import (
    GeneratedColumns,
    TableRules,
    generated_columns,
    table_rules,
)
from spark_chkpt.delta.features.identity import IdentityUse, identity_metadata
from spark_chkpt.delta.features.protocol import Operation, TableProtocol, check_table, read_protocol
from spark_chkpt.delta.log import state as log_state
from spark_chkpt.delta.log.commit import (
    check_own_commit_store,
    commit_append,
    load_state,
    needs_own_commit,
)
from spark_chkpt.delta.log.commit_safety import put_if_absent
from spark_chkpt.delta.log.restore import commit_restore
from spark_chkpt.delta.log.upkeep import no_hooks, upkeep
from spark_chkpt.delta.staging import STAGED_NAME, StagedFile, app_tag, normalize_schema
from spark_chkpt.errors import (
    ChkptError,
    CommitConflictError,
    CommitError,
    CommitFailureReason,
    NotADeltaTableError,
    SchemaMismatchError,
)
from spark_chkpt.fs import Location, resolve
from spark_chkpt.snapshot.epoch import generation_app_id

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchemaPlan:
    """How a batch's schema relates to the table's."""

    new_columns: tuple[str, ...]
    type_changes: tuple[str, ...]  # "col: table int64, batch string"

    @property
    def compatible(self) -> bool:
        return not self.new_columns and not self.type_changes


@dataclass(frozen=True)
class TxnCommit:
    """The commit that set ``txn(appId)`` to a version: its Delta version and commitInfo."""

    version: int
    info: dict[str, Any]
    txns: dict[str, int] = field(default_factory=dict)  # every txn it set (commit_at)


# How this process got its tables (spark_chkpt.delta.log.state): loaded, advanced, ...
LOADS = log_state.LOADS


class DeltaTarget:
    """One Delta table addressed by URI: :meth:`latest` for a batch's decisions (one
    table per process, advanced by the new commits), :meth:`open` opened fresh."""

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

    def check_features(self, table: Any, *, writer: str, operation: Operation) -> None:
        """Raise :class:`~spark_chkpt.errors.TableFeatureError` unless ``writer`` can
        honour every feature ``table`` (a ``DeltaTable``; None: none yet) requires for
        ``operation`` (:mod:`spark_chkpt.delta.features.protocol`)."""
        if table is not None:
            found = read_protocol(table, uri=self.uri)
            check_table(found, writer=writer, operation=operation)
            check_own_commit_store(found, writer=writer)

    def row_rules(self, table: Any, *, writer: str) -> tuple[TableRules, GeneratedColumns]:
        """The rules each row written to ``table`` must keep (CHECK constraints, NOT NULL
        columns, invariants) and its generated columns, parsed on the driver (an
        expression that cannot be evaluated is refused naming it)."""
        found = read_protocol(table, uri=self.uri)
        rules = table_rules(
            uri=self.uri, configuration=found.configuration, columns=found.columns, writer=writer
        )
        generated = generated_columns(
            uri=self.uri,
            columns=found.columns,
            arrow_schema=self.arrow_schema(table),
            writer=writer,
        )
        return rules, generated

    def open_at(self, version: int) -> Any:
        """The ``DeltaTable`` as of ``version`` (time travel; its files must be there)."""
        from deltalake import DeltaTable

        return DeltaTable(self.uri, version=version, storage_options=self.storage_options or None)

    # -- schema ----------------------------------------------------------------------

    @staticmethod
    def arrow_schema(table: Any) -> pa.Schema:
        import pyarrow as pa

        return pa.schema(table.schema().to_arrow())

    def plan_schema(self, table: Any, batch_schema: pa.Schema) -> SchemaPlan:
        current = self.arrow_schema(table)
        wanted = normalize_schema(batch_schema)
        new, changed = [], []
        for f in wanted:
            idx = current.get_field_index(f.name)
            if idx < 0:
                new.append(f.name)
            elif not _same_type(current.field(idx).type, f.type):
                changed.append(f"{f.name}: table {current.field(idx).type}, batch {f.type}")
        return SchemaPlan(new_columns=tuple(new), type_changes=tuple(changed))

    def check_schema(self, table: Any, batch_schema: pa.Schema, *, merge: bool) -> SchemaPlan:
        """Raise :class:`SchemaMismatchError` unless the batch fits (or may evolve) the table."""
        plan = self.plan_schema(table, batch_schema)
        if plan.type_changes:
            raise SchemaMismatchError(
                f"Delta table {self.uri}: column types differ ({'; '.join(plan.type_changes)})"
                ". Cast the columns in the query; mergeSchema adds columns but never changes "
                "a type."
            )
        if plan.new_columns and not merge:
            raise SchemaMismatchError(
                f"Delta table {self.uri} has no column(s) {', '.join(plan.new_columns)} that "
                "the query writes. Set option mergeSchema=true to add them, or drop them "
                "from the query."
            )
        return plan

    # -- column mapping --------------------------------------------------------------

    def column_mapping(self, table: Any | None = None) -> ColumnMapping | None:
        """The table's column mapping (None: no table yet, or no mapping); ``table``:
        the opened table, else it is opened."""
        table = table if table is not None else self.latest()
        return ColumnMapping.of_table(table) if table is not None else None

    def planned_mapping(self, batch_schema: pa.Schema, table: Any = None) -> ColumnMapping | None:
        """The mapping a batch of ``batch_schema`` is staged with: the table's (``table``,
        else opened), plus physical names and ids for the columns the table lacks (those
        mergeSchema will add; without mergeSchema the commit refuses them before anything
        is visible)."""
        from deltalake import Schema

        mapping = self.column_mapping(table)
        if mapping is None:
            return None
        wanted = normalize_schema(batch_schema)
        new = [f for f in wanted if mapping.identity(f.name) is None]
        if not new:
            return mapping
        fields = json.loads(Schema.from_arrow(pa_schema(new)).to_json())["fields"]
        return mapping.with_new_columns([{**f, "nullable": True} for f in fields])

    def check_mapping(
        self, table: Any, staged: ColumnMapping | None, columns: Sequence[str], *, what: str
    ) -> None:
        """Raise :class:`SchemaMismatchError` if the table's column mapping no longer
        matches the one ``what`` was staged with for ``columns`` (another writer renamed,
        dropped or added a column, or turned column mapping on, since)."""
        current = self.column_mapping(table)
        if staged is None and current is None:
            return
        if staged is None:
            problems = [f"the table became column-mapped ({current.mode if current else ''})"]
        else:
            problems = staged.changed_under(current, columns)
        if problems:
            raise SchemaMismatchError(
                f"{what}: the columns of Delta table {self.uri} changed while the batch was "
                f"staged ({'; '.join(problems)}). Nothing was committed. Restart the query: "
                "the batch is staged again with the table's columns as they are now."
            )

    def add_mapped_columns(self, table: Any, mapping: ColumnMapping) -> None:
        """Add the columns ``mapping`` planned to the column-mapped ``table`` in one
        commit of a ``metaData`` action: their physical names and ids in the schema and
        ``delta.columnMapping.maxColumnId`` advanced, as delta-spark's ADD COLUMNS
        writes it. delta-rs refuses to (``alter.add_columns``), so the commit file is
        written here, created only if absent (a lost race is a
        :class:`CommitConflictError`: the coordinator retries on the new version)."""
        names = [f["name"] for f in mapping.planned_fields()]
        if not self.location.is_local:
            raise SchemaMismatchError(
                f"Delta table {self.uri} is column-mapped ({mapping.mode}) and mergeSchema "
                f"would add column(s) {', '.join(names)}: delta-rs cannot add columns to "
                "such a table, and spark-chkpt writes that commit itself only on a local "
                "filesystem (it needs a create-if-absent the object store clients here lack)."
                " Add the column(s) with delta-spark (ALTER TABLE ... ADD COLUMNS), then "
                "restart the query. Nothing was committed."
            )
        version, text = _add_columns_commit(table, mapping)
        try:
            self.location.child("_delta_log", f"{version:020d}.json").create_exclusive(text)
        except FileExistsError as e:
            raise CommitConflictError(
                f"Delta table {self.uri}: version {version} was committed by another writer "
                f"while mergeSchema added column(s) {', '.join(names)}"
            ) from e
        log.info(
            "Delta table %s: added column(s) %s (mergeSchema, column mapping %s, maxColumnId %d)",
            self.uri,
            ", ".join(names),
            mapping.mode,
            mapping.max_column_id,
        )

    def rows(self, table: Any) -> pa.Table:
        """Every row of ``table`` (an opened version) through delta-rs's DataFusion
        reader, which applies column mapping and deletion vectors
        (``to_pyarrow_table()`` does not apply column mapping)."""
        import pyarrow as pa
        from deltalake import QueryBuilder

        reader = QueryBuilder().register("t", log_state.delta_rs(table)).execute("SELECT * FROM t")
        return pa.table(reader.read_all())

    def add_columns(self, table: Any, batch_schema: pa.Schema, names: Sequence[str]) -> None:
        from deltalake import Field, Schema

        wanted = normalize_schema(batch_schema)
        fields = Schema.from_arrow(wanted).fields
        new = [Field(f.name, f.type, nullable=True) for f in fields if f.name in set(names)]
        table.alter.add_columns(new)
        log.info("Delta table %s: added column(s) %s (mergeSchema)", self.uri, ", ".join(names))

    # -- commits ---------------------------------------------------------------------

    def commit(
        self,
        *,
        table: Any,
        schema: pa.Schema,
        partition_by: Sequence[str],
        files: Sequence[StagedFile],
        app_id: str,
        version: int,
        metadata: Mapping[str, Any],
        overwrite: bool = False,
        configuration: Mapping[str, str] | None = None,
        identity: Sequence[IdentityUse] = (),
    ) -> None:
        """One atomic Delta commit: the add actions, ``txn(app_id, version)`` and
        ``metadata`` in commitInfo. Creates the table when ``table`` is None. With
        ``overwrite`` the commit also removes every file of the table's current version
        (delta-rs writes the remove actions: the table is replaced, not appended to).
        ``configuration``: the table properties of a table this commit creates.
        ``identity``: the identity values the tasks generated, whose high-water marks
        the commit moves (:mod:`spark_chkpt.delta.features.identity`)."""
        from deltalake import Schema
        from deltalake.transaction import AddAction, create_table_with_add_actions

        actions = [
            AddAction(
                path=f.path,
                size=f.size,
                partition_values=f.partition_values,
                modification_time=f.modification_time,
                data_change=True,
                stats=f.stats,
            )
            for f in files
        ]
        props = commit_properties(metadata=metadata, app_id=app_id, version=version)
        if table is None:
            create_table_with_add_actions(
                self.uri,
                Schema.from_arrow(normalize_schema(schema)),
                actions,
                mode="error",
                partition_by=list(partition_by) or None,
                storage_options=self.storage_options or None,
                configuration=dict(configuration) if configuration else None,
                commit_properties=props,
                post_commithook_properties=no_hooks(),
            )
        elif needs_own_commit(found := read_protocol(table, uri=self.uri)) or (
            not overwrite and self._kept_here(table)
        ):
            # identity values generated by the tasks move the high-water mark in the
            # same commit, an append's or a replacement's (never back)
            meta = identity_metadata(
                uri=self.uri,
                metadata=metadata_action(table),
                schema_json=table.schema().to_json(),
                uses=identity,
                batch_id=version,
            )
            self._own_commit(
                table,
                found,
                files,
                props,
                operation="overwrite" if overwrite else "append",
                app_id=app_id,
                partition_by=partition_by,
                meta=meta,
            )
        else:
            table.create_write_transaction(
                actions,
                "overwrite" if overwrite else "append",
                table.schema(),
                partition_by=list(partition_by) or None,
                commit_properties=props,
                post_commithook_properties=no_hooks(),
            )
        upkeep(self)  # checkpoint and clean-up by the table's properties

    def _kept_here(self, table: Any) -> bool:
        """Whether an append to ``table`` is the project's own commit although delta-rs
        could make it: the table kept across batches on a local file system, whose
        state the commit builds on without delta-rs listing the log (twice per commit).
        Other stores keep delta-rs's commit (its locking or conditional put)."""
        return isinstance(table, log_state.KeptTable) and self.location.is_local

    def _own_commit(
        self,
        table: Any,
        found: TableProtocol,
        files: Sequence[StagedFile],
        props: Any,
        *,
        operation: Literal["append", "overwrite"],
        app_id: str,
        partition_by: Sequence[str],
        meta: Mapping[str, Any] | None = None,
        writer: str = "chkpt-delta",
    ) -> int | None:
        """A commit to a table whose features delta-rs refuses, by the project's own log
        writer: ``operation`` "append" (:mod:`spark_chkpt.delta.log.commit`) or
        "overwrite" (:mod:`spark_chkpt.delta.log.overwrite`: every live file removed,
        ``files`` added; ``outputMode("complete")`` and a rewind's emptying), with the txns
        and metadata of ``props`` (:func:`commit_properties`) and ``meta`` (the identity
        high-water marks' ``metaData`` action): the version written, or None when a commit
        that won the race already holds the txn (nothing written)."""
        features = frozenset(found.required())
        if operation == "append" and isinstance(table, log_state.KeptTable):
            # what was read of the log, kept; a replacement reads the live files itself
            state = table.log_state(features=features, configuration=found.configuration)
        else:
            state = load_state(
                self.location,
                version=int(table.version()),
                features=features,
                configuration=found.configuration,
            )

        def check(protocol: TableProtocol) -> None:
            check_table(protocol, writer=writer, operation=operation)
            check_own_commit_store(protocol, writer=writer)

        if operation == "append":
            commit = commit_append
        else:
            from spark_chkpt.delta.log.overwrite import commit_overwrite as commit
        version = commit(
            location=self.location,
            uri=self.uri,
            state=state,
            files=files,
            app_id=app_id,
            txns={t.app_id: int(t.version) for t in props.app_transactions},
            metadata=props.custom_metadata,
            partition_by=partition_by,
            put=lambda at, text: put_if_absent(
                at, text, uri=self.uri, storage_options=self.storage_options
            ),
            check=check,
            meta=meta,
        )
        log.debug("Delta table %s: own %s commit at version %s", self.uri, operation, version)
        return version

    def generation(self, table: Any | None, *, app_id: str) -> int | None:
        """The generation of ``app_id`` the table records (:mod:`spark_chkpt.snapshot.epoch`;
        None: none recorded, a table no restore or recover of the app id touched)."""
        if table is None:
            return None
        version = table.transaction_version(generation_app_id(app_id))
        return int(version) if version is not None else None

    def start_generation(
        self, table: Any, *, app_id: str, generation: int, metadata: Mapping[str, Any]
    ) -> None:
        """An empty commit that records ``generation`` of ``app_id`` (``recover``, or a
        rewind with nothing to roll back): from it on, writers of older generations of
        the app id are fenced."""
        self.replace_with_nothing(
            table,
            mode="append",
            props=commit_properties(metadata=metadata, app_id=app_id, generation=generation),
        )

    def replace_with_nothing(
        self, table: Any, *, mode: Literal["append", "overwrite"], props: Any
    ) -> None:
        """A commit without files: ``append`` records only its txns and metadata,
        ``overwrite`` also removes every file of the current version (the table emptied,
        as a rewind empties a dead-letter table). On a table whose features delta-rs
        refuses it is the project's own commit (:mod:`spark_chkpt.delta.log.commit`,
        :mod:`spark_chkpt.delta.log.overwrite`); one on a store without a create-if-absent
        is refused naming the feature and the table."""
        found = read_protocol(table, uri=self.uri)
        if needs_own_commit(found) and props.app_transactions:
            app_id = str(props.app_transactions[0].app_id)
            partition_by = list(table.metadata().partition_columns)
            writer = "chkpt-delta" if mode == "append" else "savepoint rewind"
            if mode != "append":
                check_own_commit_store(found, writer=writer, done="Nothing was changed.")
            self._own_commit(
                table,
                found,
                [],
                props,
                operation="append" if mode == "append" else "overwrite",
                app_id=app_id,
                partition_by=partition_by,
                writer=writer,
            )
            upkeep(self)
            return
        table.create_write_transaction(
            [],
            mode,
            table.schema(),
            partition_by=list(table.metadata().partition_columns) or None,
            commit_properties=props,
            post_commithook_properties=no_hooks(),
        )
        upkeep(self)

    def check_rewind(self, table: Any) -> None:
        """Before a rewind changes anything: a table whose features delta-rs refuses is
        rolled back (or emptied) by the project's own commit, which needs a
        create-if-absent of the commit file; on a store without one,
        :class:`~spark_chkpt.errors.TableFeatureError` naming the feature and the table."""
        check_own_commit_store(
            read_protocol(table, uri=self.uri),
            writer="savepoint rewind",
            done="Nothing was changed.",
        )

    def restore_to(self, table: Any, version: int, *, props: Any) -> None:
        """delta-rs ``restore``: the table's files of ``version`` back in one commit
        carrying ``props`` (:func:`commit_properties`); the next commit's
        :func:`~spark_chkpt.delta.log.upkeep.upkeep` checkpoints a version it made due.
        A table whose features delta-rs refuses is restored by the project's own commit
        (:mod:`spark_chkpt.delta.log.restore`)."""
        found = read_protocol(table, uri=self.uri)
        if not needs_own_commit(found):
            table.restore(version, commit_properties=props, post_commithook_properties=no_hooks())
            return
        check_own_commit_store(found, writer="savepoint rewind", done="Nothing was changed.")
        features = frozenset(found.required())
        now, at = (
            load_state(
                self.location, version=v, features=features, configuration=found.configuration
            )
            for v in (int(table.version()), version)
        )
        committed = commit_restore(
            location=self.location,
            uri=self.uri,
            now=now,
            at=at,
            txns={t.app_id: int(t.version) for t in props.app_transactions},
            metadata=props.custom_metadata,
            put=lambda where, text: put_if_absent(
                where, text, uri=self.uri, storage_options=self.storage_options
            ),
        )
        log.debug("Delta table %s: own restore commit at version %s", self.uri, committed)

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

    # -- what the log references -----------------------------------------------------

    def referenced(self, table: Any, *, whole_log: bool = False) -> set[str]:
        """Relative paths the table references now; with ``whole_log``, also every path
        any JSON commit still in ``_delta_log`` added (so time travel keeps its files)."""
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
                    if '"add"' in line:
                        action = json.loads(line).get("add")
                        if action:
                            paths.add(unquote(action["path"]))
        return paths

    def delete_unreferenced(self, files: Sequence[StagedFile], table: Any) -> int:
        """Delete staged files no table version references; returns how many. (Only on
        the rare paths: abort, and a replayed batch discarding its attempt.)"""
        if not files:
            return 0
        keep = self.referenced(table, whole_log=True) if table is not None else set()
        removed = 0
        for f in files:
            if f.path not in keep and self.location.child(f.path).delete():
                removed += 1
        return removed

    def remove_orphans(
        self, *, app_id: str, older_than_s: float, keep: Set[str] = frozenset()
    ) -> int:
        """Delete staged files of ``app_id``'s crashed attempts: named by the sink with
        ``app_id``'s tag (or with no tag: staged before tags existed), referenced by no
        commit, not in ``keep`` (the commit in progress), older than ``older_than_s``.
        Files another writer staged are never touched: they may be its batch in flight."""
        import pyarrow.fs as pafs

        table = self.open()
        if table is None and not self.location.exists():
            return 0
        keep = set(keep) | self.referenced(table, whole_log=True)
        cutoff = time.time() - older_than_s
        removed = 0
        root = self.location.path.rstrip("/") + "/"
        mine = app_tag(app_id)
        for info in self.location.list(recursive=True):
            name = STAGED_NAME.match(info.base_name) if info.type == pafs.FileType.File else None
            if name is None or name["app"] not in (mine, None):
                continue
            relative = info.path[len(root) :] if info.path.startswith(root) else info.path
            if relative.startswith("_delta_log") or relative in keep:
                continue
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            if mtime <= cutoff and self.location.child(relative).delete():
                removed += 1
        return removed


def _add_columns_commit(table: Any, mapping: ColumnMapping) -> tuple[int, str]:
    """The version and the JSON commit of an ADD COLUMNS of ``mapping``'s planned columns
    to ``table``, as delta-spark writes it: a ``metaData`` action with their physical
    names and ids and ``delta.columnMapping.maxColumnId`` advanced."""
    meta = table.metadata()
    fields = json.loads(table.schema().to_json())["fields"]
    schema = {"type": "struct", "fields": [*fields, *mapping.planned_fields()]}
    version = int(table.version()) + 1
    now = int(time.time() * 1000)
    actions = [
        {
            "commitInfo": {
                "timestamp": now,
                "operation": "ADD COLUMNS",
                "operationParameters": {
                    "columns": json.dumps([{"column": f} for f in mapping.planned_fields()])
                },
                "readVersion": version - 1,
                "isBlindAppend": False,
                "engineInfo": "spark-chkpt (mergeSchema)",
            }
        },
        {
            "metaData": {
                "id": meta.id,
                "name": meta.name,
                "description": meta.description,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema, separators=(",", ":")),
                "partitionColumns": list(meta.partition_columns),
                "configuration": mapping.metadata_configuration(meta.configuration),
                "createdTime": meta.created_time,
            }
        },
    ]
    text = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    return version, text


def pa_schema(fields: Sequence[pa.Field]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(list(fields))


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


def commit_properties(
    *,
    metadata: Mapping[str, Any],
    app_id: str,
    version: int | None = None,
    generation: int | None = None,
) -> Any:
    """delta-rs ``CommitProperties`` of every commit the project makes: ``metadata`` in
    commitInfo, ``txn(app_id, version)`` if ``version`` is given, and the generation
    ``txn(<app_id>#generation, generation)`` if ``generation`` is
    (:mod:`spark_chkpt.snapshot.epoch`)."""
    from deltalake import CommitProperties, Transaction

    now = int(time.time() * 1000)
    txns = []
    if version is not None:
        txns.append(Transaction(app_id=app_id, version=version, last_updated=now))
    if generation is not None:
        txns.append(
            Transaction(app_id=generation_app_id(app_id), version=generation, last_updated=now)
        )
    return CommitProperties(custom_metadata=dict(metadata), app_transactions=txns)


def metadata_action(table: Any) -> dict[str, Any]:
    """The fields of the ``metaData`` action of a delta-rs ``DeltaTable`` at its loaded
    version, but its ``schemaString``."""
    m = table.metadata()
    return {
        "id": m.id,
        "name": m.name,
        "description": m.description,
        "format": {"provider": "parquet", "options": {}},
        "partitionColumns": list(m.partition_columns),
        "configuration": {k: v for k, v in (m.configuration or {}).items() if v is not None},
        "createdTime": m.created_time,
    }


def is_conflict(error: Exception) -> bool:
    """Whether a failed delta-rs commit lost a race with another commit (worth retrying
    on a freshly opened table)."""
    text = str(error).lower()
    if "unsupported table features" in text:  # delta-rs's protocol check: never a race
        return False
    return type(error).__name__ == "CommitFailedError" or any(
        word in text for word in ("conflict", "concurrent", "already exists")
    )


@contextmanager
def committing(what: str) -> Iterator[None]:
    """Around one delta-rs commit: a lost race becomes :class:`CommitConflictError` (the
    coordinator retries it), any other failure :class:`CommitError` naming ``what``
    (the project's own errors pass as they are)."""
    try:
        yield
    except ChkptError:
        raise
    except Exception as e:
        if is_conflict(e):
            raise CommitConflictError(f"{what}: {e}") from e
        raise CommitError(f"{what}: {e}", reason=CommitFailureReason.SINK_COMMIT_FAILED) from e


def _same_type(table_type: pa.DataType, batch_type: pa.DataType) -> bool:
    import pyarrow as pa

    if table_type == batch_type:
        return True
    # delta-rs reads strings/binary back as their large or view variants.
    families = (
        (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view),
        (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view),
    )
    for family in families:
        if any(f(table_type) for f in family) and any(f(batch_type) for f in family):
            return True
    if (
        pa.types.is_list(table_type)
        or pa.types.is_large_list(table_type)
        or pa.types.is_list_view(table_type)
    ) and (pa.types.is_list(batch_type) or pa.types.is_large_list(batch_type)):
        return _same_type(table_type.value_type, batch_type.value_type)
    if pa.types.is_struct(table_type) and pa.types.is_struct(batch_type):
        return [f.name for f in table_type] == [f.name for f in batch_type] and all(
            _same_type(a.type, b.type) for a, b in zip(table_type, batch_type, strict=True)
        )
    if pa.types.is_map(table_type) and pa.types.is_map(batch_type):
        return _same_type(table_type.key_type, batch_type.key_type) and _same_type(
            table_type.item_type, batch_type.item_type
        )
    return False
