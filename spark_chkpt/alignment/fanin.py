"""Aligned reads of a topic into which several upstream queries write (fan-in).

Two ``chkpt-kafka`` sink queries A1 and A2 writing one topic interleave their records on
every partition, and each writes its own barriers and index entries, numbered on its
own. No single offset per partition is a consistent cut of both: right after A1's
barrier N there are usually records of A2's snapshot in flight, which a batch ending
there must not drop (the next batch starts after them) nor deliver (A2 may still fail
that attempt).

More: docs/concepts/kafka-internals.md (spark_chkpt/alignment/fanin.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.alignment.snapshots import check_not_passed, completed_below, entries_ahead
from spark_chkpt.errors import AlignmentError
from spark_chkpt.offsets import TopicPartition

Verdict = Literal["deliver", "drop", "revoked", "later", "skip"]


@dataclass(frozen=True)
class FanInFilter:
    """What a read task does with each record of one partition of a fan-in topic.

    ``plain_from``: untagged records from there on are delivered (Spark's start);
    ``drop_below``: unconfirmed tagged records below it are failed attempts;
    ``apps``: app -> (old pending, new pending); ``confirmed``: attempt -> app, for the
    attempts of the snapshots delivered by the end of this batch; ``later``: attempts
    of newer snapshots; ``revoked_attempts``: attempts of revoked snapshots."""

    plain_from: int
    drop_below: int
    apps: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    confirmed: Mapping[str, str] = field(default_factory=dict)
    later: frozenset[str] = frozenset()
    revoked_attempts: frozenset[str] = frozenset()

    def judge(self, offset: int, attempt: str | None) -> Verdict:
        if attempt is None:
            return "deliver" if offset >= self.plain_from else "skip"
        if attempt in self.revoked_attempts:
            return "revoked"
        app = self.confirmed.get(attempt)
        if app is not None:
            start, until = self.apps[app]
            return "deliver" if start <= offset < until else "skip"
        if attempt in self.later or offset >= self.drop_below:
            return "later"
        return "drop"


@dataclass(frozen=True)
class AppCut:
    """One app's part of a fan-in batch: its snapshots delivered now, and its pending
    offsets (partition -> offset) before and after the batch."""

    app_id: str
    snapshots: tuple[int, ...]
    start: Mapping[int, int]
    pending: Mapping[int, int]

    def report(self) -> dict[str, Any]:
        return {
            "snapshots": list(self.snapshots),
            "from": {str(p): o for p, o in sorted(self.start.items())},
            "pending": {str(p): o for p, o in sorted(self.pending.items())},
        }


@dataclass(frozen=True)
class FanInCut:
    """The plan of a fan-in topic's batch: Spark's end offsets, where its reads begin,
    and each app's part."""

    topic: str
    end: dict[TopicPartition, int]
    read_from: dict[TopicPartition, int]
    apps: tuple[AppCut, ...]
    barriers: int = 0

    @property
    def waiting(self) -> bool:
        return not any(a.snapshots for a in self.apps)

    def report(self) -> dict[str, dict[str, Any]]:
        return {a.app_id: a.report() for a in self.apps}


def app_ids(entries: Sequence[IndexEntry]) -> list[str]:
    return sorted({e.app_id for e in entries})


def is_fan_in(
    entries: Sequence[IndexEntry],
    previous: Mapping[str, Any] | None,
    expected: Sequence[str] = (),
) -> bool:
    """Several apps' barriers in the topic (or several ``expected``, option
    ``upstreamApps``), or the last batch was read as fan-in (a topic stays fan-in: its
    pending offsets must be kept)."""
    return len(set(app_ids(entries)) | set(expected)) > 1 or isinstance(
        (previous or {}).get("apps"), Mapping
    )


def check_apps(
    *,
    topic: str,
    entries: Sequence[IndexEntry],
    known: Mapping[str, Any],
    expected: Sequence[str],
) -> None:
    """An app writing the topic that this reader did not track from its first batch is an
    error, loud instead of lost: its records written before its first snapshot completed
    were judged a failed attempt's and dropped where they lay before the cut. Tracked
    means listed in ``upstreamApps`` (``expected``), or, without the option, known from
    the previous batch (``known``; a first batch has read nothing and tracks any)."""
    tracked = set(expected) or set(known)
    unknown = sorted(set(app_ids(entries)) - tracked) if tracked else []
    if not unknown:
        return
    if expected:
        raise AlignmentError(
            f"topic {topic} carries barriers of upstream app(s) {', '.join(unknown)}, not "
            f"listed in option upstreamApps ({', '.join(expected)}): this reader may have "
            "passed records those apps wrote before their first snapshot completed. Add "
            "them to upstreamApps and start this query on a new checkpoint, or give each "
            "upstream query its own topic."
        )
    raise AlignmentError(
        f"topic {topic} now carries barriers of upstream app(s) {', '.join(unknown)} "
        f"besides {', '.join(sorted(known))}, whose records this reader already read: "
        f"records {', '.join(unknown)} wrote before their first snapshot completed may "
        "have been dropped as a failed attempt's. Set option "
        f"upstreamApps={','.join(sorted(tracked | set(unknown)))} and start this query "
        "on a new checkpoint (or from a savepoint taken before the new app started), "
        "or give each upstream query its own topic."
    )


def refuse_mode(*, topic: str, apps: Sequence[str], option: str, value: object) -> AlignmentError:
    return AlignmentError(
        f"topic {topic} carries barriers of {len(apps)} upstream queries "
        f"({', '.join(apps)}); {option}={value} cannot read several upstream queries of "
        f"one topic. Use alignment=aligned without {option} (a fan-in topic is cut per "
        "upstream query), alignment=none, or give each upstream query its own topic."
    )


def _pending_of(report: Mapping[str, Any], key: str) -> dict[int, int]:
    raw = report.get(key)
    return {int(p): int(o) for p, o in raw.items()} if isinstance(raw, Mapping) else {}


def previous_pending(
    previous: Mapping[str, Any] | None,
    begin: Mapping[TopicPartition, int],
) -> dict[str, dict[int, int]]:
    """Each app's pending offsets after the previous batch, from its report. A batch read
    as single-app left its app right after its barrier: at Spark's start."""
    previous = previous or {}
    apps = previous.get("apps")
    if isinstance(apps, Mapping):
        return {str(a): _pending_of(r, "pending") for a, r in apps.items()}
    app = previous.get("app")
    if isinstance(app, str):
        return {app: {tp.partition: o for tp, o in begin.items()}}
    return {}


def plan_fan_in(
    *,
    topic: str,
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    entries: Sequence[IndexEntry],
    max_records: int | None,
    previous: Mapping[str, Any] | None = None,
    revocations: Sequence[IndexEntry] = (),
    expected: Sequence[str] = (),
) -> FanInCut:
    """Plan one fan-in topic's batch (see the module docstring). ``previous``: the topic's
    report in the batch's start offset (None for a query's first batch); ``expected``:
    the apps of option ``upstreamApps``, tracked before their first snapshot."""
    partitions = sorted(latest)
    begin = {tp: start.get(tp, latest[tp]) for tp in partitions}
    known = previous_pending(previous, begin)
    check_apps(topic=topic, entries=entries, known=known, expected=expected)
    # An app first seen now had nothing delivered: its pending offsets are where the
    # records nobody judged yet begin (an unconfirmed record below them was dropped).
    floor = {
        tp.partition: min(
            [begin[tp]] + [p[tp.partition] for p in known.values() if tp.partition in p]
        )
        for tp in partitions
    }
    cuts = []
    for app in sorted(set(app_ids(entries)) | set(known) | set(expected)):
        old = {
            tp.partition: known.get(app, {}).get(tp.partition, floor[tp.partition])
            for tp in partitions
        }
        cuts.append(
            _app_cut(
                app,
                topic=topic,
                old=old,
                latest=latest,
                entries=entries,
                revocations=revocations,
                max_records=max_records,
            )
        )
    end = {tp: max([begin[tp]] + [c.pending[tp.partition] for c in cuts]) for tp in partitions}
    read_from = {tp: min([begin[tp]] + [c.start[tp.partition] for c in cuts]) for tp in partitions}
    barriers = sum(
        1
        for e in entries
        for p, pos in e.positions.items()
        if (tp := TopicPartition(topic, p)) in end and read_from[tp] <= pos < end[tp]
    )
    return FanInCut(topic=topic, end=end, read_from=read_from, apps=tuple(cuts), barriers=barriers)


def _app_cut(
    app: str,
    *,
    topic: str,
    old: dict[int, int],
    latest: Mapping[TopicPartition, int],
    entries: Sequence[IndexEntry],
    revocations: Sequence[IndexEntry],
    max_records: int | None,
) -> AppCut:
    """One app's part of a fan-in batch: from its pending offsets ``old``, its completed
    snapshots below the log ends within ``max_records`` (the first read whole)."""
    partitions = sorted(latest)
    old_tp = {tp: old[tp.partition] for tp in partitions}
    check_not_passed(
        topic=topic, begin=old_tp, revocations=[r for r in revocations if r.app_id == app]
    )
    mine = [e for e in entries if e.app_id == app]
    ahead = entries_ahead(mine, old_tp, topic)
    done = completed_below(ahead, old_tp, latest)
    chosen = done[:1]
    for e in done[1:]:
        span = sum(max(0, e.positions[tp.partition] + 1 - old[tp.partition]) for tp in partitions)
        if max_records is not None and span > max_records:
            break
        chosen.append(e)
    pending = dict(old)
    if chosen:
        last = chosen[-1]
        pending = {p: max(o, last.positions[p] + 1) for p, o in old.items()}
    return AppCut(
        app_id=app,
        snapshots=tuple(e.snapshot_id for e in chosen),
        start=old,
        pending=pending,
    )


def apps_of_report(report: Mapping[str, Any]) -> dict[str, tuple[dict[int, int], dict[int, int]]]:
    """app -> (old pending, new pending) from a fan-in batch's report."""
    apps = report.get("apps")
    if not isinstance(apps, Mapping):
        return {}
    return {str(a): (_pending_of(r, "from"), _pending_of(r, "pending")) for a, r in apps.items()}


def read_from_report(
    report: Mapping[str, Any], start: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Where a fan-in batch's reads begin: the smallest old pending offset."""
    apps = apps_of_report(report)
    return {
        tp: min([at] + [old[tp.partition] for old, _ in apps.values() if tp.partition in old])
        for tp, at in start.items()
    }


def fan_in_filters(
    *,
    report: Mapping[str, Any],
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    entries: Sequence[IndexEntry],
    revocations: Sequence[IndexEntry] = (),
) -> dict[TopicPartition, FanInFilter]:
    """The per-partition filters of a fan-in batch, derived from its report and the
    index (again on a replay, so it reads the same records)."""
    apps = apps_of_report(report)
    revoked = frozenset(a for r in revocations for a in r.attempts)
    filters = {}
    for tp, until in end.items():
        p = tp.partition
        ranges = {
            app: (old.get(p, start.get(tp, until)), new.get(p, start.get(tp, until)))
            for app, (old, new) in apps.items()
        }
        confirmed: dict[str, str] = {}
        later: set[str] = set()
        for e in entries:
            new = apps.get(e.app_id, ({}, {}))[1]
            # A snapshot delivered by the end of this batch: every barrier before the app's
            # new pending offsets (records of a snapshot lie before its barrier).
            delivered = e.app_id in apps and all(
                pos < new.get(q, 0) for q, pos in e.positions.items()
            )
            for attempt in e.attempts:
                if delivered:
                    confirmed[attempt] = e.app_id
                else:
                    later.add(attempt)
        filters[tp] = FanInFilter(
            plain_from=start.get(tp, until),
            drop_below=min([until] + [new for _, new in ranges.values()]),
            apps=ranges,
            confirmed=confirmed,
            later=frozenset(later - set(confirmed)) - revoked,
            revoked_attempts=revoked,
        )
    return filters
