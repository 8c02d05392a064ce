"""A user's script on object storage: every table on ``s3://`` (delta-rs, ``storage.*``),
every checkpoint and savepoint on ``s3a://`` (hadoop-aws), one SparkSession, one topic.

    python s3_chain.py CONFIG_JSON

CONFIG_JSON: ``servers``, ``topic``, ``bucket``, ``storage`` (delta-rs's options),
``hadoop`` (the ``spark.hadoop.fs.s3a.*`` settings). In order:

1. part 0 of the topic (30 records, every tenth malformed) into ``table`` through the
   Kafka → Delta job, malformed records to the dead-letter table ``dead``; a savepoint;
2. part 1 into ``table`` on the same checkpoint;
3. rewind to the savepoint (a new checkpoint, the table and ``dead`` rolled back), run;
4. fork from the savepoint into ``fork`` / ``fork-dead``, run;
5. ``spark-chkpt recover`` of a checkpoint from ``table`` alone, part 2, run on it;
6. ``DeltaUpsert`` of the counts per ``id % 4`` over the whole topic into ``upsert``.

Prints ``STEP <name>`` after each step and, last, ``RESULT=<json>``: each table read
back with delta-spark on ``s3a://``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from kafka import KafkaProducer

from spark_chkpt import DeltaUpsert
from spark_chkpt.jobs import kafka_to_delta
from spark_chkpt.savepoint.manifest import create_savepoint
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.session import build_session

config = json.loads(sys.argv[1])
servers, topic, bucket = config["servers"], config["topic"], config["bucket"]
storage = config["storage"]
PART = 30
s3, s3a = f"s3://{bucket}", f"s3a://{bucket}"

spark = build_session(
    app_name="s3-chain",
    master="local[2]",
    connectors=True,
    s3a=True,
    conf={
        **config["hadoop"],
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.databricks.delta.snapshotPartitions": "1",
    },
)
spark.sparkContext.setLogLevel("ERROR")


def produce(part: int) -> None:
    producer = KafkaProducer(bootstrap_servers=servers)
    for i in range(part * PART, (part + 1) * PART):
        value = b"bad %d" % i if i % 10 == 3 else json.dumps({"id": i}).encode()
        producer.send(topic, key=b"k%d" % i, value=value)
    producer.flush()
    producer.close()


def run(table: str, checkpoint: str, dead: str) -> None:
    settings = {
        "source.kafka.bootstrap.servers": servers,
        "source.subscribe": topic,
        "source.startingOffsets": "earliest",
        "source.maxOffsetsPerTrigger": "20",
        "sink.path": table,
        "sink.deadLetterPath": dead,
        "sink.checkpointLocation": checkpoint,
        "job.schema": "id long",
        "job.trigger": "availableNow",
        "job.queryName": "s3_chain",
        "job.badRecords": "deadLetter",
        **{f"sink.storage.{k}": v for k, v in storage.items()},
    }
    query = kafka_to_delta.start(spark, settings)
    query.awaitTermination()


def step(name: str) -> None:
    print(f"STEP {name}", flush=True)


produce(0)
run(f"{s3}/table", f"{s3a}/chk", f"{s3}/dead")
savepoint = create_savepoint(checkpoint_location=f"{s3a}/chk", savepoint_dir=f"{s3a}/savepoints")
step(f"savepoint {savepoint.manifest.batch_id}")

produce(1)
run(f"{s3}/table", f"{s3a}/chk", f"{s3}/dead")
step("part 1")

restore_savepoint(
    savepoint=savepoint.location,
    checkpoint_location=f"{s3a}/chk-rewound",
    mode="rewind",
    storage_options=storage,
)
run(f"{s3}/table", f"{s3a}/chk-rewound", f"{s3}/dead")
step("rewind")

restore_savepoint(
    savepoint=savepoint.location,
    checkpoint_location=f"{s3a}/chk-fork",
    mode="fork",
    table=f"{s3}/fork",
    dead_letter_table=f"{s3}/fork-dead",
)
run(f"{s3}/fork", f"{s3a}/chk-fork", f"{s3}/fork-dead")
step("fork")

# `spark-chkpt recover` as from a shell: it takes the store's settings from the AWS
# environment (the storage options' names are the variables delta-rs and pyarrow read).
recovered = subprocess.run(
    [str(Path(sys.executable).with_name("spark-chkpt")), "recover",
     "--table", f"{s3}/table", "--checkpoint", f"{s3a}/chk-recovered"],
    env={**os.environ, **storage}, capture_output=True, text=True, check=True,
)  # fmt: skip
step(f"recover: {recovered.stdout.strip()}")
produce(2)
run(f"{s3}/table", f"{s3a}/chk-recovered", f"{s3}/dead")
step("part 2")

counts = (
    spark.readStream.format("chkpt-kafka")
    .option("kafka.bootstrap.servers", servers)
    .option("subscribe", topic)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "40")
    .load()
    .selectExpr("from_json(CAST(value AS STRING), 'id long').id AS id")
    .where("id IS NOT NULL")
    .selectExpr("id % 4 AS bucket")
    .groupBy("bucket")
    .count()
)
upsert = DeltaUpsert(
    path=f"{s3}/upsert",
    keys=["bucket"],
    checkpoint_location=f"{s3a}/chk-upsert",
    storage_options=storage,
)
query = (
    counts.writeStream.outputMode("update")
    .foreachBatch(upsert)
    .option("checkpointLocation", f"{s3a}/chk-upsert")
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
step("upsert")


def rows(name: str, *columns: str) -> list:
    found = spark.read.format("delta").load(f"{s3a}/{name}").select(*columns).collect()
    return sorted(list(r) if len(columns) > 1 else r[0] for r in found)


result = {
    "table": rows("table", "id"),
    "dead": rows("dead", "offset"),
    "fork": rows("fork", "id"),
    "fork_dead": rows("fork-dead", "offset"),
    "upsert": rows("upsert", "bucket", "count"),
}
print("RESULT=" + json.dumps(result), flush=True)
spark.stop()
