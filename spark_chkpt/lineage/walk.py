"""``spark-chkpt lineage``: from a Delta version back through every upstream snapshot.

1. **The table.** Version V's commitInfo carries the snapshot record of the batch that
   wrote it (app id, batch N, each source's end offsets and alignment report); the same
   query's previous record in the log gives where batch N started.
2. **Through the barriers.** A topic the batch read that an upstream ``chkpt-kafka``
   sink writes has a control topic (``__chkpt.<topic>``, read with
   :class:`~spark_chkpt.kafka.control.topic.ControlTopic`): its ``complete``
   entries name each upstream snapshot, its barrier offsets and the upstream's own
   source offsets. The upstream snapshots the batch covered are those whose barriers lie
   in the offsets it read (:func:`spark_chkpt.lineage.model.covered`).
3. **Stage by stage.** Each upstream snapshot's source offsets (and its previous
   snapshot's, from the entry before it) are walked the same way, until a topic has no
   control topic (a plain producer's), a source is no topic, or ``max_stages``.

The control topics need the broker (``bootstrap_servers``); without it the walk stops
after the table's writer and says so. An upstream query's checkpoint folder is not
written in its entries: ``upstream`` checkpoints, when given, add the full snapshot
record of each upstream snapshot of their query (rows, commit time, its alignment
report), found by app id and batch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from spark_chkpt.alignment.barrier import IndexEntry, control_topic_for
from spark_chkpt.delta.table.history import history as commit_history
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import ChkptError, NotADeltaTableError
from spark_chkpt.kafka.control.topic import ControlTopic
from spark_chkpt.lineage.model import (
    Lineage,
    SnapshotNode,
    check_version,
    covered,
    previous_entry,
    reads_of,
)
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord
from spark_chkpt.snapshot.store import SnapshotStore

log = logging.getLogger(__name__)

MAX_STAGES = 16


def trace(
    *,
    table: str,
    version: int,
    bootstrap_servers: str | None = None,
    upstream: Sequence[str] = (),
    storage_options: Mapping[str, str] | None = None,
    max_stages: int = MAX_STAGES,
) -> Lineage:
    """The lineage of ``table`` at ``version`` (steps 1-3 of the module docstring).
    Raises :class:`ChkptError` when the version is not in the table's history or carries
    no snapshot record."""
    root, notes = _table_node(table=table, version=version, storage_options=storage_options)
    nodes = [root]
    if bootstrap_servers is None:
        if root.sources:
            notes.append(
                "upstream snapshots not followed: give --bootstrap-servers to read the "
                "control topics of " + ", ".join(sorted({r.topic for r in root.sources}))
            )
        return Lineage(table=table, version=version, snapshots=nodes, notes=notes)
    stores = [SnapshotStore(checkpoint_location=c) for c in upstream]
    indexes: dict[str, ControlTopic | None] = {}
    seen = {(root.app_id, root.snapshot_id)}
    try:
        frontier = [root]
        while frontier:
            node = frontier.pop(0)
            if node.stage + 1 >= max_stages:
                notes.append(f"stopped after {max_stages} stages")
                break
            for read in node.sources:
                index = _index(indexes, bootstrap_servers, read.topic)
                if index is None:
                    continue
                for entry in covered(index.entries, read):
                    if (entry.app_id, entry.snapshot_id) in seen:
                        continue
                    seen.add((entry.app_id, entry.snapshot_id))
                    child = _entry_node(entry, index, parent=node, stores=stores, notes=notes)
                    nodes.append(child)
                    frontier.append(child)
    finally:
        for index in indexes.values():
            if index is not None:
                index.close()
    return Lineage(table=table, version=version, snapshots=nodes, notes=notes)


def _table_node(
    *, table: str, version: int, storage_options: Mapping[str, str] | None
) -> tuple[SnapshotNode, list[str]]:
    try:
        delta = DeltaTarget(uri=table, storage_options=storage_options).require()
    except NotADeltaTableError as e:
        from spark_chkpt.sinks import require_tool_at

        require_tool_at(table, tool="lineage", command="lineage")
        raise ChkptError(f"{table} is not a Delta table: {e}") from e
    history = {e.version: e.info for e in commit_history(delta)}
    check_version(version, sorted(history), table=table)
    info = history[version]
    text = info.get(SNAPSHOT_KEY)
    if not text:
        raise ChkptError(
            f"{table} version {version} ({info.get('operation')}) carries no "
            "snapshot record: no spark-chkpt sink wrote it"
        )
    record = SnapshotRecord.from_json(text)
    from spark_chkpt.sinks import require_tool

    require_tool(record.sink or None, tool="lineage", command="lineage")
    previous = _previous_record(history, version=version, record=record)
    reads, others = reads_of(
        record.source_offsets, previous=previous.source_offsets if previous else None
    )
    notes = []
    if previous is None and record.batch_id > 0:
        notes.append(
            f"the table holds no earlier snapshot of {record.app_id}: where batch "
            f"{record.batch_id} started is unknown, every upstream snapshot before its "
            "end is listed"
        )
    node = SnapshotNode(
        stage=0,
        app_id=record.app_id,
        snapshot_id=record.batch_id,
        writes=table,
        table_version=version,
        sources=reads,
        rows=record.rows,
        created_ms=record.created_ms,
        record=asdict(record),
        other_sources=others,
    )
    return node, notes


def _previous_record(
    history: Mapping[int, Mapping[str, Any]], *, version: int, record: SnapshotRecord
) -> SnapshotRecord | None:
    """The newest record of the same query, of an earlier batch, before ``version``."""
    for v in sorted((v for v in history if v < version), reverse=True):
        text = history[v].get(SNAPSHOT_KEY)
        if not text:
            continue
        earlier = SnapshotRecord.from_json(text)
        if earlier.app_id == record.app_id and earlier.batch_id < record.batch_id:
            return earlier
    return None


def _index(
    indexes: dict[str, ControlTopic | None], bootstrap_servers: str, topic: str
) -> ControlTopic | None:
    """The control topic of ``topic`` read to its end; None if it has none."""
    if topic not in indexes:
        index = ControlTopic(
            bootstrap_servers=bootstrap_servers,
            control_topic=control_topic_for(topic),
            data_topic=topic,
            client_id="spark-chkpt-lineage",
        )
        if not index.exists():
            index.close()
            indexes[topic] = None
        else:
            index.refresh()
            indexes[topic] = index
    return indexes[topic]


def _entry_node(
    entry: IndexEntry,
    index: ControlTopic,
    *,
    parent: SnapshotNode,
    stores: Sequence[SnapshotStore],
    notes: list[str],
) -> SnapshotNode:
    """The upstream snapshot a ``complete`` entry describes, with what it read: the
    upstream's own record if an ``upstream`` checkpoint holds it, else the entry's."""
    record = _stored(stores, entry)
    before = previous_entry(index.entries, entry)
    if record is not None:
        sources: Sequence[Any] = record.source_offsets
    elif entry.sources is not None:
        sources = entry.sources
    else:
        sources = ()
        notes.append(
            f"{entry.app_id}#{entry.snapshot_id}: its index entry in {index.control_topic} "
            "records no source offsets (written by an earlier release)"
        )
    previous = before.sources if before is not None else None
    reads, others = reads_of(sources, previous=previous)
    return SnapshotNode(
        stage=parent.stage + 1,
        app_id=entry.app_id,
        snapshot_id=entry.snapshot_id,
        writes=entry.topic,
        sources=reads,
        barriers=dict(entry.positions),
        rows=sum(entry.counts.values()),
        created_ms=entry.created_ms,
        read_by=parent.name(),
        record=asdict(record) if record is not None else None,
        other_sources=others,
    )


def _stored(stores: Sequence[SnapshotStore], entry: IndexEntry) -> SnapshotRecord | None:
    for store in stores:
        try:
            record = store.get(entry.snapshot_id)
        except ChkptError as e:
            log.warning("%s", e)
            continue
        if record is not None and record.app_id == entry.app_id:
            return record
    return None
