"""Phase 2 of ``chkpt-jsonl``: spark-chkpt's coordinator template with this sink's hooks.

:class:`JsonLinesCoordinator` supplies only the hooks of
:class:`spark_chkpt.snapshot.coordinator.SnapshotCoordinator`, whose ``commit`` reads
the batch's plan from Spark's ``offsets/N`` (the source offsets of the record), fences
an older generation, asks whether the batch is already in the folder (then drops this
attempt's files), makes it visible and writes the snapshot record to the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from chkpt_jsonl.folder import JsonLinesFolder

from spark_chkpt.errors import CommitConflictError, QueryIdentityError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.snapshot.checkpoint import BatchPlan
from spark_chkpt.snapshot.coordinator import Batch, Committed, SnapshotCoordinator
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings

SINK = "chkpt-jsonl"


@dataclass
class Staged:
    """What one write task staged (its commit message)."""

    batch_id: int
    task: int
    file: str | None
    rows: int


@dataclass
class JsonLinesBatch(Batch):
    staged: list[Staged] = field(default_factory=list)


class JsonLinesCoordinator(SnapshotCoordinator[JsonLinesBatch]):
    """The driver's commit of one batch into a :class:`JsonLinesFolder`."""

    sink = SINK
    visible_point = FaultPoint.AFTER_DELTA_COMMIT  # visible; the store not written yet

    def __init__(self, *, snapshot: SnapshotSettings, path: str) -> None:
        super().__init__(snapshot=snapshot, target=path)
        self.folder = JsonLinesFolder(path)

    def new_batch(
        self, *, batch_id: int, messages: Sequence[Any], **details: Any
    ) -> JsonLinesBatch:
        return JsonLinesBatch(batch_id=batch_id, staged=[m for m in messages if m is not None])

    def begin(self, batch: JsonLinesBatch) -> None:
        failpoint(FaultPoint.AFTER_STAGING, batch.batch_id)

    def sink_generation(self, batch: JsonLinesBatch) -> int | None:
        return self.folder.generation(self.app_id)

    def already_committed(self, batch: JsonLinesBatch, plan: BatchPlan) -> Committed | None:
        doc = self.folder.commit_of(batch.batch_id)
        if doc is None:
            return None
        if doc.get("app_id") != self.app_id:
            raise QueryIdentityError(
                f"{self.folder.path} holds batch {batch.batch_id} of query {doc.get('app_id')}, "
                f"not of {self.app_id}: write another folder"
            )
        return Committed(record=lambda: SnapshotRecord.from_json(doc["record"]))

    def discard(self, batch: JsonLinesBatch) -> None:
        self.folder.discard([s.file for s in batch.staged if s.file])

    def make_visible(self, batch: JsonLinesBatch, plan: BatchPlan, *, retry: int) -> SnapshotRecord:
        files = sorted(s.file for s in batch.staged if s.file)
        record = self.record(
            batch_id=batch.batch_id,
            sources=plan.sources,
            outcome=CommitOutcome.COMMITTED if files else CommitOutcome.EMPTY,
            started=batch.started,
            rows=sum(s.rows for s in batch.staged),
            files=len(files),
            table_version=batch.batch_id,  # the commit's number: what a rewind goes back to
        )
        record = replace(record, sink_state={"files": files})  # the sink's own part
        doc = {
            "app_id": self.app_id,
            "generation": batch.epoch.generation,
            "files": files,
            "record": record.to_json(),
        }
        if not self.folder.commit(batch_id=batch.batch_id, doc=doc):
            raise CommitConflictError(f"{SINK} batch {batch.batch_id}: committed meanwhile")
        return record

    def abort(self, messages: Sequence[Any]) -> None:
        """Spark's abort of a batch: its attempts' files go."""
        self.folder.discard([m.file for m in messages if m is not None and m.file])
