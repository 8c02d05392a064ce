"""The snapshot record: what one completed snapshot (= one micro-batch) contains.

Written in the sink's Delta commit (commitInfo custom metadata) and in the snapshot
store, so the table alone can say which source offsets it holds.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

# The commitInfo key under which a Delta commit carries its snapshot record.
SNAPSHOT_KEY = "chkpt.snapshot"


class CommitOutcome(str, Enum):
    """What the coordinator did with one batch (Flink's PendingCheckpoint results)."""

    COMMITTED = "committed"  # staged output made visible in this call
    DUPLICATE = "duplicate"  # the batch was already committed; this attempt discarded
    EMPTY = "empty"  # nothing staged; the snapshot is recorded without a data commit


@dataclass(frozen=True)
class SnapshotRecord:
    """One completed snapshot, as JSON in commitInfo and in the snapshot store."""

    batch_id: int
    app_id: str
    query_name: str | None
    sink: str
    source_offsets: list[Any]
    table_version: int | None
    rows: int
    files: int
    bytes: int
    commit_ms: float
    outcome: str = CommitOutcome.COMMITTED.value
    attempts: list[str] = field(default_factory=list)
    upstream_snapshots: list[Any] = field(default_factory=list)
    retries: int = 0  # commit conflicts with other writers retried before this commit
    dead_letters: int = 0  # malformed records committed to the dead-letter table
    # How the batch reached the table: "append", "complete" (the table's files replaced
    # by the batch's) or "upsert" (one MERGE on key columns).
    mode: str = "append"
    # Stateful queries: per stateful operator, the state Spark wrote for this snapshot
    # (operator id and name, state version, partitions, files, bytes; keys when known).
    state_operators: list[dict[str, Any]] = field(default_factory=list)
    # mode "upsert": the MERGE's figures (source rows, inserted, updated, deleted).
    merge: dict[str, int] = field(default_factory=dict)
    # Where the sink wrote: the Delta table's URI, or the Kafka topic(s), comma-separated
    # (savepoints need it to rewind the table; None in records of older releases).
    target: str | None = None
    # chkpt-delta with deadLetterPath: the dead-letter table's URI, and its Delta version
    # that holds this snapshot's dead letters (the commit that set its txn(appId, N); its
    # newest version when the batch made no commit there; None: no such table yet). A
    # rewind to N rolls that table back to this version (None in older records).
    dead_letter_target: str | None = None
    dead_letter_version: int | None = None
    # chkpt-kafka: per topic, how far this commit had read its control topic when it
    # passed the fence: {"control_topic", "offset", "id" (the control topic's Kafka id),
    # "generation"}. A restarted coordinator reads the control topic from there
    # (spark_chkpt.kafka.sink.control_read); empty in older records: it reads it all.
    control_read: dict[str, dict[str, Any]] = field(default_factory=dict)
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    # A sink plugin's own part of the record (JSON values, by its own names): what its
    # rewind needs of snapshot N travels in the store, the savepoint's manifest and the
    # RewindPoint's record with no change here. Empty for the built-in sinks.
    sink_state: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = asdict(self)
        for own in ("control_read", "sink_state"):  # one sink's: others' records stay as they were
            if not doc[own]:
                del doc[own]
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SnapshotRecord:
        doc = json.loads(text)
        known = {k: v for k, v in doc.items() if k in cls.__dataclass_fields__}
        return cls(**known)
