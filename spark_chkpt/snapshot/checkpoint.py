"""Spark's own checkpoint folder: read (the query id and each batch's planned offsets)
and written (a checkpoint a restore or a recover hands the query to resume from).

Spark writes ``<checkpointLocation>/metadata`` (``{"id": "<query id>"}``) when a query
first starts, and ``offsets/<N>`` before running batch N: a version line (``v1``), a
batch-metadata JSON line, then one line per source in the query's order (``-`` for a
source with no offset yet). :func:`write_checkpoint` writes the same files, ``metadata``
last, for a query that resumes at the batch after a given one (``spark-chkpt recover``
and a savepoint's restore).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spark_chkpt.errors import ChkptError, RecoveryError
from spark_chkpt.fs import Location, qualify, resolve
from spark_chkpt.snapshot.epoch import StartedBy, write_epoch
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.store import SnapshotStore


@dataclass(frozen=True)
class BatchPlan:
    """What Spark planned for one batch: its id and each source's end offset."""

    batch_id: int
    sources: tuple[Any, ...]
    metadata: dict[str, Any]


class SparkCheckpoint:
    """Read-only view of a Structured Streaming checkpoint location."""

    def __init__(self, *, location: str) -> None:
        self.uri = location
        self.root: Location = resolve(location)

    def query_id(self) -> str:
        """Spark's query id: stable across restarts and moves of the checkpoint folder."""
        meta = self.root.child("metadata")
        try:
            return str(json.loads(meta.read_text())["id"])
        except FileNotFoundError as e:
            raise ChkptError(
                f"{meta} does not exist: is {self.uri} a Spark streaming checkpoint location?"
            ) from e
        except (ValueError, KeyError, TypeError) as e:
            raise ChkptError(f"{meta} is not Spark query metadata: {e}") from e

    def plan(self, batch_id: int) -> BatchPlan:
        path = self.root.child("offsets", str(batch_id))
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError as e:
            raise ChkptError(f"Spark has no plan for batch {batch_id}: {path} is missing") from e
        if len(lines) < 2 or not lines[0].startswith("v"):
            raise ChkptError(f"{path} is not a Spark offset log entry")
        try:
            metadata = json.loads(lines[1])
            sources = tuple(None if line.strip() == "-" else json.loads(line) for line in lines[2:])
        except ValueError as e:
            raise ChkptError(f"{path}: malformed offset line: {e}") from e
        return BatchPlan(batch_id=batch_id, sources=sources, metadata=metadata)

    def committed(self, batch_id: int) -> bool:
        """Whether Spark's commit log has batch ``batch_id``."""
        return self.root.child("commits", str(batch_id)).exists()


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
