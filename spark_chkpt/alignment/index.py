"""The barrier index of one data topic: which snapshots its upstream completed, and where.

An upstream ``chkpt-kafka`` sink appends :class:`~spark_chkpt.alignment.barrier.IndexEntry`
records (``intent``, then ``complete`` with every barrier's offset) to a control topic.
:class:`BarrierIndex` holds the entries read so far and answers the questions the cut
planner and the sink's coordinator ask. Pure: reading the control topic is
:class:`spark_chkpt.kafka.sink.control_topic.ControlTopic`'s job.
"""

from __future__ import annotations

from collections.abc import Iterable

from spark_chkpt.alignment.barrier import IndexEntry


class BarrierIndex:
    """The index entries of one data topic, in the order they were written."""

    def __init__(
        self,
        *,
        data_topic: str,
        entries: Iterable[IndexEntry] = (),
        topic_id: str | None = None,
    ) -> None:
        self.data_topic = data_topic
        self.topic_id = topic_id
        self.entries: list[IndexEntry] = []
        self.stale = 0  # entries of an earlier topic of the same name, ignored
        self.add(entries)

    def add(self, entries: Iterable[IndexEntry]) -> list[IndexEntry]:
        """Append the entries about this index's data topic; returns those kept. With a
        ``topic_id``, entries written for another topic id (the topic was deleted and
        created again under the same name) are counted in ``stale`` and left out."""
        new = []
        for entry in entries:
            if entry.topic != self.data_topic:
                continue
            if self.topic_id and entry.topic_id and entry.topic_id != self.topic_id:
                self.stale += 1
                continue
            new.append(entry)
        self.entries.extend(new)
        return new

    def complete(self, *, app_id: str | None = None) -> list[IndexEntry]:
        """``complete`` entries (of ``app_id``, or all apps), first occurrence of each
        snapshot, in the order they were written."""
        seen: set[tuple[str, int]] = set()
        result = []
        for entry in self.entries:
            key = (entry.app_id, entry.snapshot_id)
            if (
                entry.kind == "complete"
                and key not in seen
                and (app_id is None or entry.app_id == app_id)
            ):
                seen.add(key)
                result.append(entry)
        return result

    def first(self, *, app_id: str, snapshot_id: int, kind: str | None = None) -> IndexEntry | None:
        for entry in self.entries:
            if (
                entry.app_id == app_id
                and entry.snapshot_id == snapshot_id
                and (kind is None or entry.kind == kind)
            ):
                return entry
        return None

    def latest_snapshot(self, *, app_id: str) -> int | None:
        ids = [e.snapshot_id for e in self.entries if e.app_id == app_id]
        return max(ids) if ids else None
