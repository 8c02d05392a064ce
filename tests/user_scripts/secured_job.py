"""A user's script on a secured Kafka cluster (SASL_SSL): one or more queries, one after
another, each Kafka → Delta or Kafka → Kafka with Trigger.AvailableNow, with the
cluster's ``kafka.*`` options (credentials included) taken from the environment variable
``JOBS`` (JSON), as a deployment passes secrets:

    JOBS='[{"name": "n", "source": "topic", "sink": "delta", "options": {...}}, ...]' \
        python secured_job.py WORKDIR

A job of ``"sink": "kafka"`` also names ``"out"`` and ``"delivery"``;
``"maxOffsetsPerTrigger"`` and ``"sourceOptions"`` (the source's own) are optional. A job
of ``"formats": "spark"`` (Kafka → Delta only) runs on Spark's own ``kafka`` source and
delta-spark's ``delta`` sink, as before a move to the chkpt formats (``spark-chkpt
migrate``); the session then has their jars. Job ``n`` keeps its checkpoint in
``WORKDIR/n/chk`` and its table in ``WORKDIR/n/table``. Each job's part of stderr is
framed by ``=== begin n`` and ``=== end n`` lines, so a test can find the first line a
user sees of each failure; a failed job does not stop the next. Prints ``{"job": n, "ok":
..., "took": ...}`` per job and ``done`` when every job ended well (exit 0; else exit 1).
Logs at INFO into ``WORKDIR/logs`` and Spark's event log into ``WORKDIR/events-log``, so a
test can look for the secrets in them.
"""

import json
import logging
import os
import sys
import time

from pyspark.sql import SparkSession

import spark_chkpt

workdir = sys.argv[1]
jobs = json.loads(os.environ["JOBS"])
os.makedirs(f"{workdir}/logs", exist_ok=True)
os.makedirs(f"{workdir}/events-log", exist_ok=True)
logging.basicConfig(filename=f"{workdir}/logs/job-{os.getpid()}.log", level=logging.INFO)

builder = SparkSession.builder
if any(job.get("formats") == "spark" for job in jobs):
    from spark_chkpt.session import connector_settings

    for key, value in connector_settings().items():
        builder = builder.config(key, value)
spark = (
    builder.master("local[2]")
    .appName("secured-job")
    .config("spark.eventLog.enabled", "true")
    .config("spark.eventLog.dir", f"{workdir}/events-log")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark_chkpt.register(spark)


def run(job):
    options = job["options"]
    base = f"{workdir}/{job['name']}"
    native = job.get("formats") == "spark"
    source = "kafka" if native else "chkpt-kafka"
    reader = spark.readStream.format(source).option("startingOffsets", "earliest")
    for name, value in options.items():
        reader = reader.option(name, value)
    for name, value in job.get("sourceOptions", {}).items():
        reader = reader.option(name, value)
    if "maxOffsetsPerTrigger" in job:
        reader = reader.option("maxOffsetsPerTrigger", str(job["maxOffsetsPerTrigger"]))
    events = reader.option("subscribe", job["source"]).load()
    if job["sink"] == "delta":
        writer = (
            events.selectExpr("CAST(value AS STRING) AS json", "topic", "partition", "offset")
            .writeStream.format("delta" if native else "chkpt-delta")
            .option("path", f"{base}/table")
        )
    else:
        writer = events.selectExpr("key", "value").writeStream.format("chkpt-kafka")
        for name, value in options.items():
            writer = writer.option(name, value)
        writer = writer.option("topic", job["out"]).option("delivery", job["delivery"])
    query = writer.option("checkpointLocation", f"{base}/chk").trigger(availableNow=True).start()
    query.awaitTermination()
    with open(f"{workdir}/logs/progress-{job['name']}.json", "w") as progress:
        progress.write(json.dumps(query.lastProgress, default=str))


failed = 0
for job in jobs:
    print(f"=== begin {job['name']}", file=sys.stderr, flush=True)
    began = time.monotonic()
    try:
        run(job)
        ok = True
    except Exception as e:
        ok = False
        failed += 1
        print(f"{type(e).__name__}: {str(e)[:2000]}", file=sys.stderr, flush=True)
    took = time.monotonic() - began
    time.sleep(1)  # the JVM's report of a failure is written before the frame closes
    print(f"=== end {job['name']}", file=sys.stderr, flush=True)
    print(json.dumps({"job": job["name"], "ok": ok, "took": took}), flush=True)
if failed:
    sys.exit(1)
print("done", flush=True)
