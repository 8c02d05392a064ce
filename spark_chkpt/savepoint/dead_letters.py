"""A rewind's rollback of the ``chkpt-delta`` sink's dead-letter table (``deadLetterPath``).

Each batch's dead letters are committed to their own table with ``txn(appId, N)``
before the batch's commit of the main table (:mod:`spark_chkpt.delta.sink.dead_letters`),
and the batch's snapshot record names that table and the version holding them
(``dead_letter_target``, ``dead_letter_version``). A rewind to N
(:mod:`spark_chkpt.savepoint.restore`) rolls the dead-letter table back like the main
table: to its version at snapshot N, in a commit that also carries ``txn(appId, N)`` and
the new generation's ``txn(<appId>#generation, g)``, so that it holds the dead letters
of batches 0..N of the savepoint's timeline and the re-run batches N + 1, ... commit
theirs once each. With no such version (no dead letter yet at N) the table is emptied
in a commit carrying the same txns.

The version comes from the snapshot record; a savepoint of an earlier release has none,
and the table named by ``--dead-letter-table`` is then rolled back to its newest commit
whose txn of the app id is N or lower.

Everything that can refuse runs at step 2, before anything is changed
(:func:`plan_dead_letter_rewind`): the version is still in the table's log, no other
writer committed to it after that version (unless ``--discard-other-writers`` names
them), and the files of that version are all there (VACUUM may have removed them).

Also here, shared with the main table's rollback: :func:`refuse_other_writers`, over
the scan of the commits a rollback would undo (:func:`spark_chkpt.delta.history.commits_after`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_chkpt.delta.history import commits_after
from spark_chkpt.delta.table import DeltaTarget, commit_properties
from spark_chkpt.errors import SavepointError

log = logging.getLogger(__name__)

REWIND_KEY = "chkpt.rewind"  # commitInfo of a rewind's restore commit
NO_APP_ID = "no-app-id"  # names, in --discard-other-writers, commits without any txn


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
