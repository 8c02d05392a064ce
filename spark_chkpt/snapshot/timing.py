"""When a snapshot's commit gives up, and how long it holds the next batch back.

More: docs/concepts/delta-internals.md (spark_chkpt/snapshot/timing.py).
"""

from __future__ import annotations

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import SnapshotTimeoutError
from spark_chkpt.options import SnapshotTiming


def deadline_of(timing: SnapshotTiming, *, now: float) -> Deadline | None:
    """The deadline of a commit that begins at ``now`` (None: no ``snapshotTimeout``)."""
    if timing.timeout_ms is None:
        return None
    return Deadline(at=now + timing.timeout_ms / 1000)


def check_deadline(
    deadline: Deadline | None, *, now: float, timing: SnapshotTiming, what: str, before: str
) -> None:
    """Raise :class:`SnapshotTimeoutError` naming ``what`` (the sink, batch and target)
    if ``deadline`` passed by ``now``; ``before``: the step that would come next."""
    if deadline is None or not deadline.expired(now=now):
        return
    overdue = round((now - deadline.at) * 1000)
    raise SnapshotTimeoutError(
        f"{what}: snapshotTimeout = {timing.timeout_ms} ms passed ({overdue} ms ago) "
        f"before {before}; nothing of the batch was made visible. The batch fails and is "
        "replayed from its checkpoint (a snapshot failure for "
        "execution.checkpointing.tolerable-failed-checkpoints); "
        "raise snapshotTimeout if commits of this size need longer."
    )


def pause_s(timing: SnapshotTiming) -> float:
    """Seconds the commit holds its return after a completed snapshot."""
    return max(0, timing.min_pause_ms) / 1000
