"""A user's pipeline of five queries in one driver, run against a Kafka cluster.

    python cluster_job.py SERVERS EVENTS OUT TXOUT WORKDIR

From topic EVENTS (page views, JSON): ``delta`` writes each event to a Delta table
(chkpt-kafka -> chkpt-delta); ``barriers`` copies the events to topic OUT (the chkpt-kafka
sink's barriers) and ``aligned`` reads OUT back aligned into a second table; ``transactions``
copies them to TXOUT in Kafka transactions (``delivery=exactly-once-transactions``);
``counts`` keeps the per-app counts (stateful, ``outputMode("complete")``) in a third
table. Every progress event is a line of ``WORKDIR/progress.jsonl``. The script runs until
the file ``WORKDIR/stop`` appears, then stops the queries and exits 0; a query that
failed meanwhile is printed (``query NAME died: ...``), also to ``WORKDIR/died.txt``,
and makes it exit 3.
"""

import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

import spark_chkpt

servers, events_topic, out_topic, txout_topic, workdir = sys.argv[1:6]
work = Path(workdir)
progress_file = work / "progress.jsonl"

spark = (
    SparkSession.builder.master("local[2]")
    .appName("cluster-job")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark_chkpt.register(spark)


class Progress(StreamingQueryListener):
    """Each batch of each query as one JSON line: name, batch, rows, start, duration."""

    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        p = event.progress
        line = {
            "name": p.name,
            "batch": p.batchId,
            "rows": p.numInputRows,
            "timestamp": p.timestamp,
            "ms": p.durationMs.get("triggerExecution", 0),
        }
        with open(progress_file, "a") as out:
            out.write(json.dumps(line) + "\n")

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


spark.streams.addListener(Progress())


def kafka(topic):
    return (
        spark.readStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def sink(frame, name, fmt, **options):
    writer = (
        frame.writeStream.queryName(name)
        .format(fmt)
        .option("checkpointLocation", str(work / "chk" / name))
        .trigger(processingTime="1 second")
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def event_ids(frame):
    return frame.select(
        F.get_json_object(F.col("value").cast("string"), "$.event_id")
        .cast("long")
        .alias("event_id")
    )


events = kafka(events_topic)
kafka_out = {"kafka.bootstrap.servers": servers}
queries = [
    sink(event_ids(events), "delta", "chkpt-delta", path=str(work / "delta")).start(),
    sink(
        events.select("key", "value"), "barriers", "chkpt-kafka", topic=out_topic, **kafka_out
    ).start(),
    sink(event_ids(kafka(out_topic)), "aligned", "chkpt-delta", path=str(work / "aligned")).start(),
    sink(
        events.select("key", "value"),
        "transactions",
        "chkpt-kafka",
        topic=txout_topic,
        delivery="exactly-once-transactions",
        txnAppId="cluster-tx",
        **kafka_out,
    ).start(),
    sink(
        events.select(F.get_json_object(F.col("value").cast("string"), "$.app").alias("app"))
        .groupBy("app")
        .count(),
        "counts",
        "chkpt-delta",
        path=str(work / "counts"),
    )
    .outputMode("complete")
    .start(),
]

died = set()
while not (work / "stop").exists():
    for query in queries:
        if query.name not in died and not query.isActive:
            died.add(query.name)
            print(f"query {query.name} died: {query.exception()}", file=sys.stderr, flush=True)
            with open(work / "died.txt", "a") as deaths:
                deaths.write(f"query {query.name} died: {query.exception()}\n")
    time.sleep(0.5)
for query in queries:
    query.stop()
print(f"stopped; died: {sorted(died)}", flush=True)
sys.exit(3 if died else 0)
