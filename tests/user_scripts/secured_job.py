"""A user's job on a secured Kafka cluster (SASL_SSL): Kafka → Delta or Kafka → Kafka,
Trigger.AvailableNow, with the cluster's ``kafka.*`` options (credentials included) taken
from the environment variable ``KAFKA_OPTIONS`` (JSON), as a deployment passes secrets.

    KAFKA_OPTIONS='{...}' python secured_job.py WORKDIR SOURCE_TOPIC delta
    KAFKA_OPTIONS='{...}' python secured_job.py WORKDIR SOURCE_TOPIC kafka OUT DELIVERY

Prints ``done`` when the query ends. Logs at INFO into ``WORKDIR/logs`` and Spark's event
log into ``WORKDIR/events-log``, so a test can look for the secrets in them.
"""

import json
import logging
import os
import sys

from pyspark.sql import SparkSession

import spark_chkpt

workdir, source, mode = sys.argv[1], sys.argv[2], sys.argv[3]
options = json.loads(os.environ["KAFKA_OPTIONS"])
os.makedirs(f"{workdir}/logs", exist_ok=True)
os.makedirs(f"{workdir}/events-log", exist_ok=True)
logging.basicConfig(filename=f"{workdir}/logs/job.log", level=logging.INFO)

spark = (
    SparkSession.builder.master("local[2]")
    .appName("secured-job")
    .config("spark.eventLog.enabled", "true")
    .config("spark.eventLog.dir", f"{workdir}/events-log")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark_chkpt.register(spark)

reader = spark.readStream.format("chkpt-kafka").option("startingOffsets", "earliest")
for name, value in options.items():
    reader = reader.option(name, value)
events = reader.option("subscribe", source).load()
if mode == "delta":
    writer = (
        events.selectExpr("CAST(value AS STRING) AS json", "topic", "partition", "offset")
        .writeStream.format("chkpt-delta")
        .option("path", f"{workdir}/table")
    )
else:
    out, delivery = sys.argv[4], sys.argv[5]
    writer = events.selectExpr("key", "value").writeStream.format("chkpt-kafka")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer = writer.option("topic", out).option("delivery", delivery)
query = writer.option("checkpointLocation", f"{workdir}/chk").trigger(availableNow=True).start()
query.awaitTermination()
with open(f"{workdir}/logs/progress.json", "w") as progress:
    progress.write(json.dumps(query.lastProgress, default=str))
print("done", flush=True)
