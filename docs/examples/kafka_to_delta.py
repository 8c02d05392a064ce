"""Kafka -> Spark -> Delta, exactly once.

    BOOTSTRAP_SERVERS=host:9092 TOPIC=page-views WORK=/tmp/chkpt python kafka_to_delta.py

Reads TOPIC with ``chkpt-kafka``, appends it to a Delta table with ``chkpt-delta``
(Trigger.AvailableNow: what is in the topic now, then stop), prints the
snapshot records, then reads the table back with deltalake (no Spark).
"""

import os

from deltalake import DeltaTable
from pyspark.sql import SparkSession

import spark_chkpt
from spark_chkpt.metrics import SnapshotReporter, source_lags, store_records

SERVERS = os.environ.get("BOOTSTRAP_SERVERS", "localhost:9092")
TOPIC = os.environ.get("TOPIC", "page-views")
WORK = os.environ.get("WORK", "/tmp/spark-chkpt-examples")

# --8<-- [start:read]
spark = SparkSession.builder.master("local[2]").appName("kafka-to-delta").getOrCreate()
spark_chkpt.register(spark)  # registers every format of the project

events = (
    spark.readStream.format("chkpt-kafka")  # was: format("kafka")
    .option("kafka.bootstrap.servers", SERVERS)
    .option("subscribe", TOPIC)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "100000")
    .option("kafka.group.id", "events-to-delta")  # optional: lag tools see progress
    .load()
)
# --8<-- [end:read]

# --8<-- [start:write]
reporter = SnapshotReporter.attach(spark)  # prints each snapshot with the sources' lag
query = (
    events.selectExpr("CAST(value AS STRING) AS json", "topic", "partition", "offset")
    .writeStream.format("chkpt-delta")  # was: format("delta")
    .option("path", f"{WORK}/tables/events")  # local, s3://, abfss://, gs://, /Volumes/...
    .option("checkpointLocation", f"{WORK}/chk/events")
    .option("partitionBy", "topic")
    .trigger(availableNow=True)  # leave the trigger out to run on as new records come
    .start()
)
reporter.track(query, checkpoint_location=f"{WORK}/chk/events")
query.awaitTermination()
# --8<-- [end:write]

# --8<-- [start:lag]
for lag in source_lags(query.lastProgress):  # offsets behind the latest, per source
    print(f"lag {lag.source}: max {lag.max}, per partition {dict(lag.partitions)}")
# --8<-- [end:lag]

# --8<-- [start:records]
for record in store_records(checkpoint_location=f"{WORK}/chk/events"):
    print(f"snapshot {record.batch_id}: {record.rows} rows, {record.outcome}")
# --8<-- [end:records]

table = DeltaTable(f"{WORK}/tables/events").to_pyarrow_table()
ids = set(
    zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
)
print(f"rows {table.num_rows} unique {len(ids)}")
