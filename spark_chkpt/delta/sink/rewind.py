"""A rewind's Delta table: the checks of step 2 and the rollback of step 5.

:func:`spark_chkpt.savepoint.restore.restore_savepoint` rewinds each kind of sink in its
own module: a ``chkpt-delta`` table here (rolled back to snapshot N's version with
delta-rs ``restore``, in a commit carrying ``txn(appId, N)``, snapshot N's record and
the new generation), its dead-letter table in :mod:`spark_chkpt.savepoint.dead_letters`,
a ``chkpt-kafka`` topic by revocation in :mod:`spark_chkpt.savepoint.revocation`. See
the protocol in :mod:`spark_chkpt.savepoint.restore`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spark_chkpt.delta.replay import describe_offsets, positions
from spark_chkpt.delta.table import DeltaTarget, TxnCommit, commit_properties
from spark_chkpt.fs import qualify
from spark_chkpt.savepoint.dead_letters import REWIND_KEY, DeadLetterTable, refuse_other_writers
from spark_chkpt.savepoint.manifest import Savepoint, SavepointError
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableRewound:
    """What step 5 did to the table: its version before, the restore's version (None:
    nothing to undo, only the generation recorded) and the other writers' commits undone."""

    rolled_back_from: int
    restore_version: int | None = None
    others_rolled_back: int = 0


def rewind_target(
    point: Savepoint, table: str | None, storage_options: Mapping[str, str] | None
) -> DeltaTarget:
    """Step 2 of a rewind: the table, checked (see the module docstring)."""
    manifest = point.manifest
    sink = manifest.sink
    uri = table or (sink.target if sink is not None else None)
    if uri is None:
        raise SavepointError(
            f"savepoint {manifest.savepoint_id} does not name the sink's table (its snapshot "
            "record does not name it): give --table, the chkpt-delta table to roll back"
        )
    if (
        table is not None
        and sink is not None
        and sink.target
        and not same_table(table, sink.target)
    ):
        raise SavepointError(
            f"--table {table} is not the table the savepoint's query wrote ({sink.target}): "
            "a rewind rolls back the same table; restore with --mode fork to write another"
        )
    return DeltaTarget(uri=qualify(uri), storage_options=storage_options)


@dataclass(frozen=True)
class TableState:
    """What a rewind found in the table: snapshot N's version, the newest version, the
    app's txn, how many commits without any txn came after N, and snapshot N's record
    as the table's commit of N carries it."""

    table: Any
    app_id: str
    snapshot_version: int
    current: int
    done: int
    plain: int
    record: SnapshotRecord | None = None


def check_table(
    point: Savepoint, target: DeltaTarget, discard_other_writers: Sequence[str] = ()
) -> TableState:
    """Step 2 of a rewind (again at step 4): the table holds snapshot N's own commit
    (the manifest's Delta version, from the savepoint's source offsets: not a commit of
    batch N on a later timeline), and no other writer committed after it, unless
    ``discard_other_writers`` names each of them."""
    manifest = point.manifest
    batch = manifest.batch_id
    app_id = manifest.sink.app_id if manifest.sink is not None else manifest.query_id
    table = target.open()
    if table is None:
        raise SavepointError(f"{target.uri} is not a Delta table: nothing to rewind")
    done = table.transaction_version(app_id)
    commit = _snapshot_commit(point, target, table, app_id)
    current = int(table.version())
    plain = refuse_other_writers(
        target,
        commit.version,
        current,
        app_id,
        discard_other_writers=discard_other_writers,
        where=f"{target.uri}: after snapshot {batch} (Delta version {commit.version}) other "
        "writers committed to the table",
        no_app_id="commits without an app id",
    )
    return TableState(
        table=table,
        app_id=app_id,
        snapshot_version=commit.version,
        current=current,
        done=done if done is not None else -1,
        plain=plain,
        record=SnapshotRecord.from_json(text) if (text := commit.info.get(SNAPSHOT_KEY)) else None,
    )


def dead_letter_table_of(
    point: Savepoint,
    state: TableState,
    given: str | None,
    storage_options: Mapping[str, str] | None,
) -> DeadLetterTable | None:
    """Step 2 of a rewind: the sink's dead-letter table and its version at N, from the
    manifest, else from the table's commit of N (both name it since this release), else
    ``given`` (its version then looked up in its log); None: the sink has none."""
    manifest = point.manifest
    sink = manifest.sink
    uri: str | None = None
    version: int | None = None
    if sink is not None and sink.dead_letters:
        uri, version = sink.dead_letters, sink.dead_letter_version
    elif state.record is not None and state.record.dead_letter_target:
        uri, version = state.record.dead_letter_target, state.record.dead_letter_version
    recorded = uri is not None
    if given is not None:
        if uri is not None and not same_table(given, uri):
            raise SavepointError(
                f"--dead-letter-table {given} is not the dead-letter table the savepoint's "
                f"query wrote ({uri}): a rewind rolls back the same one"
            )
        uri = uri or given
    if uri is None:
        return None
    return DeadLetterTable(
        target=DeltaTarget(uri=qualify(uri), storage_options=storage_options),
        app_id=state.app_id,
        batch=manifest.batch_id,
        version=version,
        recorded=recorded,
    )


