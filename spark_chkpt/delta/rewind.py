"""A Delta sink's rewind to snapshot N: its table and its dead-letter table.

:class:`DeltaRewind` is the :class:`~spark_chkpt.snapshot.rewind.SinkRewind` of both
Delta writers (``chkpt-delta``, ``DeltaUpsert``, whose kind is :class:`DeltaTableKind`):
:meth:`DeltaRewind.plan` makes every check before anything changes, :meth:`apply` rolls
the table back with delta-rs ``restore`` (through :mod:`spark_chkpt.delta.table.target`) in a
commit carrying ``txn(appId, N)``, snapshot N's record and the new generation, then the
dead-letter table the same way. The protocol and its refusals:
docs/concepts/delta-internals.md (spark_chkpt/delta/rewind.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spark_chkpt.delta.replay import describe_offsets, positions
from spark_chkpt.delta.table.history import commits_after
from spark_chkpt.delta.table.target import DeltaTarget, TxnCommit, commit_properties
from spark_chkpt.errors import SavepointError
from spark_chkpt.fs import qualify, same_table
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest, Rewound

log = logging.getLogger(__name__)

REWIND_KEY = "chkpt.rewind"  # commitInfo of a rewind's restore commit
NO_APP_ID = "no-app-id"  # names, in --discard-other-writers, commits without any txn


class DeltaRewind:
    """The :class:`~spark_chkpt.snapshot.rewind.SinkRewind` of a ``chkpt-delta`` table
    (``table``: the one to roll back, which must be the savepoint's if both name one)
    and its dead-letter table (``dead_letter_table``: needed only when neither the
    savepoint nor the table's commit of N names it). ``discard_other_writers`` names the
    other writers whose commits after N the rewind may undo."""

    def __init__(
        self,
        *,
        point: RewindPoint,
        table: str | None = None,
        dead_letter_table: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        discard_other_writers: Sequence[str] = (),
    ) -> None:
        self.point = point
        self.target = rewind_target(point, table, storage_options)
        self.dead_letter_table = dead_letter_table
        self.storage_options = storage_options
        self.discard_other_writers = tuple(discard_other_writers)
        self.letters: DeadLetterTable | None = None

    def plan(self) -> int:
        state = check_table(self.point, self.target, self.discard_other_writers)
        self.letters = dead_letter_table_of(
            self.point, state, self.dead_letter_table, self.storage_options
        )
        if self.letters is not None:
            plan_dead_letter_rewind(self.letters, discard_other_writers=self.discard_other_writers)
        return (self.target.generation(state.table, app_id=state.app_id) or 0) + 1

    def apply(self, *, generation: int, checkpoint_location: str) -> Rewound:
        rewound = rewind_table(
            self.point,
            self.target,
            self.discard_other_writers,
            generation,
            checkpoint_location=checkpoint_location,
        )
        if self.letters is None:
            return replace(rewound, table=self.target.uri)
        before, restored = rewind_dead_letters(
            self.letters,
            discard_other_writers=self.discard_other_writers,
            generation=generation,
            savepoint_id=self.point.savepoint_id,
        )
        return replace(
            rewound,
            table=self.target.uri,
            dead_letter_table=self.letters.target.uri,
            dead_letters_rolled_back_from=before,
            dead_letters_restore_version=restored,
        )


class DeltaTableKind:
    """The sink kind of a writer of one Delta table (``chkpt-delta``, ``DeltaUpsert``),
    as :mod:`spark_chkpt.sinks` asks it: its rewind is :class:`DeltaRewind`."""

    has_barriers = False
    target_option = "path"
    progress_hint = ""

    def __init__(self, *, name: str) -> None:
        self.name = name

    def rewind(self, *, point: RewindPoint, request: RewindRequest) -> DeltaRewind:
        return DeltaRewind(
            point=point,
            table=request.table,
            dead_letter_table=request.dead_letter_table,
            storage_options=request.storage_options,
            discard_other_writers=request.discard_other_writers,
        )

    def describe(
        self, *, target: str | None, app_id: str, batch_id: int, version: int | None
    ) -> str:
        return f"Delta version {'-' if version is None else version}, txn {app_id}={batch_id}"

    def barrier_topics(self, target: str | None) -> tuple[str, ...]:
        return ()

    def progress(
        self, *, record: SnapshotRecord, bootstrap_servers: str | None
    ) -> dict[str, dict[str, int]] | None:
        return None


def rewind_target(
    point: RewindPoint, table: str | None, storage_options: Mapping[str, str] | None
) -> DeltaTarget:
    """Step 2 of a rewind: the table, checked (see the module docstring)."""
    uri = table or point.target
    if uri is None:
        raise SavepointError(
            f"savepoint {point.savepoint_id} does not name the sink's table (its snapshot "
            "record does not name it): give --table, the chkpt-delta table to roll back"
        )
    if table is not None and point.target and not same_table(table, point.target):
        raise SavepointError(
            f"--table {table} is not the table the savepoint's query wrote ({point.target}): "
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
    if point.dead_letters:
        uri, version = point.dead_letters, point.dead_letter_version
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
) -> Rewound:
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
        return Rewound(rolled_back_from=state.current)
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
    return Rewound(
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
