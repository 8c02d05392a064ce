"""A user's own job, written from the README's Usage section only.

    python usage_job.py SERVERS TOPIC WORKDIR [--master M] [--stop]

Reads TOPIC with chkpt-kafka, writes it to a Delta table under WORKDIR with
chkpt-delta (Trigger.AvailableNow), reads the table back with deltalake and prints
``rows <n> ids <unique>``. Without ``--stop`` the script simply ends, as scripts do.
"""

import argparse

from deltalake import DeltaTable
from pyspark.sql import SparkSession

import spark_chkpt
from spark_chkpt.metrics import LagReporter

parser = argparse.ArgumentParser()
parser.add_argument("servers")
parser.add_argument("topic")
parser.add_argument("workdir")
parser.add_argument("--master", default="local[2]")
parser.add_argument("--stop", action="store_true")
args = parser.parse_args()

spark = SparkSession.builder.master(args.master).appName("usage-job").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
spark_chkpt.register(spark)  # registers every format of the project
LagReporter.attach(spark)  # a line per batch with the lag

events = (
    spark.readStream.format("chkpt-kafka")
    .option("kafka.bootstrap.servers", args.servers)
    .option("subscribe", args.topic)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "100000")
    .load()
)
query = (
    events.selectExpr("CAST(value AS STRING) AS json", "topic", "partition", "offset")
    .writeStream.format("chkpt-delta")
    .option("path", f"{args.workdir}/events")
    .option("checkpointLocation", f"{args.workdir}/chk")
    .option("partitionBy", "topic")
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()

table = DeltaTable(f"{args.workdir}/events").to_pyarrow_table()
partitions, offsets = table.column("partition").to_pylist(), table.column("offset").to_pylist()
keys = set(zip(partitions, offsets, strict=True))
print(f"rows {table.num_rows} ids {len(keys)}", flush=True)
if args.stop:
    spark.stop()
