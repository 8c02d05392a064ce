"""When a snapshot's commit gives up, and how long it holds the next batch back.

The sinks' options (:class:`~spark_chkpt.options.SnapshotTiming`), Flink's checkpoint
timeout and min pause between checkpoints. ``snapshotTimeout`` runs from the start of
:meth:`SnapshotCoordinator.commit` (phase 2; phase 1 is the batch's own work, which
Flink does not count either). It is checked only where nothing of the batch is visible
yet: right before step 4 (each retry too), and at the points a sink's ``make_visible``
names with :meth:`SnapshotCoordinator.check_deadline` before its own point of no return
(DeltaUpsert: after staging, before the MERGE). Past it, the commit raises
:class:`~spark_chkpt.errors.SnapshotTimeoutError` (a snapshot failure for the restart
strategy's ``execution.checkpointing.tolerable-failed-checkpoints``), ``release`` runs
as for any failed commit, Spark calls the sink's ``abort`` (the staged output is
deleted, or left unconfirmed) and the failure is written to the store
(``chkpt/failures/``, counted by :func:`spark_chkpt.metrics.reporter.summarize`). A
deadline that passes during step 4 does not interrupt it: the commit is one atomic step
(a Delta commit; for Kafka the intent fixes the batch and a re-run resumes it), so the
batch completes late, with a warning. A batch step 3 finds already committed is never
failed by the timeout: it is visible already. ``minPauseBetweenSnapshots``: after step 5
the commit sleeps that long before it returns. Spark plans batch N + 1
(``latestOffset``, ``offsets/N+1``) only after batch N's sink commit returned, so at
least that long passes between snapshot N's completion and the start of the next batch;
Spark's trigger wait comes on top, and the pause counts in batch N's duration.

Pure: the clock's reading is handed in.
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
