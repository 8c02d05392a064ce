"""What the sinks' Spark writers share: the write task Spark runs, and the driver's
``commit`` and ``abort`` handed to the sink's assembler.

Each sink is assembled in its feature package
(:class:`~spark_chkpt.delta.sink.assembler.DeltaSink`,
:class:`~spark_chkpt.kafka.sink.assembler.KafkaSink`); its Spark writer only turns
Spark's calls into the assembler's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from pyspark.sql.datasource import WriterCommitMessage

from spark_chkpt.runtime.report import reported
from spark_chkpt.runtime.spark_version import stream_writer_base
from spark_chkpt.runtime.worker_heap import freeze_imports

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as ArrowStreamWriter
else:  # Arrow batches into write() on every supported Spark line
    ArrowStreamWriter = stream_writer_base()


@dataclass(frozen=True)
class WriteTask:
    """The write task running this ``write``: Spark's batch id (None outside a
    streaming query), its partition and its attempt."""

    batch_id: int | None
    task: int
    attempt_number: int

    @classmethod
    def current(cls) -> WriteTask:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        return cls(
            batch_id=int(batch) if batch is not None else None,
            task=context.partitionId() if context else 0,
            attempt_number=context.attemptNumber() if context else 0,
        )


class Assembled(Protocol):
    """A sink's assembler, as its Spark writer's driver side calls it."""

    def commit(self, *, messages: Sequence[Any], batch_id: int) -> Any: ...
    def abort(self, *, messages: Sequence[Any], batch_id: int) -> Any: ...


S = TypeVar("S", bound=Assembled)


class SinkStreamWriter(ArrowStreamWriter, Generic[S]):
    """Phase 1 in ``write`` (executors, each sink's own), phase 2 in ``commit`` /
    ``abort`` (driver): the tasks' messages of type ``committable`` handed to the sink."""

    committable: ClassVar[type]  # what a write task returns (other messages: None)

    def __init__(self, *, sink: S) -> None:
        self.sink = sink

    def _messages(self, messages: list[WriterCommitMessage | None]) -> list[Any]:
        return [m if isinstance(m, self.committable) else None for m in messages]

    @reported
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        freeze_imports()  # Spark's commit runner is a reused daemon worker too
        self.sink.commit(messages=self._messages(messages), batch_id=batchId)

    @reported
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        freeze_imports()
        self.sink.abort(messages=self._messages(messages), batch_id=batchId)
