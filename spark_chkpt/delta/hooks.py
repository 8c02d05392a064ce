"""The hooks both Delta writers give :meth:`SnapshotCoordinator.commit` the same way.

The ``chkpt-delta`` sink's :class:`~spark_chkpt.delta.sink.committer.DeltaCoordinator`
and ``DeltaUpsert``'s :class:`~spark_chkpt.delta.upsert.committer.UpsertCommitter` write
one Delta table each; what they do alike is written once here: the fence's generation
(``txn(<appId>#generation)``, step 1), the table and ``txn(appId)`` as step 3 finds
them, ``txn(appId) >= N`` checked against the table's commit of N
(:func:`spark_chkpt.delta.replay.check_replay`), a first commit of the app id to a table
another query fills refused (:func:`spark_chkpt.delta.replay.refuse_overlap`), the
commit's metadata, and the Delta version the commit of N became.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from spark_chkpt.delta.replay import check_replay, refuse_overlap
from spark_chkpt.delta.table.reader import TxnCommit
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.snapshot.checkpoint import BatchPlan
from spark_chkpt.snapshot.coordinator import Batch, SnapshotCoordinator
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord


@dataclass
class TableBatch(Batch):
    """A batch of a Delta writer: the table as step 3 opened it and its ``txn(appId)``."""

    table: Any = None
    done: int | None = None


TB = TypeVar("TB", bound=TableBatch)


class DeltaHooks(SnapshotCoordinator[TB]):
    """The hooks of a coordinator that completes snapshots into ``target``; ``writer``
    names it in messages."""

    writer: str = "chkpt-delta"
    target: DeltaTarget

    def sink_generation(self, batch: TB) -> int | None:
        return self.target.generation(self.target.latest(), app_id=self.app_id)

    def open_table(self, batch: TB) -> Any:
        """Step 3: the table as it is now (None: not created yet) and the app's
        ``txn(appId)`` in it, kept on ``batch``; returns the table."""
        batch.table = table = self.target.latest()
        batch.done = table.transaction_version(self.app_id) if table is not None else None
        return table

    def replayed(
        self, batch: TB, plan: BatchPlan
    ) -> tuple[TxnCommit | None, SnapshotRecord | None] | None:
        """Step 3: None if the table does not hold batch N of the app
        (``txn(appId) < N``); else its commit of N and the record it carries, once its
        source offsets are found to be this plan's (see
        :func:`~spark_chkpt.delta.replay.check_replay`, which raises otherwise)."""
        if batch.done is None or batch.done < batch.batch_id:
            return None
        return check_replay(
            target=self.target,
            table=batch.table,
            app_id=self.app_id,
            checkpoint_location=self.checkpoint.uri,
            batch_id=batch.batch_id,
            done=batch.done,
            sources=plan.sources,
            writer=self.writer,
        )

    def refuse_first_overlap(self, batch: TB, plan: BatchPlan) -> None:
        """Step 3: the app id's first commit to a table that holds another query's
        snapshots of the same partitions is refused (:func:`refuse_overlap`)."""
        if batch.done is None and batch.table is not None:
            refuse_overlap(
                target=self.target,
                table=batch.table,
                app_id=self.app_id,
                sources=plan.sources,
                writer=self.writer,
            )

    @staticmethod
    def commit_metadata(record: SnapshotRecord, batch_id: int) -> dict[str, Any]:
        """The commitInfo of a snapshot's commit: its record and the batch id."""
        return {SNAPSHOT_KEY: record.to_json(), "chkpt.batchId": batch_id}

    def version_of(self, batch_id: int, *, table: Any = None) -> int | None:
        """The Delta version the app's commit of ``batch_id`` became (another writer may
        have committed since, so not simply the latest version); ``table``: the table
        the commit was made on (its later JSON commits are read, the table is not
        advanced), else the latest."""
        table = table if table is not None else self.target.latest()
        if table is None:
            return None
        commit = self.target.find_txn_commit(table, app_id=self.app_id, txn_version=batch_id)
        return commit.version if commit is not None else None
