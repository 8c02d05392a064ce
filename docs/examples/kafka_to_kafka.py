"""Kafka -> Spark -> Kafka -> Spark -> Delta, exactly once between the two queries.

    BOOTSTRAP_SERVERS=host:9092 TOPIC=page-views WORK=/tmp/chkpt python kafka_to_kafka.py

Job A reads TOPIC and writes ``<TOPIC>-enriched`` with the ``chkpt-kafka`` sink, which
puts a barrier into every partition at each snapshot. Like Spark's Kafka sink, it does not
create its topic: the script creates it first, as a deployment would (a broker with
``auto.create.topics.enable=false`` refuses the query otherwise, naming the topic).
Job B reads that topic with the ``chkpt-kafka`` source, aligned on the barriers (the
default), and writes Delta. Here both run in one script, one after the other; in
production they are two jobs.
"""

import contextlib
import os

from deltalake import DeltaTable
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError
from pyspark.sql import SparkSession

import spark_chkpt

SERVERS = os.environ.get("BOOTSTRAP_SERVERS", "localhost:9092")
TOPIC = os.environ.get("TOPIC", "page-views")
WORK = os.environ.get("WORK", "/tmp/spark-chkpt-examples")
ENRICHED = f"{TOPIC}-enriched"

admin = KafkaAdminClient(bootstrap_servers=SERVERS)
with contextlib.suppress(TopicAlreadyExistsError):  # a second run of the script
    # -1: the cluster's default.replication.factor (Kafka 2.4+), as the sink's control topic
    admin.create_topics([NewTopic(ENRICHED, num_partitions=2, replication_factor=-1)])
admin.close()

spark = SparkSession.builder.master("local[2]").appName("kafka-to-kafka").getOrCreate()
spark_chkpt.register(spark)

# --8<-- [start:job-a]
views = (
    spark.readStream.format("chkpt-kafka")
    .option("kafka.bootstrap.servers", SERVERS)
    .option("subscribe", TOPIC)
    .option("startingOffsets", "earliest")
    .load()
)
stage_a = (
    views.selectExpr("key", "upper(CAST(value AS STRING)) AS value")  # Spark's Kafka sink
    .writeStream.format("chkpt-kafka")  # columns: key, value, topic, partition, headers
    .option("kafka.bootstrap.servers", SERVERS)
    .option("topic", ENRICHED)
    .option("checkpointLocation", f"{WORK}/chk/stage-a")
    .trigger(availableNow=True)
    .start()
)
# --8<-- [end:job-a]
stage_a.awaitTermination()

# --8<-- [start:job-b]
enriched = (
    spark.readStream.format("chkpt-kafka")  # job B: nothing to change, aligned
    .option("kafka.bootstrap.servers", SERVERS)  # is the default
    .option("subscribe", ENRICHED)
    .option("startingOffsets", "earliest")
    .load()
)
stage_b = (
    enriched.selectExpr("CAST(value AS STRING) AS json", "partition", "offset")
    .writeStream.format("chkpt-delta")
    .option("path", f"{WORK}/tables/enriched")
    .option("checkpointLocation", f"{WORK}/chk/stage-b")
    .trigger(availableNow=True)
    .start()
)
# --8<-- [end:job-b]
stage_b.awaitTermination()

rows = DeltaTable(f"{WORK}/tables/enriched").to_pyarrow_table().column("json").to_pylist()
print(f"rows {len(rows)} unique {len(set(rows))}")
