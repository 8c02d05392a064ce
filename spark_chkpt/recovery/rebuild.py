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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_chkpt.delta.history import snapshot_records
from spark_chkpt.delta.table import DeltaTarget
from spark_chkpt.errors import NotADeltaTableError, RecoveryError
from spark_chkpt.fs import Location, qualify, resolve
from spark_chkpt.snapshot.epoch import StartedBy, write_epoch
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.store import SnapshotStore

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
    *, table_uri: str, storage_options: Mapping[str, str] | None = None
) -> list[TableSnapshot]:
    """Every commit of the table that carries a snapshot record, newest first."""
    try:
        table = DeltaTarget(uri=table_uri, storage_options=storage_options).require()
    except NotADeltaTableError as e:
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
    snapshot = last_snapshot(table_uri=table_uri, app_id=app_id, storage_options=storage_options)
    record = snapshot.record
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
    log.warning(
        "recovered %s from %s: query %s resumes at batch %d after Delta version %d, from %s",
        checkpoint_location,
        table_uri,
        record.app_id,
        batch + 1,
        snapshot.table_version,
        json.dumps(record.source_offsets),
    )
    return snapshot


def write_checkpoint(
    *,
    checkpoint_location: str,
    query_id: str,
    batch_id: int,
    offsets: str,
    previous_offsets: str | None,
    commit: str,
    record: SnapshotRecord | None,
    before_metadata: Callable[[Location], None] | None = None,
    generation: tuple[int, StartedBy, str] | None = None,
) -> None:
    """Write a Spark checkpoint at ``checkpoint_location`` (which must hold none) whose
    query ``query_id`` resumes at batch ``batch_id + 1``: ``offsets/N-1`` (Spark reads
    it on restart; skipped when None), ``offsets/N``, ``commits/N``, the snapshot
    ``record`` in the store, then ``before_metadata(root)`` (a savepoint copies the
    state there), and ``metadata`` last: until it exists Spark would not take the
    folder for a checkpoint (nor :func:`checkpoint_in_use` for a written one)."""
    root = resolve(qualify(checkpoint_location))
    in_use = checkpoint_in_use(root)
    if in_use is not None:
        raise RecoveryError(
            f"{checkpoint_location} already holds a Spark checkpoint ({in_use} exists); "
            "write into an empty folder"
        )
    if previous_offsets is not None:
        root.child("offsets", str(batch_id - 1)).write_atomic(previous_offsets)
    root.child("offsets", str(batch_id)).write_atomic(offsets)
    root.child("commits", str(batch_id)).write_atomic(commit)
    if record is not None:
        # The snapshot store gets the record, so `spark-chkpt snapshots` shows where it resumes.
        SnapshotStore(checkpoint_location=qualify(checkpoint_location)).put(record)
    if before_metadata is not None:
        before_metadata(root)
    if generation is not None:
        number, started_by, source = generation
        write_epoch(root, generation=number, started_by=started_by, source=source)
    root.child("metadata").write_atomic(json.dumps({"id": query_id}))


def checkpoint_in_use(root: Location) -> str | None:
    """The first of Spark's checkpoint parts the folder holds, or None if it holds none."""
    for part in ("metadata", "offsets", "commits", "state"):
        if root.child(part).exists():
            return part
    return None


def offset_log_entry(*, sources: list[Any], watermark_ms: int = 0) -> str:
    """Spark's ``offsets/N`` text: version, batch metadata, one line per source."""
    meta = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": int(time.time() * 1000)}
    lines = ["v1", json.dumps(meta)]
    lines += ["-" if s is None else json.dumps(s) for s in sources]
    return "\n".join(lines)
