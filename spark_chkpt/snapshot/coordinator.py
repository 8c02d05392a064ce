"""Phase 2 of the two-phase commit of one snapshot, written once for every sink.

:class:`SnapshotCoordinator.commit` is a template method with numbered steps (plan and
fence, prepare, idempotency, make visible, record); each sink's coordinator supplies
only the hooks. It relies on the checkpoint's ``offsets/N`` (:mod:`.checkpoint`), the
generation (:mod:`.epoch`), the timing options (:mod:`.timing`) and the snapshot store
(:mod:`.store`); :func:`retry_conflicts` is the project's one retry loop. The steps and
their failure cases: docs/concepts/delta-internals.md
(spark_chkpt/snapshot/coordinator.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from spark_chkpt.deadline import Deadline, retry
from spark_chkpt.errors import (
    ChkptError,
    CommitConflictError,
    CommitError,
    CommitFailureReason,
    SnapshotTimeoutError,
)
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.offsets import meta_of
from spark_chkpt.snapshot.checkpoint import BatchPlan, SparkCheckpoint
from spark_chkpt.snapshot.epoch import Epoch, check_fence, read_epoch
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings
from spark_chkpt.snapshot.store import SnapshotStore
from spark_chkpt.snapshot.timing import check_deadline, deadline_of, pause_s
from spark_chkpt.state.operators import operator_ids, provider_of, state_operators

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 10
T = TypeVar("T")


@dataclass
class Batch:
    """One commit call's batch: what the sink's hooks share between the steps."""

    batch_id: int
    attempts: Sequence[str] = ()  # the attempts a duplicate's record names
    epoch: Epoch = field(default_factory=Epoch)  # the checkpoint's, read at step 1
    started: float = field(default_factory=time.monotonic)
    deadline: Deadline | None = None  # snapshotTimeout's, on the coordinator's clock


B = TypeVar("B", bound=Batch)


@dataclass(frozen=True)
class Committed:
    """Step 3's finding: an earlier attempt committed the batch. ``record`` returns the
    snapshot record its commit carries (None when it carries none)."""

    record: Callable[[], SnapshotRecord | None]


class SnapshotCoordinator(Generic[B]):
    """The two-phase commit's phase 2, one template for every sink (see the module
    docstring); a sink supplies the hooks."""

    sink: str = ""
    # Where the batch became visible, before the store has its record (Delta's sinks).
    visible_point: FaultPoint | None = None
    # The monotonic clock and the sleep of the timing options (handed in by unit tests).
    clock: Callable[[], float] = staticmethod(time.monotonic)
    sleep: Callable[[float], None] = staticmethod(time.sleep)

    def __init__(self, *, snapshot: SnapshotSettings, target: str | None = None) -> None:
        """``snapshot``: the protocol's settings, as the sink's config produced them;
        ``target``: what the sink writes (a table, a topic), for messages."""
        self.snapshot = snapshot
        self.app_id = snapshot.app_id
        self.timing = snapshot.timing
        self.target_name = target
        self.query_name = snapshot.query_name
        self.checkpoint = SparkCheckpoint(location=snapshot.checkpoint_location)
        self.store = SnapshotStore(
            checkpoint_location=snapshot.checkpoint_location,
            retained=snapshot.retained_snapshots,
        )

    def commit(
        self, *, batch_id: int, messages: Sequence[Any] = (), **details: Any
    ) -> SnapshotRecord:
        """Complete snapshot ``batch_id`` from the tasks' ``messages`` (steps 1-5 of the
        module docstring); ``details`` are the sink's own (:meth:`new_batch`)."""
        batch = self.new_batch(batch_id=batch_id, messages=messages, **details)
        batch.deadline = deadline_of(self.timing, now=self.clock())
        failed = True
        try:
            # Step 1
            self.begin(batch)
            plan = self.plan(batch_id)
            batch.epoch = read_epoch(checkpoint_location=self.checkpoint.uri)
            self.fence(batch)
            # Step 2
            self.prepare(batch, plan)
            record = retry_conflicts(
                lambda retry: self._complete(batch, plan, retry=retry),
                what=f"{self.sink} batch {batch_id}",
            )
            failed = False
        except SnapshotTimeoutError as e:
            self.store.put_failure(
                batch_id=batch_id, reason=e.reason.value, message=str(e), sink=self.sink
            )
            raise
        finally:
            self.release(batch, failed=failed)
        self.pause(batch_id)
        return record

    def _complete(self, batch: B, plan: BatchPlan, *, retry: int) -> SnapshotRecord:
        # Step 3
        if retry:
            self.fence(batch)
        earlier = self.already_committed(batch, plan)
        if earlier is not None:
            self.discard(batch)
            return self.duplicate(
                batch_id=batch.batch_id,
                sources=plan.sources,
                started=batch.started,
                attempts=batch.attempts,
                committed=earlier.record,
            )
        # Step 4
        self.check_deadline(batch, before="making it visible")
        record = self.make_visible(batch, plan, retry=retry)
        if batch.deadline is not None and batch.deadline.expired(now=self.clock()):
            log.warning(
                "%s batch %d completed past snapshotTimeout (%s ms) while being made "
                "visible, which is never interrupted",
                self.sink,
                batch.batch_id,
                self.timing.timeout_ms,
            )
        if self.visible_point is not None:
            failpoint(self.visible_point, batch.batch_id)
        # Step 5
        return self.finish(self.completed(batch, record))

    def check_deadline(self, batch: B, *, before: str) -> None:
        """Fail the batch with :class:`SnapshotTimeoutError` if its ``snapshotTimeout``
        has passed. Call it only where nothing of the batch is visible yet (``before``:
        the step that would come next, for the message)."""
        check_deadline(
            batch.deadline,
            now=self.clock(),
            timing=self.timing,
            what=f"{self.sink} batch {batch.batch_id}"
            + (f" to {self.target_name}" if self.target_name else ""),
            before=before,
        )

    def pause(self, batch_id: int) -> None:
        """``minPauseBetweenSnapshots``: hold the commit's return (and so the start of
        the next batch) that long after the snapshot completed."""
        seconds = pause_s(self.timing)
        if seconds:
            log.info("%s snapshot %d complete; pausing %.3f s", self.sink, batch_id, seconds)
            self.sleep(seconds)

    def fence(self, batch: B) -> None:
        """Step 1's end: refuse a writer older than the sink's generation of the app id."""
        check_fence(
            writer=self.sink,
            target=self.target_name,
            app_id=self.app_id,
            checkpoint=self.checkpoint.uri,
            mine=batch.epoch,
            theirs=self.sink_generation(batch),
        )

    # -- the hooks -------------------------------------------------------------------------

    def sink_generation(self, batch: B) -> int | None:
        """The generation of this app id the sink records (None: it records none)."""
        return None

    def new_batch(self, *, batch_id: int, messages: Sequence[Any], **details: Any) -> B:
        """The sink's :class:`Batch` of one commit call."""
        raise NotImplementedError

    def begin(self, batch: B) -> None:
        """Step 1, before the plan is read: fail points, cleanup."""

    def prepare(self, batch: B, plan: BatchPlan) -> None:
        """Step 2: what precedes the commit, once (not retried on a conflict)."""

    def already_committed(self, batch: B, plan: BatchPlan) -> Committed | None:
        """Step 3: whether the sink already holds the batch (raise on an identity clash)."""
        raise NotImplementedError

    def discard(self, batch: B) -> None:
        """Step 3, for a batch already held: drop this attempt's output."""

    def make_visible(self, batch: B, plan: BatchPlan, *, retry: int) -> SnapshotRecord:
        """Step 4: the one atomic commit that makes the batch visible; returns its record.
        Raises :class:`~spark_chkpt.errors.CommitConflictError` to be retried."""
        raise NotImplementedError

    def completed(self, batch: B, record: SnapshotRecord) -> SnapshotRecord:
        """Step 5, before the store: the record's figures known after the commit."""
        return record

    def release(self, batch: B, *, failed: bool) -> None:
        """After the steps, whatever happened: drop what the commit held."""

    def plan(self, batch_id: int) -> BatchPlan:
        """Step 1: Spark's plan for the batch (``offsets/<batch_id>``)."""
        return self.checkpoint.plan(batch_id)

    def record(
        self,
        *,
        batch_id: int,
        sources: Sequence[Any],
        outcome: CommitOutcome,
        started: float,
        rows: int = 0,
        files: int = 0,
        size: int = 0,
        attempts: Sequence[str] = (),
        table_version: int | None = None,
    ) -> SnapshotRecord:
        """The snapshot record of ``batch_id``; ``started`` is the commit's monotonic start."""
        return SnapshotRecord(
            batch_id=batch_id,
            app_id=self.app_id,
            query_name=self.query_name,
            sink=self.sink,
            source_offsets=list(sources),
            table_version=table_version,
            rows=rows,
            files=files,
            bytes=size,
            commit_ms=elapsed_ms(started),
            outcome=outcome.value,
            attempts=sorted(set(attempts)),
            upstream_snapshots=upstream_of(sources),
            state_operators=self.state_of(batch_id),
            target=self.target_name,
        )

    def state_of(self, batch_id: int) -> list[dict[str, Any]]:
        """The state each stateful operator wrote for ``batch_id`` (empty for a stateless
        query). A listing of ``state/``; any error is logged and records nothing: the
        state's figures never fail a commit."""
        try:
            if not operator_ids(checkpoint_location=self.checkpoint.uri):
                return []  # a stateless query: no state/ folder
            plan = self.checkpoint.plan(batch_id)
            operators = state_operators(
                checkpoint_location=self.checkpoint.uri,
                batch_id=batch_id,
                provider=provider_of(plan.metadata.get("conf")),
            )
        except Exception as e:  # figures only: the commit goes on without them
            log.warning("state of snapshot %s not recorded: %s", batch_id, e)
            return []
        return [op.as_dict() for op in operators]

    def duplicate(
        self,
        *,
        batch_id: int,
        sources: Sequence[Any],
        started: float,
        attempts: Sequence[str] = (),
        committed: Callable[[], SnapshotRecord | None] = lambda: None,
    ) -> SnapshotRecord:
        """Step 3's answer for a batch the sink already holds.

        The store's record if it has one; else ``committed()``, the record the sink's own
        commit carries (the crash came between the sink's commit and the store), stored
        now so the store matches the sink; else a ``duplicate`` record of ``attempts``.
        """
        try:
            existing = self.store.get(batch_id)
        except ChkptError as e:  # the store is a copy: the sink's commit is the truth
            log.warning("%s; writing it again from the sink's commit", e)
            existing = None
        if existing is not None:
            return existing
        record = committed() or self.record(
            batch_id=batch_id,
            sources=sources,
            outcome=CommitOutcome.DUPLICATE,
            started=started,
            attempts=attempts,
        )
        self.store.put(record)
        return record

    def finish(self, record: SnapshotRecord) -> SnapshotRecord:
        """Step 5: write the snapshot record to the store atomically."""
        self.store.put(record)
        failpoint(FaultPoint.AFTER_SNAPSHOT, record.batch_id)
        return record


