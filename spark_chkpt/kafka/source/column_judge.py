"""The rules of :mod:`.judge` applied to a chunk of columns at once, not record by record.

More: docs/concepts/kafka-internals.md (spark_chkpt/kafka/source/column_judge.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_chkpt.alignment.barrier import Barrier, attempt_of, is_barrier
from spark_chkpt.kafka.client.columnar import RecordColumns
from spark_chkpt.kafka.source.records import header_codes

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    from numpy.typing import NDArray

    from spark_chkpt.alignment.cut import RecordFilter
    from spark_chkpt.alignment.fanin import FanInFilter
    from spark_chkpt.kafka.source.judge import RecordJudge


@dataclass
class Judged:
    """What a chunk came to: the kept records cut at barriers, in order, each segment
    with the snapshot id of the barrier right after it (None after the last one); the
    records still held; and the counts of :class:`~.fetcher.ReadStats`."""

    segments: list[tuple[RecordColumns | None, int | None]] = field(default_factory=list)
    held: RecordColumns | None = None
    barriers: int = 0
    revoked: int = 0
    dropped: int = 0
    dropped_attempts: set[str] = field(default_factory=set)


def _kinds(chunk: RecordColumns) -> tuple[Any, Any, list[str | None]]:
    """Codes per record, whether each code is a barrier's, and each code's attempt tag."""
    import numpy as np

    codes, distinct = header_codes(chunk)
    barrier = np.array([is_barrier(h) for h in distinct] + [False], dtype=np.bool_)  # type: ignore[arg-type]
    tags = [attempt_of(h) for h in distinct]  # type: ignore[arg-type]
    return codes, barrier, tags


def _by_code(codes: Any, values: list[bool]) -> Any:
    """A per-record boolean array from one value per code (index -1, no headers: False)."""
    import numpy as np

    return np.array([*values, False], dtype=np.bool_)[codes]


def _kept(chunk: RecordColumns, keep: Any, lo: int, hi: int) -> RecordColumns | None:
    part = keep[lo:hi]
    if hi <= lo or not part.any():
        return None
    if part.all():
        return chunk if lo == 0 and hi == len(chunk) else chunk.slice(lo, hi)
    return chunk.slice(lo, hi).compress(part)


def judge_columns(judge: RecordJudge, chunk: RecordColumns, *, final: bool) -> Judged:
    """Judge one partition's ``chunk`` (in offset order, after what was held before);
    ``final``: the range ends with it, so nothing stays held."""
    import numpy as np

    out = Judged()
    n = len(chunk)
    f = judge.filter
    codes, barrier_code, tags = _kinds(chunk)
    offsets_ = None

    def offsets() -> Any:  # the offsets as numpy, only for a chunk that needs them
        nonlocal offsets_
        if offsets_ is None:
            offsets_ = np.asarray(chunk.offsets, dtype=np.int64)
        return offsets_

    # Step 1: revoked snapshots' records and barriers, by offset range and by attempt.
    revoking = f is not None and bool(f.revoked or f.revoked_attempts)
    revoked = _revoked_rows(chunk, f if revoking else None, codes, tags, offsets)
    is_barrier_row = barrier_code[codes]
    # Step 2: the barriers, in order; a revoked snapshot's confirms nothing.
    barriers = np.flatnonzero(is_barrier_row & ~revoked).tolist()
    counting, snapshots, confirms = _counting_barriers(
        chunk, judge, barriers, revoked, revoking=revoking
    )
    is_row = ~(is_barrier_row | revoked)
    # Step 3: tagged records the index does not confirm, below the filter's bound: kept
    # if a barrier up to the one after them (or one read before) names their attempt.
    dropped, cut = _dropped(
        chunk, judge, codes, tags, is_row, counting, confirms, offsets, final=final
    )
    keep = is_row & ~dropped
    # Step 4: the counts, of the decided records only (the held ones come again).
    out.barriers = len(counting)
    out.revoked = int(np.count_nonzero(revoked[:cut]))
    out.dropped = int(np.count_nonzero(dropped))
    if out.dropped:
        out.dropped_attempts = {str(tags[c]) for c in np.unique(codes[dropped]).tolist() if c >= 0}
    for attempt in confirms:
        judge.seen_confirmed.add(attempt)
    # Step 5: the kept records cut at the barriers that count.
    lo = 0
    for at, snapshot in zip(counting, snapshots, strict=True):
        out.segments.append((_kept(chunk, keep, lo, at), snapshot))
        lo = at + 1
    out.segments.append((_kept(chunk, keep, lo, cut), None))
    if cut < n:
        out.held = chunk.slice(cut, n)
    return out


def _dropped(
    chunk: RecordColumns,
    judge: RecordJudge,
    codes: NDArray[np.int64],
    tags: list[str | None],
    is_row: NDArray[np.bool_],
    counting: list[int],
    confirms: dict[str, int],
    offsets: Callable[[], NDArray[np.int64]],
    *,
    final: bool,
) -> tuple[NDArray[np.bool_], int]:
    """Step 3: the rows dropped (tagged records the index does not confirm, below the
    filter's bound, that no barrier up to the one after them, or one read before, names)
    and where the decided rows end (the rest held for the next barrier unless
    ``final``)."""
    import numpy as np

    f = judge.filter
    n = len(chunk)
    first_offset, last_offset = chunk.first_offset, chunk.last_offset
    keep_until = f.confirm_until if f is not None else -1
    confirmed = f.confirmed if f is not None else frozenset()
    never = len(counting) + 1
    per_code = [
        -1 if t is None or t in confirmed or t in judge.seen_confirmed else confirms.get(t, never)
        for t in tags
    ]
    cut = n
    if first_offset >= keep_until or all(c < 0 for c in per_code):
        dropped = np.zeros(n, dtype=np.bool_)  # the index confirms all (the common case)
    else:
        first = np.array([*per_code, -1], dtype=np.int64)[codes]
        doubt = is_row & (first >= 0)
        if last_offset >= keep_until:
            doubt &= offsets() < keep_until
        at_barrier = np.searchsorted(np.asarray(counting, dtype=np.int64), np.arange(n))
        dropped = doubt & (first > at_barrier)
        # Records after the last barrier that counts, whose attempt no barrier named yet,
        # wait for the next one (held from the first such record on, offset order kept).
        undecided = dropped & (at_barrier == len(counting))
        if not final and undecided.any():
            cut = int(np.argmax(undecided))
            dropped[cut:] = False
    return dropped, cut


def _revoked_rows(
    chunk: RecordColumns,
    f: RecordFilter | None,
    codes: NDArray[np.int64],
    tags: list[str | None],
    offsets: Callable[[], NDArray[np.int64]],
) -> NDArray[np.bool_]:
    """Step 1: the rows of revoked snapshots (records and barriers), by offset range and
    by attempt; none without a filter that revokes."""
    import numpy as np

    revoked = np.zeros(len(chunk), dtype=np.bool_)
    if f is None:
        return revoked
    for start, end in f.revoked:
        if start <= chunk.last_offset and end > chunk.first_offset:
            revoked |= (offsets() >= start) & (offsets() < end)
    revoked |= _by_code(codes, [t is not None and t in f.revoked_attempts for t in tags])
    return revoked


def _counting_barriers(
    chunk: RecordColumns,
    judge: RecordJudge,
    barriers: list[int],
    revoked: NDArray[np.bool_],
    *,
    revoking: bool,
) -> tuple[list[int], list[int], dict[str, int]]:
    """Step 2: of the barriers at ``barriers`` (in order), the indices of those that count,
    their snapshot ids, and each attempt's first counting barrier (an index into the
    first list); a barrier naming only revoked attempts is marked in ``revoked`` and
    counts not."""
    tp, f = judge.tp, judge.filter
    counting: list[int] = []
    snapshots: list[int] = []
    confirms: dict[str, int] = {}
    for at in barriers:
        record = chunk.record(at)
        parsed = Barrier.parse(
            record.value, topic=tp.topic, partition=tp.partition, offset=record.offset
        )
        if (
            f is not None
            and revoking
            and parsed.attempts
            and set(parsed.attempts) <= f.revoked_attempts
        ):
            revoked[at] = True
            continue
        for attempt in parsed.attempts:
            confirms.setdefault(attempt, len(counting))
        counting.append(at)
        snapshots.append(parsed.snapshot_id)
    return counting, snapshots, confirms


def plain_columns(chunk: RecordColumns) -> tuple[RecordColumns | None, int, int | None]:
    """A topic read as plain (:func:`~spark_chkpt.kafka.source.judge.plain_records`): the
    rows without barrier records, how many barriers, and the index of the first record
    a ``chkpt-kafka`` sink wrote (a barrier or a tagged record; None: none)."""
    import numpy as np

    if not chunk.header_index:
        return chunk, 0, None
    codes, barrier_code, tags = _kinds(chunk)
    barriers = barrier_code[codes]
    ours = barriers | _by_code(codes, [t is not None for t in tags])
    first = int(np.argmax(ours)) if ours.any() else None
    found = int(np.count_nonzero(barriers))
    if not found:
        return chunk, 0, first
    return _kept(chunk, ~barriers, 0, len(chunk)), found, first


def fan_in_columns(judge: FanInFilter, chunk: RecordColumns) -> Judged:
    """A fan-in topic's chunk by :func:`~spark_chkpt.kafka.source.judge.fan_in_verdict`'s
    rules, per distinct attempt: delivered, dropped, revoked, skipped or left for later."""
    import numpy as np

    out = Judged()
    codes, barrier_code, tags = _kinds(chunk)
    offsets = np.asarray(chunk.offsets, dtype=np.int64)
    barriers = barrier_code[codes]
    deliver = (codes < 0) & (offsets >= judge.plain_from)
    drop = np.zeros(len(chunk), dtype=np.bool_)
    revoked = np.zeros(len(chunk), dtype=np.bool_)
    for code, tag in enumerate(tags):
        mine = (codes == code) & ~barriers
        if tag is None:
            deliver |= mine & (offsets >= judge.plain_from)
        elif tag in judge.revoked_attempts:
            revoked |= mine
        elif (app := judge.confirmed.get(tag)) is not None:
            start, until = judge.apps[app]
            deliver |= mine & (offsets >= start) & (offsets < until)
        elif tag not in judge.later:
            failed = mine & (offsets < judge.drop_below)
            if failed.any():
                drop |= failed
                out.dropped_attempts.add(tag)
    out.barriers = int(np.count_nonzero(barriers))
    out.dropped = int(np.count_nonzero(drop))
    out.revoked = int(np.count_nonzero(revoked))
    out.segments.append((_kept(chunk, deliver, 0, len(chunk)), None))
    return out
