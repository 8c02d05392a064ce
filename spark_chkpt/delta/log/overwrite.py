"""The project's own Delta commit of a replacement (``outputMode("complete")``), for
tables delta-rs refuses to commit to (:mod:`spark_chkpt.delta.log.commit` does appends).

The commit is the append's (:func:`~spark_chkpt.delta.log.commit.build_append`: the
``commitInfo`` with the in-commit timestamp, the row-id high-water mark, the new files'
``add`` actions with fresh ``baseRowId``s above it, the ``txn(appId, N)``, other domains
kept) plus a ``remove`` for every live file of the version it builds on, as delta-spark's
``AddFile.removeWithTimestamp`` writes it (``deletionTimestamp``, ``dataChange``,
``extendedFileMetadata``, ``partitionValues``, ``size``, ``stats``, ``tags``,
``deletionVector``, ``baseRowId``, ``defaultRowCommitVersion``), and its ``commitInfo``
is delta-spark's overwrite (``WRITE``, mode ``Overwrite``, not a blind append). The live
files are read from the table's log: the newest checkpoint at or before the version
(classic, multi-part or v2 with sidecars) and the JSON commits after, a file known by its
path and deletion vector (PROTOCOL.md, "Reconciliation"). A lost race reads the commits
that won (:func:`~spark_chkpt.delta.log.commit.advance`) and builds the replacement again
on the newest version, so the files they added are removed too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from spark_chkpt.delta.log.commit import (
    LogState,
    NewFiles,
    OwnCommit,
    build_append,
    commit_actions,
    log_text,
)
from spark_chkpt.delta.log.restore import read_snapshot, remove_of
from spark_chkpt.fs import Location


def live_files(location: Location, *, version: int) -> list[dict[str, Any]]:
    """The add actions of every file of the table at ``location`` as of ``version``
    (:func:`~spark_chkpt.delta.log.restore.read_snapshot`)."""
    return [dict(add) for add in read_snapshot(location, version).files.values()]


def build_overwrite(
    state: LogState, *, live: Sequence[Mapping[str, Any]], new: NewFiles, now_ms: int
) -> str:
    """The JSON commit of version ``state.version + 1`` replacing the ``live`` files
    (their add actions) with ``new``'s (pure); its ``meta``: a ``metaData`` action written
    with them (the identity high-water marks the new files' values moved,
    :func:`spark_chkpt.delta.features.identity.identity_metadata`)."""
    text = build_append(state, new=new, now_ms=now_ms)
    actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    info = actions[0]["commitInfo"]
    info["operationParameters"] = {
        "mode": "Overwrite",
        "partitionBy": json.dumps(list(new.partition_by)),
    }
    info["isBlindAppend"] = False
    stamp = int(info["timestamp"])
    removes = [{"remove": remove_of(a, timestamp=stamp)} for a in live]
    lead = ("commitInfo", "metaData", "domainMetadata")
    head = [a for a in actions if any(k in a for k in lead)]
    rest = [a for a in actions if not any(k in a for k in lead)]
    return log_text(head + removes + rest)


def commit_overwrite(*, to: OwnCommit, state: LogState, app_id: str, new: NewFiles) -> int | None:
    """Replace every file of the table ``to`` with ``new``'s on top of ``state``, as
    :func:`~spark_chkpt.delta.log.commit.commit_append` appends: the version committed,
    or None when a commit that won the race holds ``txn(app_id) >= new.txns[app_id]``.
    ``new.meta``: a ``metaData`` action written with them (a race lost to another
    writer's metaData is a :class:`~spark_chkpt.errors.CommitConflictError`)."""
    return commit_actions(
        to=to,
        state=state,
        app_id=app_id,
        new=new,
        build=lambda at, now_ms: build_overwrite(
            at, live=live_files(to.location, version=at.version), new=new, now_ms=now_ms
        ),
    )
