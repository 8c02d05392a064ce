"""The ceiling of Spark's Python DataSource path: a stream source with ``chkpt-kafka``'s
schema that yields the benchmark's records from pre-built Arrow files, with no Kafka.

:func:`write_partitions` builds, once on the driver, the same records the benchmark
produced into Kafka (event ``i`` in partition ``i % P`` at offset ``i // P``) as one Arrow
IPC file per partition. Read tasks memory-map their file and yield slices of
``maxRecordsPerArrowBatch`` rows, as ``chkpt-kafka``'s read tasks yield Arrow batches, so
a query over this source costs what Spark's Python path costs and nothing of Kafka's.

Options: ``path`` (the folder of the files), ``partitions``, ``maxOffsetsPerTrigger``,
``maxRecordsPerArrowBatch``; the ``chkpt-kafka`` options the benchmark's job passes are
accepted and ignored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_chkpt.kafka.source.records import SPARK_SCHEMA_DDL

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT = "chkpt-bench-synthetic"
_ENDS_FILE = "ends.json"


def write_partitions(*, folder: Path, topic: str, records: int, partitions: int) -> None:
    """The benchmark's records as one Arrow IPC file per partition, under ``folder``."""
    import pyarrow as pa

    from spark_chkpt.kafka.source.records import arrow_schema
    from spark_chkpt.testing.generator import PageViews

    folder.mkdir(parents=True, exist_ok=True)
    schema = arrow_schema(include_headers=False)
    views = PageViews()
    now_us = int(time.time() * 1_000_000)
    ends = {}
    for partition in range(partitions):
        ids = range(partition, records, partitions)
        pairs = [views.encoded(i) for i in ids]
        n = len(pairs)
        table = pa.Table.from_arrays(
            [
                pa.array([k for k, _ in pairs], type=pa.binary()),
                pa.array([v for _, v in pairs], type=pa.binary()),
                pa.repeat(pa.scalar(topic, type=pa.string()), n),
                pa.repeat(pa.scalar(partition, type=pa.int32()), n),
                pa.array(range(n), type=pa.int64()),
                pa.repeat(pa.scalar(now_us, type=pa.timestamp("us", tz="UTC")), n),
                pa.repeat(pa.scalar(0, type=pa.int32()), n),
            ],
            schema=schema,
        )
        path = str(folder / f"{partition}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_table(table)
        ends[str(partition)] = n
    (folder / _ENDS_FILE).write_text(json.dumps(ends))


class _Range(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__(None)
        self.partition, self.start, self.end = partition, start, end


def _slices(folder: str, part: _Range, rows_per_batch: int) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    with pa.memory_map(f"{folder}/{part.partition}.arrow") as source:
        table = pa.ipc.open_file(source).read_all()
    for offset in range(part.start, part.end, rows_per_batch):
        chunk = table.slice(offset, min(rows_per_batch, part.end - offset))
        yield from chunk.combine_chunks().to_batches()


class SyntheticStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, *, folder: str, max_rows: int | None, rows_per_batch: int) -> None:
        self.folder = folder
        self.max_rows = max_rows
        self.rows_per_batch = rows_per_batch
        ends = json.loads((Path(folder) / _ENDS_FILE).read_text())
        self.ends = {int(p): int(n) for p, n in ends.items()}

    def initialOffset(self) -> dict:
        return {str(p): 0 for p in self.ends}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """The files do not grow: everything they hold is what is available now."""

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        from spark_chkpt.offsets import TopicPartition, allocate_limit

        if not isinstance(limit, ReadMaxRows):
            return {str(p): n for p, n in self.ends.items()}
        # Shared over the partitions by lag, as chkpt-kafka's planner shares it.
        position = {TopicPartition("synthetic", int(p)): int(o) for p, o in start.items()}
        latest = {TopicPartition("synthetic", p): n for p, n in self.ends.items()}
        end = allocate_limit(position, latest, max_records=limit.max_rows)
        return {str(tp.partition): o for tp, o in end.items()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [
            _Range(int(p), int(start[p]), int(end[p]))
            for p in end
            if int(end[p]) > int(start.get(p, 0))
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        return _slices(self.folder, partition, self.rows_per_batch)

    def commit(self, end: dict) -> None:
        pass


class SyntheticDataSource(DataSource):
    """``format("chkpt-bench-synthetic")``: see the module's docstring."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        raise NotImplementedError(f"{FORMAT} is a stream source only")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        limit = self.options.get("maxOffsetsPerTrigger")
        return SyntheticStreamReader(
            folder=self.options["path"],
            max_rows=int(limit) if limit else None,
            rows_per_batch=int(self.options.get("maxRecordsPerArrowBatch", "10000")),
        )
