"""Query identity on a replay: is the table's commit of batch N this checkpoint's?

More: docs/concepts/delta-internals.md (spark_chkpt/delta/replay.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from spark_chkpt.delta.table.history import snapshot_records
from spark_chkpt.delta.table.reader import TxnCommit
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import ChkptError, QueryIdentityError
from spark_chkpt.offsets import META_KEY, from_json
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord

log = logging.getLogger(__name__)

IDENTITY_FIX = (
    "Nothing of this attempt was committed and the table is unchanged. A fresh checkpoint "
    "for a table this app id already wrote needs a new txnAppId (or the checkpoint that "
    "wrote the table); two copies of one checkpoint must not run, only one of them may "
    "write the table."
)


def check_replay(
    *,
    target: DeltaTarget,
    table: Any,
    app_id: str,
    checkpoint_location: str,
    batch_id: int,
    done: int,
    sources: Sequence[Any],
    writer: str = "chkpt-delta",
) -> tuple[TxnCommit | None, SnapshotRecord | None]:
    """The commit of ``batch_id`` by ``app_id`` and its record (with its Delta version)
    if its source offsets are ``sources``; ``(commit, None)`` or ``(None, None)`` if the
    commit cannot be checked but a replay is the only explanation; raises
    :class:`QueryIdentityError` otherwise (see the module docstring). ``writer`` names
    the writer in messages."""
    commit = target.find_txn_commit(table, app_id=app_id, txn_version=batch_id)
    if commit is None:
        if done > batch_id:
            raise QueryIdentityError(
                f"{writer} table {target.uri} holds app id '{app_id}' up to batch {done}, "
                f"past batch {batch_id}, but its log no longer holds the commit of batch "
                f"{batch_id} (JSON commits cleaned up or history rewritten), so this "
                f"checkpoint ({checkpoint_location}) and its plan for batch {batch_id} "
                f"{describe_offsets(sources)} cannot be checked against the table. "
                f"{IDENTITY_FIX}"
            )
        log.warning(
            "%s batch %d: the commit of txn %s=%d is no longer in the log of %s; "
            "taking this attempt as a replay of it",
            writer,
            batch_id,
            app_id,
            batch_id,
            target.uri,
        )
        return None, None
    snapshot = commit.info.get(SNAPSHOT_KEY)
    if not snapshot:
        log.warning(
            "%s batch %d: Delta version %d set txn %s=%d without a snapshot record; its "
            "source offsets cannot be compared, taking this as a replay",
            writer,
            batch_id,
            commit.version,
            app_id,
            batch_id,
        )
        return commit, None
    record = replace(SnapshotRecord.from_json(snapshot), table_version=commit.version)
    if positions(record.source_offsets) != positions(sources):
        raise QueryIdentityError(
            f"{writer} table {target.uri} already holds batch {batch_id} of app id "
            f"'{app_id}' (Delta version {commit.version}) from source offsets "
            f"{describe_offsets(record.source_offsets)}, but this query's checkpoint "
            f"({checkpoint_location}) planned batch {batch_id} with offsets "
            f"{describe_offsets(sources)}: the checkpoint is not the one that wrote the "
            f"table. {IDENTITY_FIX}"
        )
    return commit, record


def other_writers(table: Any) -> dict[str, tuple[int, SnapshotRecord]]:
    """Per app id, the Delta version and snapshot record of its newest commit in the
    table's history (the writers whose commits carry a record)."""
    newest: dict[str, tuple[int, SnapshotRecord]] = {}
    for version, record in snapshot_records(table):  # newest first
        newest.setdefault(record.app_id, (version, record))
    return newest


def refuse_overlap(
    *, target: DeltaTarget, table: Any, app_id: str, sources: Sequence[Any], writer: str
) -> None:
    """This app id's first commit to a table that holds snapshots of another query
    reading the same topic-partitions: its checkpoint was lost or replaced (a new query
    id, a changed app id, a fork started on the original table), and it would write what
    the table has again. Refuse, naming the recovery."""
    mine = partitions_of(sources)
    if not mine:
        return
    uri = target.uri
    for other, (version, record) in sorted(other_writers(table).items()):
        shared = mine & partitions_of(record.source_offsets)
        if other == app_id or not shared:
            continue
        raise QueryIdentityError(
            f"{writer}: {uri} already holds snapshots of query {other} (last: batch "
            f"{record.batch_id}, Delta version {version}, query name "
            f"{record.query_name!r}) reading the same topic-partitions "
            f"({', '.join(sorted(shared)[:5])}); this query ({app_id}) writes to it "
            "for the first time and would write that data again. If the checkpoint was "
            f"lost: spark-chkpt recover --table {uri} --checkpoint <new folder> --app-id "
            f"{other}, then start the query on the new folder. If two queries must write "
            "the same partitions, set the sink option otherWriters=allow (chkpt-delta). "
            "Nothing was committed."
        )


def partitions_of(sources: Sequence[Any]) -> set[str]:
    """``topic-partition`` names a batch's source offsets cover (Kafka-shaped sources)."""
    names: set[str] = set()
    for source in sources:
        if isinstance(source, dict):
            for topic, parts in source.items():
                if topic != META_KEY and isinstance(parts, dict):
                    names.update(f"{topic}-{p}" for p in parts)
    return names


def positions(sources: Sequence[Any]) -> list[Any]:
    """Each source's end offsets without the alignment report (``__chkpt__``): what two
    plans of one batch must share."""
    return [
        {k: v for k, v in s.items() if k != META_KEY} if isinstance(s, dict) else s for s in sources
    ]


def describe_offsets(sources: Sequence[Any]) -> str:
    """``[events-0: 120, events-1: 98]`` (one ``;``-separated part per source)."""
    parts = []
    for source in sources:
        try:
            offsets = from_json(source) if isinstance(source, dict) else None
        except ChkptError:
            offsets = None
        if offsets is not None:
            parts.append(", ".join(f"{tp}: {offsets[tp]}" for tp in sorted(offsets)))
        else:
            parts.append(json.dumps(source, sort_keys=True))
    return "[" + "; ".join(parts) + "]"
