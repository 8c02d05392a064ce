"""``df.writeStream.format("chkpt-jsonl").option("path", ...)``: the Spark side of the
sink, thin: a write task stages its rows (phase 1), the driver's ``commit`` runs the
:class:`~chkpt_jsonl.committer.JsonLinesCoordinator` (phase 2)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from chkpt_jsonl.committer import SINK, JsonLinesCoordinator, Staged
from chkpt_jsonl.folder import JsonLinesFolder
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_chkpt.errors import ConfigError
from spark_chkpt.options import SnapshotTiming
from spark_chkpt.snapshot.settings import (
    SnapshotConfig,
    SnapshotSettings,
    snapshot_options,
)


class StagedMessage(Staged, WriterCommitMessage):
    """A task's :class:`Staged` output, as Spark's commit message."""


class JsonLinesDataSource(DataSource):
    """The ``chkpt-jsonl`` format (a sink only)."""

    @classmethod
    def name(cls) -> str:
        return SINK

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        path = self.options.get("path")
        if not path:
            raise ConfigError("path", None, "required: the folder chkpt-jsonl writes")
        opts = {k.lower(): v for k, v in self.options.items()}
        config = JsonLinesConfig(
            **snapshot_options(opts, checkpoint_needed="its commits are Spark's batches")
        )
        return JsonLinesStreamWriter(path=path, snapshot=config.snapshot_settings())


@dataclass(frozen=True)
class JsonLinesConfig(SnapshotConfig):
    """The protocol's options (the sink has no other but ``path``)."""

    checkpoint_location: str
    query_name: str | None
    txn_app_id: str | None
    retained_snapshots: int
    timing: SnapshotTiming


class JsonLinesStreamWriter(DataSourceStreamWriter):
    def __init__(self, *, path: str, snapshot: SnapshotSettings) -> None:
        self.path = path
        self.snapshot = snapshot

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        context = TaskContext.get()
        assert context is not None, "a write runs in a Spark task"
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or 0)
        rows = [row.asDict() for row in iterator]
        folder = JsonLinesFolder(self.path)
        name = (
            folder.stage(batch_id=batch_id, task=context.partitionId(), rows=rows) if rows else None
        )
        return StagedMessage(
            batch_id=batch_id, task=context.partitionId(), file=name, rows=len(rows)
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._coordinator().commit(batch_id=batchId, messages=messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._coordinator().abort(messages)

    def _coordinator(self) -> JsonLinesCoordinator:
        return JsonLinesCoordinator(snapshot=self.snapshot, path=self.path)
