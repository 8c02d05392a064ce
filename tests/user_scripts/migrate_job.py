"""A user's Kafka -> Delta job, written once with Spark's own formats and once with the
chkpt ones: the query is the same, only the format names differ (docs: "Coming from
Spark's Kafka connector").

    python migrate_job.py spark|chkpt WORKDIR --servers HOST:PORT --topic T
        [--stateful] [--seconds S]

``spark``: ``readStream.format("kafka")`` -> ``writeStream.format("delta")`` (delta-spark);
``chkpt``: ``chkpt-kafka`` -> ``chkpt-delta``. Stateless: every record's value as ``id``
appended; ``--stateful``: counts per key (``complete`` mode). The query runs on
``WORKDIR/chk`` into ``WORKDIR/table``, reading at most 300 records per batch, until
``--seconds`` have passed (then ``stop()``), or with ``Trigger.AvailableNow`` when
``--seconds`` is 0. It prints ``batches <last batch id>`` and exits 0.
"""

import argparse
import time
from pathlib import Path

from spark_chkpt.session import build_session

parser = argparse.ArgumentParser()
parser.add_argument("formats", choices=("spark", "chkpt"))
parser.add_argument("workdir", type=Path)
parser.add_argument("--servers", required=True)
parser.add_argument("--topic", required=True)
parser.add_argument("--stateful", action="store_true")
parser.add_argument("--seconds", type=float, default=0)
args = parser.parse_args()

source, sink = ("kafka", "delta") if args.formats == "spark" else ("chkpt-kafka", "chkpt-delta")
spark = build_session(
    app_name="migrate-job",
    master="local[2]",
    connectors=True,
    conf={
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # delta-spark replays a table's log in 50 tasks by default
        "spark.databricks.delta.snapshotPartitions": "2",
    },
)
spark.sparkContext.setLogLevel("ERROR")

events = (
    spark.readStream.format(source)
    .option("kafka.bootstrap.servers", args.servers)
    .option("subscribe", args.topic)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "300")
    .load()
)
if args.stateful:
    rows = events.selectExpr("CAST(key AS STRING) AS k").groupBy("k").count()
    mode = "complete"
else:
    rows = events.selectExpr("CAST(value AS STRING) AS id", "partition", "offset")
    mode = "append"
writer = (
    rows.writeStream.format(sink)
    .outputMode(mode)
    .option("checkpointLocation", str(args.workdir / "chk"))
)
if args.seconds:
    query = writer.trigger(processingTime="500 milliseconds").start(str(args.workdir / "table"))
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline and query.exception() is None:
        time.sleep(0.2)
    query.stop()
else:
    query = writer.trigger(availableNow=True).start(str(args.workdir / "table"))
    query.awaitTermination()
assert query.exception() is None, query.exception()
progress = query.lastProgress
print(f"batches {progress['batchId'] if progress else -1}", flush=True)
