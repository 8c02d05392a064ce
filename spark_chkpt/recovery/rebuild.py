"""Recovery from the table when the checkpoint folder is lost.

Every ``chkpt-delta`` commit carries its snapshot record (``chkpt.snapshot`` in
commitInfo): the query id, the batch id and the source end offsets of the snapshot the
commit completed. So the table itself says where its query stood, as kafka-delta-ingest
keeps offsets in the table for this reason. :func:`recover_checkpoint` writes a new
checkpoint folder from the table's last snapshot: Spark's ``metadata`` with the same
query id, ``offsets/N`` with the snapshot's source offsets (and ``offsets/N-1``, which
Spark reads on restart) and ``commits/N``. A query
started on it resumes at batch N+1 from exactly where the table ends, and its commits
go on under the same ``txn(appId)``: nothing read twice, nothing skipped.

A recover starts a new generation of the query's app id (:mod:`spark_chkpt.snapshot.epoch`):
one above the table's, written to the new checkpoint (``chkpt/epoch.json``) and then to
the table (an empty commit carrying ``txn(<appId>#generation, g)``). From then on the
"lost" checkpoint, should it still run somewhere, is fenced.

Only stateless queries can be recovered this way: the keyed state of a stateful query
lives in the lost folder (Spark fails to load it and says so; use a savepoint).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from spark_chkpt.delta.table.history import snapshot_records
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import NotADeltaTableError, RecoveryError
from spark_chkpt.snapshot.checkpoint import offset_log_entry, write_checkpoint
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.tools import Tool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableSnapshot:
    """The newest snapshot record of one query in a Delta table, with its version."""

    record: SnapshotRecord
    table_version: int

    @property
    def app_id(self) -> str:
        return self.record.app_id

    @property
    def batch_id(self) -> int:
        return self.record.batch_id


def table_snapshots(
    *, table_uri: str, storage_options: Mapping[str, str] | None = None
) -> dict[str, TableSnapshot]:
    """Per query id, the snapshot record of its newest commit. That is the highest
    batch, but after a savepoint rewind: the restore commit carries the record of the
    batch it rolled the table back to, and the later batches' commits no longer count."""
    newest: dict[str, TableSnapshot] = {}
    for snapshot in snapshot_history(table_uri=table_uri, storage_options=storage_options):
        if snapshot.app_id not in newest:  # newest first: the app's newest commit
            newest[snapshot.app_id] = snapshot
    return newest


def snapshot_history(
    *, table_uri: str, storage_options: Mapping[str, str] | None = None, tool: Tool = "recover"
) -> list[TableSnapshot]:
    """Every commit of the table that carries a snapshot record, newest first. A path
    that is no Delta table but another sink kind's target is refused naming that kind
    and ``tool``, the command reading it (:func:`spark_chkpt.sinks.require_tool_at`)."""
    try:
        table = DeltaTarget(uri=table_uri, storage_options=storage_options).require()
    except NotADeltaTableError as e:
        from spark_chkpt.sinks import require_tool_at

        require_tool_at(table_uri, tool=tool, command=tool)
        raise RecoveryError(f"{table_uri} is not a Delta table: {e}") from e

    def unreadable(version: int, e: Exception) -> None:
        raise RecoveryError(
            f"{table_uri} version {version}: unreadable snapshot record ({e})"
        ) from e

    return [
        TableSnapshot(record=record, table_version=version)
        for version, record in snapshot_records(table, unreadable=unreadable)
    ]


def last_snapshot(
    *,
    table_uri: str,
    app_id: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> TableSnapshot:
    """The newest snapshot of ``app_id`` in the table (of its only query if None)."""
    found = table_snapshots(table_uri=table_uri, storage_options=storage_options)
    if app_id is not None:
        if app_id not in found:
            raise RecoveryError(
                f"{table_uri} holds no snapshot of query {app_id}; it holds "
                f"{', '.join(sorted(found)) or 'none'}"
            )
        return found[app_id]
    if not found:
        raise RecoveryError(f"{table_uri} holds no snapshot records: nothing to resume from")
    if len(found) > 1:
        listing = "; ".join(
            f"{a} (batch {s.batch_id}, query {s.record.query_name})"
            for a, s in sorted(found.items())
        )
        raise RecoveryError(
            f"{table_uri} holds snapshots of {len(found)} queries: {listing}. "
            "Name the one to recover with --app-id."
        )
    return next(iter(found.values()))


def recover_checkpoint(
    *,
    table_uri: str,
    checkpoint_location: str,
    app_id: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> TableSnapshot:
    """Write a checkpoint at ``checkpoint_location`` (which must not hold one) from which
    the query resumes at the batch after the table's last snapshot."""
    from spark_chkpt.sinks import require_tool

    snapshot = last_snapshot(table_uri=table_uri, app_id=app_id, storage_options=storage_options)
    record = snapshot.record
    require_tool(record.sink or None, tool="recover", command="recover")
    batch = record.batch_id
    entry = offset_log_entry(sources=record.source_offsets)
    target = DeltaTarget(uri=table_uri, storage_options=storage_options)
    table = target.open()
    generation = (target.generation(table, app_id=record.app_id) or 0) + 1
    write_checkpoint(
        checkpoint_location=checkpoint_location,
        query_id=record.app_id,
        batch_id=batch,
        # Spark reads the entry before the last one on restart (the start of batch N);
        # the next batch starts from offsets/N whatever it holds.
        offsets=entry,
        previous_offsets=entry if batch > 0 else None,
        commit='v1\n{"nextBatchWatermarkMs":0}',
        record=record,
        generation=(generation, "recover", table_uri),
    )
    target.start_generation(
        table,
        app_id=record.app_id,
        generation=generation,
        metadata={
            "chkpt.generation": json.dumps(
                {"recover": checkpoint_location, "generation": generation}
            )
        },
    )
    log.info(
        "recovered %s from %s: query %s resumes at batch %d after Delta version %d, from %s",
        checkpoint_location,
        table_uri,
        record.app_id,
        batch + 1,
        snapshot.table_version,
        json.dumps(record.source_offsets),
    )
    return snapshot
