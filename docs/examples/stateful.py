"""The seeds' per-app page-view counts, three ways: complete, upsert and windowed.

    BOOTSTRAP_SERVERS=host:9092 TOPIC=page-views WORK=/tmp/chkpt python stateful.py

Each query reads the page views (JSON with ``app`` and ``ts``) with ``chkpt-kafka``
and counts them per app; snapshot N covers the source offsets, the state store's
version N + 1 and the Delta commit N together.
"""

import os

from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_chkpt
from spark_chkpt import DeltaUpsert
from spark_chkpt.state.reader import read_state

SERVERS = os.environ.get("BOOTSTRAP_SERVERS", "localhost:9092")
TOPIC = os.environ.get("TOPIC", "page-views")
WORK = os.environ.get("WORK", "/tmp/spark-chkpt-examples")

spark = (
    SparkSession.builder.master("local[2]")
    .appName("page-view-counts")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark_chkpt.register(spark)

# --8<-- [start:events]
events = (
    spark.readStream.format("chkpt-kafka")
    .option("kafka.bootstrap.servers", SERVERS)
    .option("subscribe", TOPIC)
    .option("startingOffsets", "earliest")
    .load()
    .select(F.from_json(F.col("value").cast("string"), "app string, ts timestamp").alias("v"))
    .select("v.app", "v.ts")
)
# --8<-- [end:events]

# --8<-- [start:complete]
complete = (
    events.groupBy("app")
    .count()
    .writeStream.format("chkpt-delta")
    .outputMode("complete")  # each snapshot replaces the table in one commit
    .option("path", f"{WORK}/tables/pv_complete")
    .option("checkpointLocation", f"{WORK}/chk/pv_complete")
    .trigger(availableNow=True)
    .start()
)
complete.awaitTermination()
# --8<-- [end:complete]

# --8<-- [start:upsert]
upsert = DeltaUpsert(
    path=f"{WORK}/tables/pv_upsert", keys=["app"], checkpoint_location=f"{WORK}/chk/pv_upsert"
)
updates = (
    events.groupBy("app")
    .count()
    .writeStream.outputMode("update")  # Spark refuses update mode for Python sinks,
    .foreachBatch(upsert)  # so DeltaUpsert runs one exactly-once MERGE per batch
    .option("checkpointLocation", f"{WORK}/chk/pv_upsert")  # the same folder
    .trigger(availableNow=True)
    .start()
)
updates.awaitTermination()
# --8<-- [end:upsert]

# --8<-- [start:windowed]
windowed = (
    events.withWatermark("ts", "10 seconds")
    .groupBy("app", F.window("ts", "1 minute"))
    .count()
    .selectExpr("app", "window.start AS window_start", "window.end AS window_end", "count")
    .writeStream.format("chkpt-delta")  # append: a window is written once, when the
    .outputMode("append")  # watermark passes its end
    .option("path", f"{WORK}/tables/pv_windowed")
    .option("checkpointLocation", f"{WORK}/chk/pv_windowed")
    .trigger(availableNow=True)
    .start()
)
windowed.awaitTermination()
# --8<-- [end:windowed]

# --8<-- [start:state]
snap = read_state(spark, checkpoint_location=f"{WORK}/chk/pv_complete")
print(f"state of snapshot {snap.batch_id}: {snap.keys} keys, {snap.rows[:2]} ...")
# --8<-- [end:state]

for name in ("pv_complete", "pv_upsert", "pv_windowed"):
    table = DeltaTable(f"{WORK}/tables/{name}").to_pyarrow_table()
    counts: dict[str, int] = {}
    for app, count in zip(
        table.column("app").to_pylist(), table.column("count").to_pylist(), strict=True
    ):
        counts[app] = counts.get(app, 0) + count
    print(f"{name} {sum(counts.values())} {sorted(counts.items())}")
