"""Readers of the ``chkpt-kafka`` source: streaming (micro-batch) and batch.

Thin: Spark's calls are translated for :class:`~spark_chkpt.kafka.source.planner.SourcePlanner`
on the driver, and each input partition is read on an executor by
:func:`~spark_chkpt.kafka.source.fetcher.read_task` into Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from spark_chkpt.errors import InvalidTypeError
from spark_chkpt.kafka.source.fetcher import ReadSpec, read_task
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.planner import SourcePlanner
from spark_chkpt.runtime.report import reported
from spark_chkpt.runtime.spark_version import claim_available_now, read_limits
from spark_chkpt.runtime.worker_heap import freeze_imports

if TYPE_CHECKING:
    import pyarrow as pa

# Spark 4.2's admission control (ReadLimit, SupportsTriggerAvailableNow); before it the
# reader applies maxOffsetsPerTrigger itself and tracks where its next batch starts.
_LIMITS = read_limits()
_AVAILABLE_NOW: tuple[type, ...] = (_LIMITS["SupportsTriggerAvailableNow"],) if _LIMITS else ()


class KafkaInputPartition(InputPartition):
    """One read task: offset ranges of one or more topic-partitions (pickled to the
    executor), with what to skip and drop on topics that carry barriers."""

    def __init__(self, specs: Sequence[ReadSpec]) -> None:
        super().__init__(None)
        self.specs = list(specs)

    def __repr__(self) -> str:
        return f"KafkaInputPartition({', '.join(str(s.range) for s in self.specs)})"


def _read(planner: SourcePlanner, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if type(partition) is InputPartition and partition.value is None:
        # A plan with no ranges (a batch read whose start equals its end): Spark still
        # runs one task, with its placeholder partition. It reads nothing.
        return iter(())
    if not isinstance(partition, KafkaInputPartition):
        raise InvalidTypeError(f"chkpt-kafka cannot read {partition!r}")
    freeze_imports()
    return read_task(
        config=planner.config, specs=partition.specs, client_id=planner.client_id + "-executor"
    )


class KafkaStreamReader(DataSourceStreamReader, *_AVAILABLE_NOW):  # type: ignore[misc]
    """Micro-batch reader: Spark's Kafka source semantics, plus group offset commits."""

    def __init__(self, *, config: SourceConfig, options: dict[str, str] | None = None) -> None:
        self.config = config
        self.planner = SourcePlanner(config=config)
        self._initial: dict | None = None
        # Before Spark 4.2: where the next batch starts (the end of the last one Spark
        # planned or recovered), since latestOffset() is not told; and whether the query
        # runs one batch (Trigger.AvailableNow), which then takes everything.
        self._options = options or {}
        self._next_start: dict | None = None
        self._one_batch: bool | None = None

    @reported
    def initialOffset(self) -> dict:
        if self._initial is None:  # once: a "latest" start asked twice could move
            self._initial = self.planner.initial_offsets()
        return self._initial

    def getDefaultReadLimit(self) -> Any:
        if self.config.max_offsets_per_trigger is not None:
            return _LIMITS["ReadMaxRows"](self.config.max_offsets_per_trigger)
        return _LIMITS["ReadAllAvailable"]()

    @reported
    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    @reported
    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        if start is None:  # Spark 4.0 and 4.1: no start, no limit
            if self._one_batch is None:
                self._one_batch = claim_available_now(self._options)
            return self.planner.latest_offset(
                self._next_start or self.initialOffset(),
                max_rows=None if self._one_batch else self.config.max_offsets_per_trigger,
                read_all=True,
            )
        return self.planner.latest_offset(
            start,
            max_rows=limit.max_rows if isinstance(limit, _LIMITS.get("ReadMaxRows", ())) else None,
            read_all=isinstance(limit, _LIMITS.get("ReadAllAvailable", ())),
        )

    def reportLatestOffset(self) -> dict | None:
        return self.planner.reported_latest()

    @reported
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self._next_start = end  # Spark plans (or, after a restart, recovers) [start, end)
        return [KafkaInputPartition(task) for task in self.planner.read_tasks(start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.planner, partition)

    @reported
    def commit(self, end: dict) -> None:
        self.planner.commit_group(end)

    def stop(self) -> None:
        self.planner.stop()


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("chkpt-kafka")``: reads ``[startingOffsets, endingOffsets)``."""

    def __init__(self, *, config: SourceConfig) -> None:
        self.config = config
        self.planner = SourcePlanner(config=config)

    @reported
    def partitions(self) -> Sequence[InputPartition]:
        return [KafkaInputPartition(task) for task in self.planner.batch_read_tasks()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.planner, partition)
