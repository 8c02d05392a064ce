"""The per-batch floor of Spark's Python DataSource API, against Spark's own JVM parts.

    python -m bench.floor                       # the four rows, session defaults
    python -m bench.floor --conf KEY=VALUE ...  # the same with Spark settings

Four streaming queries of 1,000-row micro-batches (``processingTime=0``), 25 batches
each after a warm-up query, in one ``local[2]`` session: a trivial Python streaming
source (4 partitions, one Arrow batch each) or Spark's ``rate-micro-batch`` source,
into ``noop`` or a trivial Python streaming sink (``write`` counts, ``commit`` appends a
line). Each row prints the median of Spark's ``durationMs`` phases over the batches with
rows, leaving out the first two. What is left when our code is taken out: the difference
between rows is what the Python DataSource API costs per batch, source side and sink side.
No Kafka, no Delta, nothing of this project but ``register()``'s session settings when
``--register`` is given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

ROWS = 1_000
PARTITIONS = 4
ROWS_OF_RUNS = ("jvm-noop", "py-noop", "jvm-py", "py-py")


def _data_source() -> type:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        InputPartition,
        WriterCommitMessage,
    )

    class Range(InputPartition):
        def __init__(self, lo: int, hi: int) -> None:
            self.lo, self.hi = lo, hi

    class Reader(DataSourceStreamReader):
        def __init__(self) -> None:
            self.n = 0

        def initialOffset(self) -> dict:
            return {"o": 0}

        def latestOffset(self) -> dict:  # type: ignore[override]  # the no-argument form
            self.n += ROWS
            return {"o": self.n}

        def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
            a, b = start["o"], end["o"]
            step = (b - a) // PARTITIONS
            return [Range(a + i * step, a + (i + 1) * step) for i in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            assert isinstance(partition, Range)
            yield pa.record_batch(
                [pa.array(range(partition.lo, partition.hi), pa.int64())], names=["v"]
            )

        def commit(self, end: dict) -> None:
            pass

    class Counted(WriterCommitMessage):
        def __init__(self, n: int) -> None:
            self.n = n

    class Writer(DataSourceStreamWriter):
        def __init__(self, log: str) -> None:
            self.log = log

        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            return Counted(sum(1 for _ in iterator))

        def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
            with open(self.log, "a") as f:
                f.write(f"{batchId}\n")

        def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
            pass

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "chkpt-bench-floor"

        def schema(self) -> str:
            return "v long"

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return Reader()

        def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
            return Writer(self.options["log"])

    return Floor


def run_row(spark: Any, row: str, *, batches: int = 25) -> dict[str, float]:
    """One row (``source-sink``, each ``jvm`` or ``py``): the median of each phase."""
    source, sink = row.split("-")
    folder = tempfile.mkdtemp(prefix=f"bench-floor-{row}-")
    if source == "py":
        frame = spark.readStream.format("chkpt-bench-floor").load()
    else:
        frame = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", ROWS)
            .option("numPartitions", PARTITIONS)
            .load()
            .selectExpr("value AS v")
        )
    writer = frame.writeStream.option("checkpointLocation", f"{folder}/chk").trigger(
        processingTime="0 seconds"
    )
    if sink == "py":
        writer = writer.format("chkpt-bench-floor").option("log", f"{folder}/commits")
    else:
        writer = writer.format("noop")
    query = writer.start()
    try:
        while query.lastProgress is None or query.lastProgress["batchId"] < batches:
            if query.exception() is not None:
                raise RuntimeError(f"bench floor {row}: {query.exception()}")
            time.sleep(0.05)
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0][2:]
    keys = sorted({k for p in progress for k in p["durationMs"]})
    return {k: float(statistics.median(p["durationMs"].get(k, 0) for p in progress)) for k in keys}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--register", action="store_true", help="apply register()'s settings")
    parser.add_argument("--rows", default=",".join(ROWS_OF_RUNS))
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    from spark_chkpt.runtime.interpreter import choose_worker_python

    builder = SparkSession.builder.master("local[2]").config(
        "spark.ui.showConsoleProgress", "false"
    )
    for item in args.conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    choose_worker_python(spark)
    if args.register:
        from spark_chkpt.runtime.session_defaults import apply_register_defaults

        apply_register_defaults(spark)
    spark.dataSource.register(_data_source())
    run_row(spark, "py-py", batches=5)  # warm-up
    for row in args.rows.split(","):
        print(json.dumps({"row": row, **run_row(spark, row)}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
