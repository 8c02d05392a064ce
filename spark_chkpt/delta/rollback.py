"""A Delta table's rollback to snapshot N, the first half of a Delta sink's rewind
(:mod:`spark_chkpt.delta.rewind`): the checks that the table holds snapshot N's own
commit and that no other writer committed after it (unless named), then the restore
commit carrying ``txn(appId, N)``, snapshot N's record and the new generation, through
:mod:`spark_chkpt.delta.table.target`. The protocol and its refusals:
docs/concepts/delta-internals.md (spark_chkpt/delta/rewind.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from spark_chkpt.delta.replay import describe_offsets, positions
from spark_chkpt.delta.table.actions import commit_properties
from spark_chkpt.delta.table.history import commits_after
from spark_chkpt.delta.table.reader import TxnCommit
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import SavepointError
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint

log = logging.getLogger(__name__)

REWIND_KEY = "chkpt.rewind"  # commitInfo of a rewind's restore commit
NO_APP_ID = "no-app-id"  # names, in --discard-other-writers, commits without any txn


@dataclass(frozen=True)
class DeltaRewound:
    """What a Delta sink's rewind did (:class:`~spark_chkpt.snapshot.rewind.Rewound`):
    the ``table``'s version before (``rolled_back_from``) and its restore commit's
    (``restore_version``, None: nothing to undo), the commits without any txn it undid
    (``others_rolled_back``), and the same for its dead-letter table."""

    table: str | None = None
    rolled_back_from: int | None = None
    restore_version: int | None = None
    others_rolled_back: int = 0
    dead_letter_table: str | None = None
    dead_letters_rolled_back_from: int | None = None
    dead_letters_restore_version: int | None = None

    def lines(self, *, generation: int, resumes_at: int) -> list[str]:
        out = []
        if self.restore_version is not None:
            undone = self.others_rolled_back
            out.append(
                f"table {self.table} rolled back from version {self.rolled_back_from} in "
                f"version {self.restore_version}"
                + (f" ({undone} commit(s) without app id undone)" if undone else "")
            )
        elif self.table is not None:
            out.append(f"table {self.table} already ends at that snapshot: left as it is")
        if self.dead_letters_restore_version is not None:
            out.append(
                f"dead-letter table {self.dead_letter_table} rolled back from version "
                f"{self.dead_letters_rolled_back_from} in version "
                f"{self.dead_letters_restore_version}"
            )
        elif self.dead_letter_table is not None:
            out.append(
                f"dead-letter table {self.dead_letter_table} already ends at that snapshot: "
                "left as it is"
            )
        return out


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
    point: RewindPoint, target: DeltaTarget, discard_other_writers: Sequence[str] = ()
) -> TableState:
    """Step 2 of a rewind (again at step 4): the table holds snapshot N's own commit
    (the savepoint's Delta version, from the savepoint's source offsets: not a commit of
    batch N on a later timeline), and no other writer committed after it, unless
    ``discard_other_writers`` names each of them."""
    batch, app_id = point.batch_id, point.app_id
    table = target.open()
    if table is None:
        raise SavepointError(f"{target.uri} is not a Delta table: nothing to rewind")
    target.check_rewind(table)  # an own-commit table on a store that cannot take it
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


def _snapshot_commit(point: RewindPoint, target: DeltaTarget, table: Any, app_id: str) -> TxnCommit:
    """The commit that made snapshot N visible, checked against the savepoint's offsets."""
    batch, version = point.batch_id, point.version
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
        if positions(record.source_offsets) != positions(point.source_offsets):
            raise SavepointError(
                f"{target.uri}: its commit of batch {batch} (Delta version "
                f"{commit.version}) came from source offsets "
                f"{describe_offsets(record.source_offsets)}, but savepoint "
                f"{point.savepoint_id} holds batch {batch} from "
                f"{describe_offsets(point.source_offsets)}: that commit belongs to "
                "another timeline (a rewind ran the batch again with other boundaries). "
                "Nothing was changed."
            )
    return commit


def rewind_table(
    point: RewindPoint,
    target: DeltaTarget,
    discard_other_writers: Sequence[str],
    generation: int,
    *,
    checkpoint_location: str,
) -> DeltaRewound:
    """Step 4: roll ``target`` back to snapshot N with ``txn(appId, N)`` and the new
    generation ``txn(<appId>#generation, g)``, which fences the writers of older ones."""
    batch = point.batch_id
    state = check_table(point, target, discard_other_writers)
    rewind_info = {
        "savepoint": point.savepoint_id,
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
        return DeltaRewound(rolled_back_from=state.current)
    _restore(point, target, state, generation, rewind_info, checkpoint_location)
    after = target.open()
    if state.plain:
        log.warning(
            "rewind of %s to snapshot %d undid %d commit(s) of writers without an app id "
            "(named by --discard-other-writers)",
            target.uri,
            batch,
            state.plain,
        )
    return DeltaRewound(
        rolled_back_from=state.current,
        restore_version=int(after.version()) if after is not None else None,
        others_rolled_back=state.plain,
    )


def _restore(
    point: RewindPoint,
    target: DeltaTarget,
    state: TableState,
    generation: int,
    rewind_info: dict[str, Any],
    checkpoint_location: str,
) -> None:
    """The restore commit of step 4: the table's files of snapshot N back, with
    ``txn(appId, N)``, the new generation and snapshot N's record (its version now the
    snapshot's); a failure names the way on (the new checkpoint is already written)."""
    batch = point.batch_id
    record = point.record
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


def refuse_other_writers(
    target: DeltaTarget,
    version: int,
    current: int,
    app_id: str,
    *,
    discard_other_writers: Sequence[str],
    where: str,
    no_app_id: str,
) -> int:
    """Raise :class:`SavepointError` if writers other than ``app_id`` committed after
    ``version`` and ``discard_other_writers`` does not name them all (``where`` opens the
    message, ``no_app_id`` says what commits without an app id are); returns how many
    commits without any txn a rollback would undo."""
    others, plain = commits_after(target, version, current, app_id)
    if plain:
        others.add(NO_APP_ID)
    undone = sorted(others - set(discard_other_writers))
    if undone:
        raise SavepointError(
            f"{where} ({', '.join(undone)}; {NO_APP_ID}: {no_app_id}); rolling it back "
            "would undo their commits. Restore with --mode fork instead, or, to undo them "
            f"on purpose, name them: --discard-other-writers {','.join(sorted(others))}. "
            "Nothing was changed."
        )
    return plain
