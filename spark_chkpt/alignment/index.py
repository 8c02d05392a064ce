"""The barrier index of one data topic: which snapshots its upstream completed, and where.

An upstream ``chkpt-kafka`` sink appends :class:`~spark_chkpt.alignment.barrier.IndexEntry`
records (``intent``, then ``complete`` with every barrier's offset) to a control topic.
:class:`BarrierIndex` holds the entries read so far and answers the questions the cut
planner and the sink's coordinator ask. A ``revoke`` entry (a savepoint rewind of the
upstream query to snapshot N, under a new generation) takes the app's snapshots after N
of older generations out of every answer: :meth:`BarrierIndex.is_revoked`. The
snapshots the restored query writes again carry the new generation and stay. Pure:
reading the control topic is :class:`spark_chkpt.kafka.control.topic.ControlTopic`'s
job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

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

    def revocations(self, *, app_id: str | None = None) -> list[IndexEntry]:
        """The ``revoke`` entries (of ``app_id``, or all apps), in the order written, their
        ``attempts`` completed with those of every entry they revoke (a stale writer's
        entry written after the revocation too)."""
        found = []
        for r in self.entries:
            if r.kind != "revoke" or (app_id is not None and r.app_id != app_id):
                continue
            more = {
                a for e in self.entries if e.kind != "revoke" and revokes(r, e) for a in e.attempts
            }
            found.append(replace(r, attempts=tuple(sorted(set(r.attempts) | more))))
        return found

    def is_revoked(self, entry: IndexEntry) -> bool:
        """Whether a revocation takes ``entry`` back: an entry of the same app, of a
        snapshot after the one the revocation keeps, written by an older generation (a
        stale writer's entry written after the revocation too: fencing refuses it, and
        this keeps a race with the fence from counting)."""
        return entry.kind != "revoke" and any(
            revokes(r, entry) for r in self.entries if r.kind == "revoke"
        )

    def live(self) -> list[IndexEntry]:
        """The ``intent`` and ``complete`` entries no revocation takes back."""
        revocations = [r for r in self.entries if r.kind == "revoke"]
        return [
            e
            for e in self.entries
            if e.kind != "revoke" and not any(revokes(r, e) for r in revocations)
        ]

    def complete(self, *, app_id: str | None = None) -> list[IndexEntry]:
        """``complete`` entries (of ``app_id``, or all apps) no revocation takes back,
        first occurrence of each snapshot, in the order they were written."""
        seen: set[tuple[str, int]] = set()
        result = []
        for entry in self.live():
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
        """The first live entry of ``(app_id, snapshot_id)`` (of ``kind``)."""
        for entry in self.live():
            if (
                entry.app_id == app_id
                and entry.snapshot_id == snapshot_id
                and (kind is None or entry.kind == kind)
            ):
                return entry
        return None

    def latest_snapshot(self, *, app_id: str) -> int | None:
        """The newest snapshot of ``app_id`` with a live entry."""
        ids = [e.snapshot_id for e in self.live() if e.app_id == app_id]
        return max(ids) if ids else None


def revokes(revocation: IndexEntry, entry: IndexEntry) -> bool:
    """Whether ``revocation`` (a ``revoke`` entry) takes ``entry`` back."""
    return (
        revocation.app_id == entry.app_id
        and entry.snapshot_id > revocation.snapshot_id
        and entry.generation < revocation.generation
    )
