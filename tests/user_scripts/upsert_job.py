"""A user's upsert job: chkpt-kafka → foreachBatch(DeltaUpsert) by key, Trigger.AvailableNow.

    python upsert_job.py SERVERS TOPIC TABLE CHECKPOINT SCHEMA MAX_OFFSETS [--delta-spark]

Each record's value is JSON of SCHEMA (Spark DDL); a true ``_delete`` deletes the row
with its ``id``. ``--delta-spark``: the session has delta-spark, as a Databricks job's
or a delta-spark user's has (its jars on ``spark.jars``, Delta's SQL extension and
catalog), so a MERGE into a table delta-rs refuses (row tracking, in-commit timestamps)
is delta-spark's. The fail points (``SPARK_CHKPT_KILL_AT``) kill the whole job, as
``kill -9`` of a driver would; run again, it goes on from its checkpoint.
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_chkpt
from spark_chkpt import DeltaUpsert

servers, topic, table, checkpoint, schema, max_offsets = sys.argv[1:7]
builder = (
    SparkSession.builder.master("local[2]")
    .appName("upsert-job")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
)
if "--delta-spark" in sys.argv[7:]:
    # delta-spark's setup (its quickstart), with the jars `make setup` fetched in place
    # of spark.jars.packages (no download)
    from spark_chkpt.runtime.jars import spark_jars

    builder = (
        builder.config("spark.jars", spark_jars())
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        # delta-spark replays a table's log in 50 tasks by default; two cores here
        .config("spark.databricks.delta.snapshotPartitions", "2")
    )
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
spark_chkpt.register(spark)

rows = (
    spark.readStream.format("chkpt-kafka")
    .option("kafka.bootstrap.servers", servers)
    .option("subscribe", topic)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", max_offsets)
    .load()
    .select(F.from_json(F.col("value").cast("string"), schema).alias("r"))
    .select("r.*")
)
query = (
    rows.writeStream.foreachBatch(
        DeltaUpsert(path=table, keys=["id"], checkpoint_location=checkpoint)
    )
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
print(f"done {len(query.recentProgress)} batches", flush=True)
