"""A user's script that stops its chkpt-delta query with ``query.stop()`` while a batch
commits (the commit held there by the test's stall): it must say what happened in one
line, with no traceback (tests/chains/test_user_script.py)."""

import os
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

import spark_chkpt

servers, topic, work = sys.argv[1:4]
spark = SparkSession.builder.master("local[2]").appName("stop-mid-commit").getOrCreate()
spark_chkpt.register(spark)
query = (
    spark.readStream.format("chkpt-kafka")
    .option("kafka.bootstrap.servers", servers)
    .option("subscribe", topic)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "200")
    .load()
    .selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
    .writeStream.format("chkpt-delta")
    .option("path", f"{work}/table")
    .option("checkpointLocation", f"{work}/chk")
    .start()
)
stalled = Path(os.environ["SPARK_CHKPT_STALL_SIGNAL"])
while not stalled.exists():  # batch 1's Delta commit and record are done; Spark waits
    time.sleep(0.05)
query.stop()
print("stopped", flush=True)
spark.stop()