def retry_conflicts(step: Callable[[int], T], *, what: str, retries: int = CONFLICT_RETRIES) -> T:
    """``step(retry)`` until it does not raise :class:`CommitConflictError`, at most
    ``retries`` times, backing off (through :func:`spark_chkpt.deadline.retry`, the one
    retry loop). The last conflict fails with :class:`CommitError`
    (``TOO_MANY_CONFLICTS``)."""

    def conflict(error: BaseException) -> bool:
        return isinstance(error, CommitConflictError)

    def warn(error: BaseException) -> None:
        log.warning("%s: commit conflict (%s); retrying", what, error.__cause__ or error)

    try:
        return retry(
            step,
            deadline=Deadline.never(),
            retriable=conflict,
            pause_s=lambda n: min(2.0, 0.05 * 2**n),
            tries=retries,
            before_retry=warn,
        )
    except CommitConflictError as e:
        raise CommitError(str(e), reason=CommitFailureReason.TOO_MANY_CONFLICTS) from (
            e.__cause__ or e
        )


def elapsed_ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


def upstream_of(sources: Sequence[Any]) -> list[Any]:
    """The alignment reports chkpt-kafka sources stored with the batch's end offsets:
    per topic, the mode, upstream app and snapshot ids this batch covers."""
    reports = []
    for source in sources:
        topics = meta_of(source if isinstance(source, dict) else None).get("topics")
        if topics:
            reports.append(topics)
    return reports
