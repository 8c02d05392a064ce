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

from collections.abc import Iterable, Mapping
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

    def needed_from(self, begin: Mapping[int, int]) -> int | None:
        """The control-topic offset of the oldest entry a reader of one upstream app
        (no fan-in) still needs once its batches start at ``begin`` (partition -> offset
        of the data topic; batches only move forward); None when no entry is needed.

        Needed: an entry with a barrier at or after ``begin`` somewhere (its snapshot can
        be in a batch from there); the newest entry before them all (where a partition
        already past its barrier stands); an entry that does not list a partition the
        reader has not passed the first barrier of yet (its attempts confirm that
        partition's records before it, see :func:`~spark_chkpt.alignment.cut.record_filters`);
        a ``revoke`` entry whose revoked offsets reach ``begin`` or which revokes a needed
        entry. Everything written before the oldest of them can go: see :meth:`drop_before`.
        """
        passed: dict[int, bool] = {}
        for e in self.entries:
            for p, pos in e.positions.items():
                if e.kind != "revoke" and pos < begin.get(p, 0):
                    passed[p] = True
        needed: list[IndexEntry] = []
        newest_behind: IndexEntry | None = None
        for e in self.entries:
            if e.kind == "revoke":
                continue
            if any(pos >= begin.get(p, 0) for p, pos in e.positions.items()) or any(
                p not in e.positions and not passed.get(p) for p in begin
            ):
                needed.append(e)
            else:
                newest_behind = e
        if newest_behind is not None:
            needed.append(newest_behind)
        for r in self.entries:
            if r.kind == "revoke" and (
                any(pos >= begin.get(p, 0) for p, pos in r.positions.items())
                or any(revokes(r, e) for e in needed)
            ):
                needed.append(r)
        offsets = [e.offset for e in needed]
        if any(o is None for o in offsets):
            return 0  # an entry not read from the control topic: keep everything
        return min((o for o in offsets if o is not None), default=None)

    def drop_before(self, offset: int, *, keep_revocations: bool = False) -> int:
        """Forget the entries written before control-topic ``offset`` (from
        :meth:`needed_from`, or a sink's recorded read point), the ``revoke`` entries too
        unless ``keep_revocations``; returns how many were dropped."""
        kept = [
            e
            for e in self.entries
            if e.offset is None or e.offset >= offset or (keep_revocations and e.kind == "revoke")
        ]
        dropped = len(self.entries) - len(kept)
        self.entries = kept
        return dropped

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
