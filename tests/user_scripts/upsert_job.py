"""A user's upsert job: chkpt-kafka → foreachBatch(DeltaUpsert) by key, Trigger.AvailableNow.

    python upsert_job.py SERVERS TOPIC TABLE CHECKPOINT SCHEMA MAX_OFFSETS

Each record's value is JSON of SCHEMA (Spark DDL); a true ``_delete`` deletes the row
with its ``id``. The fail points (``SPARK_CHKPT_KILL_AT``) kill the whole job, as
``kill -9`` of a driver would; run again, it goes on from its checkpoint.
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_chkpt
from spark_chkpt import DeltaUpsert

servers, topic, table, checkpoint, schema, max_offsets = sys.argv[1:7]
spark = (
    SparkSession.builder.master("local[2]")
    .appName("upsert-job")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
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
