"""What a read task does with each record of a topic that carries barriers: the rules,
apart from the poll loop that applies them (:mod:`.fetcher`).

No consumer, no Arrow, no aligner here: a :class:`RecordJudge` is given one partition's
records in offset order and answers, per record, one of

* ``revoked``: a record, or a barrier, of an upstream snapshot a savepoint rewind
  revoked (by offset, or by attempt): skipped and counted, it confirms nothing;
* ``barrier``: a barrier record (never a row); the attempts it names count as confirmed
  from now on, so records held for want of an index entry can be judged
  (:meth:`RecordJudge.release`);
* ``hold``: a tagged record below the filter's bound whose attempt neither the barrier
  index nor a barrier read so far confirms, or any record after one already held (to keep
  offset order), until a barrier or the range's end;
* ``pass``: a row.

:meth:`RecordJudge.release` judges the held records once more: ``pass`` or ``drop`` (a
failed upstream attempt's output). :func:`plain_records` and :func:`fan_in_verdict` are
the rules of topics read as plain and of fan-in topics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from spark_chkpt.alignment.barrier import Barrier, attempt_of, is_barrier
from spark_chkpt.alignment.cut import RecordFilter
from spark_chkpt.alignment.fanin import FanInFilter
from spark_chkpt.offsets import TopicPartition

Verdict = Literal["pass", "hold", "barrier", "revoked"]
Release = Literal["pass", "drop"]
FanInVerdict = Literal["barrier", "deliver", "drop", "revoked", "skip", "later"]


@dataclass
class RecordJudge:
    """The rules for one partition of one read task (a topic with barriers)."""

    tp: TopicPartition
    filter: RecordFilter | None = None
    seen_confirmed: set[str] = field(default_factory=set)  # attempts barriers here named

    def __post_init__(self) -> None:
        f = self.filter
        self._keep_until = f.confirm_until if f is not None else -1
        self._confirmed: frozenset[str] = f.confirmed if f is not None else frozenset()
        self._revoking = f if f is not None and (f.revoked or f.revoked_attempts) else None

    def judge(self, record: Any, *, holding: bool) -> tuple[Verdict, Barrier | None]:
        """One record's verdict (``holding``: records of this partition are held), and
        the barrier when it is one that counts."""
        headers = record.headers
        revoking = self._revoking
        if revoking is not None and revoking.is_revoked(record.offset, attempt_of(headers)):
            return "revoked", None
        if headers and is_barrier(headers):
            barrier = Barrier.parse(
                record.value, topic=self.tp.topic, partition=self.tp.partition, offset=record.offset
            )
            if (
                revoking is not None
                and barrier.attempts
                and set(barrier.attempts) <= revoking.revoked_attempts
            ):
                # A revoked snapshot's barrier past the revoked offsets (a stale writer's
                # commit that raced the revocation): it confirms nothing.
                return "revoked", None
            self.seen_confirmed.update(barrier.attempts)
            return "barrier", barrier
        if holding or self.unconfirmed(record):
            return "hold", None
        return "pass", None

    def unconfirmed(self, record: Any) -> bool:
        """A tagged record below the filter's bound whose attempt neither the index nor a
        barrier read so far confirms."""
        if record.offset >= self._keep_until or not record.headers:
            return False
        tag = attempt_of(record.headers)
        return tag is not None and tag not in self._confirmed and tag not in self.seen_confirmed

    def release(self, held: Sequence[Any]) -> list[tuple[Release, Any]]:
        """The held records judged by what is known now, in order."""
        return [("drop" if self.unconfirmed(r) else "pass", r) for r in held]


_HEADERS = attrgetter("headers")


def plain_records(records: list[Any]) -> tuple[list[Any], int]:
    """A topic read as plain may still carry barriers its reader cannot place (the
    control topic is invisible to it): they are never rows. The rows, and the barriers
    left out."""
    if not any(map(_HEADERS, records)):  # no record has headers: no per-record test
        return records, 0
    if not any(r.headers and is_barrier(r.headers) for r in records):
        return records, 0
    rows = [r for r in records if not (r.headers and is_barrier(r.headers))]
    return rows, len(records) - len(rows)


def fan_in_verdict(judge: FanInFilter, record: Any) -> tuple[FanInVerdict, str | None]:
    """A fan-in topic's record: a barrier (skipped), or delivered, dropped (a failed
    attempt), skipped as revoked, skipped, or left for another batch, by its offset and
    attempt tag (:mod:`spark_chkpt.alignment.fanin`); with the record's tag."""
    headers = record.headers
    if headers and is_barrier(headers):
        return "barrier", None
    tag = attempt_of(headers) if headers else None
    return judge.judge(record.offset, tag), tag
