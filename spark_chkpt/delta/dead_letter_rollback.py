"""A Delta sink's dead-letter table rolled back to snapshot N, the second half of its
rewind (:mod:`spark_chkpt.delta.rewind`): where the table is and its version at N (from
the savepoint, the table's commit of N, or the log), the checks before anything changes
(its commit of N, other writers, the files VACUUM may have removed), then the restore
commit, or an emptying commit when it held nothing of the app at N.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_chkpt.delta.rollback import REWIND_KEY, TableState, refuse_other_writers
from spark_chkpt.delta.table.actions import commit_properties
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import SavepointError
from spark_chkpt.fs import qualify, same_table
from spark_chkpt.snapshot.rewind import RewindPoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadLetterTable:
    """The dead-letter table of a rewind to snapshot ``batch`` of ``app_id``: where it is
    and its version at N (None: it held nothing of the app at N). ``recorded``: the
    version comes from the snapshot record (else it is looked up in the table's log)."""

    target: DeltaTarget
    app_id: str
    batch: int
    version: int | None
    recorded: bool


@dataclass(frozen=True)
class LettersRewind:
    """What the rewind will do to the dead-letter table: ``needed`` is False when it
    already ends at snapshot N (or there is no table and none is expected)."""

    table: Any
    version: int | None  # the version at N (None: the table is emptied)
    current: int | None  # the newest version (None: no table)
    needed: bool
    plain: int  # commits without any txn the rollback undoes


def plan_dead_letter_rewind(
    letters: DeadLetterTable, *, discard_other_writers: Sequence[str] = ()
) -> LettersRewind:
    """Step 2 of a rewind (again at step 5): whether the dead-letter table must be rolled
    back, and that it can be; :class:`SavepointError` naming the table and the versions
    otherwise, before anything is changed."""
    target, batch = letters.target, letters.batch
    table = target.open()
    version = letters.version
    if table is None:
        if version is not None:
            raise SavepointError(
                f"dead-letter table {target.uri} is not a Delta table, but snapshot {batch}'s "
                f"dead letters are in its version {version}: it cannot be rolled back. "
                "Nothing was changed."
            )
        return LettersRewind(table=None, version=None, current=None, needed=False, plain=0)
    current = int(table.version())
    if not letters.recorded:
        version = _version_at(target, table, app_id=letters.app_id, batch=batch)
    elif version is not None:
        commit = target.commit_at(version)
        txn = commit.txns.get(letters.app_id) if commit is not None else None
        if commit is None or version > current or (txn is not None and txn > batch):
            raise SavepointError(
                f"dead-letter table {target.uri} (at version {current}) does not hold "
                f"version {version} with snapshot {batch}'s dead letters of query "
                f"{letters.app_id}: its log no longer has that commit, or it is not the "
                "table the savepoint's query wrote. Nothing was changed."
            )
    done = table.transaction_version(letters.app_id)
    if not _needed(target, table, letters.app_id, batch, done, version):
        return LettersRewind(table=table, version=version, current=current, needed=False, plain=0)
    target.check_rewind(table)  # an own-commit table on a store that cannot take it
    plain = refuse_other_writers(
        target,
        version if version is not None else -1,
        current,
        letters.app_id,
        discard_other_writers=discard_other_writers,
        where=f"dead-letter table {target.uri}: after its version {version} (snapshot {batch}) "
        "other writers committed to it",
        no_app_id="commits without an app id, OPTIMIZE too",
    )
    if version is not None:
        _check_files(target, version, batch=batch, current=current)
    return LettersRewind(table=table, version=version, current=current, needed=True, plain=plain)


def rewind_dead_letters(
    letters: DeadLetterTable,
    *,
    discard_other_writers: Sequence[str],
    generation: int,
    savepoint_id: str,
) -> tuple[int | None, int | None]:
    """Step 5: roll the dead-letter table back to snapshot N with ``txn(appId, N)`` and
    the new generation; returns its version before and the restore commit's version
    (None: nothing to undo)."""
    target, batch, app_id = letters.target, letters.batch, letters.app_id
    plan = plan_dead_letter_rewind(letters, discard_other_writers=discard_other_writers)
    if not plan.needed:
        return plan.current, None
    info = {
        "savepoint": savepoint_id,
        "batch_id": batch,
        "from_version": plan.current,
        "to_version": plan.version,
        "generation": generation,
        "dead_letters": True,
    }
    rows = 0
    if plan.version is not None:
        at = target.commit_at(plan.version)
        if at is not None and at.txns.get(app_id) == batch:
            rows = int(at.info.get("chkpt.deadLetters") or 0)
    props = commit_properties(
        metadata={
            "chkpt.batchId": batch,
            "chkpt.deadLetters": rows,
            REWIND_KEY: json.dumps(info),
        },
        app_id=app_id,
        version=batch,
        generation=generation,
    )
    table = plan.table
    try:
        if plan.version is not None:
            target.restore_to(table, plan.version, props=props)
        else:  # no dead letter of the app at N: every file goes
            target.replace_with_nothing(table, mode="overwrite", props=props)
    except Exception as e:
        raise SavepointError(
            f"could not roll the dead-letter table {target.uri} back from version "
            f"{plan.current} to {plan.version if plan.version is not None else 'empty'} "
            f"(snapshot {batch}): {e}. The new checkpoint and the table's rollback are "
            "done; run the same restore again to finish it before starting the query."
        ) from e
    after = target.find_txn_commit(target.open(), app_id=app_id, txn_version=batch)
    log.warning(
        "rewind: dead-letter table %s rolled back from version %s to snapshot %d (%s)",
        target.uri,
        plan.current,
        batch,
        f"version {plan.version}" if plan.version is not None else "emptied",
    )
    return plan.current, after.version if after is not None else None


def dead_letter_table_of(
    point: RewindPoint,
    state: TableState,
    given: str | None,
    storage_options: Mapping[str, str] | None,
) -> DeadLetterTable | None:
    """Step 2 of a rewind: the sink's dead-letter table and its version at N, from the
    savepoint, else from the table's commit of N (both name it since this release), else
    ``given`` (its version then looked up in its log); None: the sink has none."""
    uri: str | None = None
    version: int | None = None
    if point.record is not None and point.record.dead_letter_target:
        uri, version = point.record.dead_letter_target, point.record.dead_letter_version
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
        batch=point.batch_id,
        version=version,
        recorded=recorded,
    )


