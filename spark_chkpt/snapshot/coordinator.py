"""Phase 2 of the two-phase commit of one snapshot: what every sink's coordinator shares.

Spark's micro-batch engine is Flink's checkpoint trigger: before batch N it writes the
planned source offsets to ``<checkpointLocation>/offsets/N``. Batch N is snapshot N.
Executors stage their output (phase 1: Parquet files for Delta, tagged records for
Kafka); the sink's driver-side ``commit(messages, N)`` hands it to a coordinator, which
completes the snapshot:

1. **plan**: read Spark's plan for the batch, the source offsets it covers
   (:meth:`SnapshotCoordinator.plan`);
2. **idempotency**: the sink says whether batch N is already in it (Delta:
   ``txn(appId) >= N``; Kafka: a ``complete`` index entry). If so, this attempt's output
   is discarded and :meth:`SnapshotCoordinator.duplicate` returns the snapshot's record
   (Delta first checks that the commit of batch N came from the same source offsets,
   else :class:`~spark_chkpt.errors.QueryIdentityError`);
3. **make visible**, in one atomic step that also records the snapshot: one Delta
   commit (:mod:`spark_chkpt.delta.sink.committer`), or barrier markers and the
   index entry naming them (:mod:`spark_chkpt.kafka.sink.committer`);
4. **record**: write the snapshot record to the store (:meth:`SnapshotCoordinator.finish`).
   The record lists the state each stateful operator committed for the batch (state
   version N + 1, :mod:`spark_chkpt.state.operators`): the sink's commit runs after every
   task of the batch, so the stateful stage's stores are committed by then.

A crash anywhere leaves either nothing visible (Spark re-runs batch N with the same
offsets) or the whole batch visible and findable by step 2 of the re-run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from spark_chkpt.errors import ChkptError
from spark_chkpt.offsets import meta_of
from spark_chkpt.snapshot.checkpoint import BatchPlan, SparkCheckpoint
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.store import SnapshotStore
from spark_chkpt.state.operators import operator_ids, provider_of, state_operators
from spark_chkpt.testing.failpoints import FaultPoint, maybe_kill

log = logging.getLogger(__name__)


class SnapshotCoordinator:
    """The steps every sink's coordinator takes the same way: plan, record, store."""

    sink: str = ""

    def __init__(
        self,
        *,
        checkpoint_location: str,
        app_id: str,
        query_name: str | None,
        retained_snapshots: int,
        target: str | None = None,
    ) -> None:
        self.app_id = app_id
        self.target_name = target
        self.query_name = query_name
        self.checkpoint = SparkCheckpoint(location=checkpoint_location)
        self.store = SnapshotStore(
            checkpoint_location=checkpoint_location, retained=retained_snapshots
        )

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
        """Step 2's answer for a batch the sink already holds.

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
        """Step 4: write the snapshot record to the store atomically."""
        self.store.put(record)
        maybe_kill(FaultPoint.AFTER_SNAPSHOT, record.batch_id)
        return record


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