def _snapshot_commit(point: Savepoint, target: DeltaTarget, table: Any, app_id: str) -> TxnCommit:
    """The commit that made snapshot N visible, checked against the savepoint's offsets."""
    manifest = point.manifest
    batch = manifest.batch_id
    version = manifest.sink.table_version if manifest.sink is not None else None
    if version is not None:
        commit = target.commit_at(version)
        if commit is not None and commit.txns.get(app_id) != batch:
            commit = None
    else:
        commit = target.find_txn_commit(table, app_id=app_id, txn_version=batch)
    if commit is None:
        where = f"Delta version {version}" if version is not None else "the commit that set it"
        raise SavepointError(
            f"{target.uri} does not hold snapshot {batch} of query {app_id} ({where} is "
            "not in the log, or does not set its txn to it): it is not the table this "
            "savepoint's query wrote, or its history was cleaned up"
        )
    text = commit.info.get(SNAPSHOT_KEY)
    if text:
        record = SnapshotRecord.from_json(text)
        if positions(record.source_offsets) != positions(manifest.source_offsets):
            raise SavepointError(
                f"{target.uri}: its commit of batch {batch} (Delta version "
                f"{commit.version}) came from source offsets "
                f"{describe_offsets(record.source_offsets)}, but savepoint "
                f"{manifest.savepoint_id} holds batch {batch} from "
                f"{describe_offsets(manifest.source_offsets)}: that commit belongs to "
                "another timeline (a rewind ran the batch again with other boundaries). "
                "Nothing was changed."
            )
    return commit


def rewind_table(
    point: Savepoint,
    target: DeltaTarget,
    discard_other_writers: Sequence[str],
    generation: int,
    *,
    checkpoint_location: str,
) -> TableRewound:
    """Step 4: roll ``target`` back to snapshot N with ``txn(appId, N)`` and the new
    generation ``txn(<appId>#generation, g)``, which fences the writers of older ones."""
    manifest = point.manifest
    batch = manifest.batch_id
    state = check_table(point, target, discard_other_writers)
    rewind_info = {
        "savepoint": manifest.savepoint_id,
        "batch_id": batch,
        "from_version": state.current,
        "to_version": state.snapshot_version,
        "generation": generation,
    }
    if state.done == batch and _at_snapshot(target, state):
        # Nothing of this app after N (a stop with savepoint): keep the table, but
        # record the new generation so that writers of older ones are fenced.
        if (target.generation(state.table, app_id=state.app_id) or 0) < generation:
            target.start_generation(
                state.table,
                app_id=state.app_id,
                generation=generation,
                metadata={REWIND_KEY: json.dumps(rewind_info)},
            )
        return TableRewound(rolled_back_from=state.current)
    record = manifest.snapshot_record()
    metadata: dict[str, Any] = {"chkpt.batchId": batch, REWIND_KEY: json.dumps(rewind_info)}
    if record is not None:
        metadata[SNAPSHOT_KEY] = replace(record, table_version=state.snapshot_version).to_json()
    try:
        target.restore_to(
            state.table,
            state.snapshot_version,
            props=commit_properties(
                metadata=metadata, app_id=state.app_id, version=batch, generation=generation
            ),
        )
    except Exception as e:
        raise SavepointError(
            f"could not restore {target.uri} to Delta version {state.snapshot_version} "
            f"(snapshot {batch}): {e}. The new checkpoint {checkpoint_location} is "
            "written; run the same restore again once the table can be restored (files "
            "removed by VACUUM cannot come back)."
        ) from e
    after = target.open()
    if state.plain:
        log.warning(
            "rewind of %s to snapshot %d undid %d commit(s) of writers without an app id "
            "(named by --discard-other-writers)",
            target.uri,
            batch,
            state.plain,
        )
    return TableRewound(
        rolled_back_from=state.current,
        restore_version=int(after.version()) if after is not None else None,
        others_rolled_back=state.plain,
    )


def _at_snapshot(target: DeltaTarget, state: TableState) -> bool:
    """Whether the app's newest commit of batch N is snapshot N's own (or a rewind's
    restore to it), not batch N of a later timeline."""
    latest = target.find_txn_commit(state.table, app_id=state.app_id, txn_version=state.done)
    if latest is None:
        return False
    if latest.version == state.snapshot_version:
        return True
    try:
        rewound = json.loads(latest.info.get(REWIND_KEY) or "{}")
    except ValueError:
        return False
    return isinstance(rewound, dict) and rewound.get("to_version") == state.snapshot_version


def same_table(a: str, b: str | None) -> bool:
    return b is not None and qualify(a).rstrip("/") == qualify(b).rstrip("/")