def _needed(
    target: DeltaTarget, table: Any, app_id: str, batch: int, done: int | None, version: int | None
) -> bool:
    """Whether the table must be rolled back: not if the app's newest commit is snapshot
    N's own (``version``) or a rewind's restore to it, nor if the app never committed to
    it and nothing is expected at N."""
    if done is None:
        return version is not None and version < int(table.version())
    if done != batch:
        return True
    latest = target.find_txn_commit(table, app_id=app_id, txn_version=done)
    if latest is None:
        return True
    if version is not None and latest.version == version:
        return False
    try:
        rewound = json.loads(latest.info.get(REWIND_KEY) or "{}")
    except ValueError:
        return True
    return not (
        isinstance(rewound, dict) and "to_version" in rewound and rewound["to_version"] == version
    )


def _version_at(target: DeltaTarget, table: Any, *, app_id: str, batch: int) -> int | None:
    """The newest commit whose txn of ``app_id`` is ``batch`` or lower (None: none, back to
    version 0); :class:`SavepointError` if the log is cleaned up before one is found."""
    log_dir = target.location.child("_delta_log")
    for version in range(int(table.version()), -1, -1):
        try:
            text = log_dir.child(f"{version:020d}.json").read_text()
        except FileNotFoundError:
            raise SavepointError(
                f"dead-letter table {target.uri}: its log is cleaned up before version "
                f"{version + 1}, and no later commit of query {app_id} is at snapshot "
                f"{batch} or before: it cannot be rolled back. Nothing was changed."
            ) from None
        for line in text.splitlines():
            if '"txn"' not in line:
                continue
            txn = json.loads(line).get("txn")
            if isinstance(txn, dict) and txn.get("appId") == app_id and txn["version"] <= batch:
                return version
    return None


def _check_files(target: DeltaTarget, version: int, *, batch: int, current: int) -> None:
    """Every file of ``version`` is still there (VACUUM removes the files of old
    versions); else one :class:`SavepointError` naming the table and the versions."""
    try:
        old = target.open_at(version)
        missing = sorted(p for p in target.referenced(old) if not target.location.child(p).exists())
    except Exception as e:
        raise SavepointError(
            f"dead-letter table {target.uri} cannot be read at version {version} (snapshot "
            f"{batch}'s dead letters; it is at version {current}): {e}. Nothing was changed."
        ) from e
    if missing:
        raise SavepointError(
            f"dead-letter table {target.uri} cannot be rolled back from version {current} to "
            f"version {version} (snapshot {batch}'s dead letters): {len(missing)} of that "
            f"version's files are gone ({missing[0]}{', ...' if len(missing) > 1 else ''}; "
            "VACUUM removes the files of old versions). Rolling the table back without its "
            f"dead letters would leave those of the batches after {batch} in place. Nothing "
            "was changed. Restore with --mode fork (a new dead-letter table), or a savepoint "
            "taken after the VACUUM."
        )
