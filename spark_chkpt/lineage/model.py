"""Lineage, pure: which upstream snapshots a batch's offsets cover, and how a walk reads.

A snapshot of a downstream query read offsets ``(start, end]`` of a topic that an upstream
``chkpt-kafka`` sink writes: the upstream snapshots it covers are those whose barrier
lies in that range on some partition (a Kafka end offset is the next offset to read, so
a barrier at ``b`` is read when ``start <= b < end``). An aligned batch covers whole
snapshots: it ends right after their barriers on every partition. No I/O here: the walk
(:mod:`spark_chkpt.lineage.walk`) reads the Delta log and the control topics.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.errors import ChkptError
from spark_chkpt.offsets import META_KEY, meta_of


@dataclass(frozen=True)
class SourceRead:
    """What one snapshot read from one topic: each partition's start and end offset
    (``start`` empty when the previous snapshot is unknown: the first batch, or a
    retention that dropped it), the alignment report's mode and the upstream it names."""

    topic: str
    start: dict[int, int]
    end: dict[int, int]
    mode: str | None = None
    upstream_app: str | None = None
    upstream_snapshots: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class SnapshotNode:
    """One snapshot on the walk: the query (app id) and batch that wrote it, where, what
    it read. ``stage`` 0 is the table's writer, 1 the query upstream of it, and so on;
    ``read_by`` names the downstream snapshot that read it (``app#batch``)."""

    stage: int
    app_id: str
    snapshot_id: int
    writes: str  # the Delta table (at ``table_version``) or the Kafka topic
    sources: list[SourceRead]
    table_version: int | None = None
    barriers: dict[int, int] = field(default_factory=dict)  # partition -> barrier offset
    rows: int | None = None
    created_ms: int | None = None
    read_by: str | None = None
    record: dict[str, Any] | None = None  # its snapshot record, when found (--upstream)
    other_sources: list[Any] = field(default_factory=list)  # offsets of non-Kafka sources

    def name(self) -> str:
        return f"{self.app_id}#{self.snapshot_id}"


def topic_offsets(source: Any) -> dict[str, dict[int, int]] | None:
    """A source's offsets as topic -> partition -> offset; None for a source that is not
    a Kafka topic's (a file source's ``{"logOffset": 3}``)."""
    if not isinstance(source, Mapping):
        return None
    found: dict[str, dict[int, int]] = {}
    for topic, parts in source.items():
        if topic == META_KEY:
            continue
        if not isinstance(parts, Mapping):
            return None
        try:
            found[str(topic)] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            return None
    return found or None


def reads_of(
    sources: Sequence[Any], *, previous: Sequence[Any] | None
) -> tuple[list[SourceRead], list[Any]]:
    """The topic reads of a snapshot whose end offsets are ``sources`` and whose previous
    snapshot ended at ``previous`` (None: unknown); and the sources that are no topic's."""
    before: dict[str, dict[int, int]] = {}
    for source in previous or ():
        before.update(topic_offsets(source) or {})
    reads, others = [], []
    for source in sources:
        topics = topic_offsets(source)
        if topics is None:
            others.append(source)
            continue
        report = meta_of(source).get("topics") or {}
        for topic, end in sorted(topics.items()):
            about = report.get(topic) if isinstance(report, Mapping) else None
            about = about if isinstance(about, Mapping) else {}
            reads.append(
                SourceRead(
                    topic=topic,
                    start=dict(before.get(topic, {})),
                    end=end,
                    mode=about.get("mode"),
                    upstream_app=about.get("app"),
                    upstream_snapshots=[int(s) for s in about.get("snapshots") or []],
                )
            )
    return reads, others


def covered(entries: Iterable[IndexEntry], read: SourceRead) -> list[IndexEntry]:
    """The ``complete`` entries whose barrier ``read`` read on some partition, first
    entry per (app, snapshot), by app and snapshot id."""
    found: dict[tuple[str, int], IndexEntry] = {}
    for entry in entries:
        if entry.kind != "complete" or entry.topic != read.topic:
            continue
        key = (entry.app_id, entry.snapshot_id)
        if key in found:
            continue
        for partition, barrier in entry.positions.items():
            end = read.end.get(partition)
            if end is not None and read.start.get(partition, 0) <= barrier < end:
                found[key] = entry
                break
    return [found[k] for k in sorted(found)]


def previous_entry(entries: Iterable[IndexEntry], entry: IndexEntry) -> IndexEntry | None:
    """The ``complete`` entry of the same app and topic just before ``entry``'s snapshot."""
    earlier = [
        e
        for e in entries
        if e.kind == "complete"
        and e.app_id == entry.app_id
        and e.topic == entry.topic
        and e.snapshot_id < entry.snapshot_id
    ]
    return max(earlier, key=lambda e: e.snapshot_id, default=None)


@dataclass(frozen=True)
class Lineage:
    """The walk's result: every snapshot from the table's version back, stage by stage;
    ``notes`` say where the walk could not go on, and why."""

    table: str
    version: int
    snapshots: list[SnapshotNode]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        for node in doc["snapshots"]:  # JSON object keys are strings
            node["barriers"] = {str(p): o for p, o in node["barriers"].items()}
            for read in node["sources"]:
                read["start"] = {str(p): o for p, o in read["start"].items()}
                read["end"] = {str(p): o for p, o in read["end"].items()}
        return doc

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True)

    def stages(self) -> list[list[SnapshotNode]]:
        depth = max((n.stage for n in self.snapshots), default=-1)
        return [[n for n in self.snapshots if n.stage == d] for d in range(depth + 1)]

    def to_text(self) -> str:
        lines = [f"{self.table} version {self.version}"]
        for depth, nodes in enumerate(self.stages()):
            lines.append("")
            lines.append(f"stage {depth}" + (" (the table's writer)" if depth == 0 else ""))
            for node in nodes:
                lines += _node_lines(node)
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)


def _node_lines(node: SnapshotNode) -> list[str]:
    where = node.writes + (
        f" version {node.table_version}" if node.table_version is not None else ""
    )
    head = f"  snapshot {node.snapshot_id} of query {node.app_id} -> {where}"
    if node.rows is not None:
        head += f", {node.rows} rows"
    if node.read_by:
        head += f" (read by {node.read_by})"
    lines = [head]
    if node.barriers:
        lines.append(f"    barriers at {_offsets(node.barriers)}")
    for read in node.sources:
        span = (
            f"{_offsets(read.start)} .. {_offsets(read.end)}"
            if read.start
            else (f".. {_offsets(read.end)}")
        )
        mode = f" ({read.mode})" if read.mode else ""
        lines.append(f"    read {read.topic}{mode}: {span}")
        if read.upstream_snapshots:
            lines.append(
                f"      through the barriers of {read.upstream_app} snapshot(s) "
                f"{', '.join(str(s) for s in read.upstream_snapshots)}"
            )
    for other in node.other_sources:
        lines.append(f"    read a non-Kafka source at {json.dumps(other, sort_keys=True)}")
    return lines


def _offsets(offsets: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"{p}: {o}" for p, o in sorted(offsets.items())) + "}"


def check_version(version: int, versions: Sequence[int], *, table: str) -> None:
    """Refuse a version the table's history does not hold, naming the ones it does."""
    if version not in versions:
        shown = f"{min(versions)}..{max(versions)}" if versions else "none"
        raise ChkptError(f"{table} has no version {version} in its history (versions {shown})")
