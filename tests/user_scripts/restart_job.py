"""A user's own job under a restart strategy, written from the docs' restart section.

    python restart_job.py WORKDIR --sink foreach|delta [--fail-times N] [--set KEY=VALUE]...

Reads two small JSON files (one batch each, Trigger.AvailableNow) and writes them with
``foreachBatch`` (which fails the first N times, counted in a marker file: a sink that
fails transiently) or with ``chkpt-delta``. ``spark_chkpt.run_supervised`` restarts the
query from its checkpoint per the ``--set`` restart settings; the script prints
``rows <n>`` and exits with the supervisor's code.
"""

import argparse
import json
import logging
import sys
from pathlib import Path

from pyspark.sql import SparkSession

import spark_chkpt

parser = argparse.ArgumentParser()
parser.add_argument("workdir", type=Path)
parser.add_argument("--sink", choices=("foreach", "delta"), default="foreach")
parser.add_argument("--fail-times", type=int, default=0)
parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
args = parser.parse_args()
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

work: Path = args.workdir
(work / "in").mkdir(parents=True, exist_ok=True)
for i in range(2):
    (work / "in" / f"part-{i}.json").write_text(json.dumps({"id": i}) + "\n")
marker, counted = work / "failures", work / "rows"

spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.sql.shuffle.partitions", "1")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark_chkpt.register(spark)


def write(batch, batch_id):  # the user's foreachBatch function
    failures = int(marker.read_text()) if marker.exists() else 0
    if failures < args.fail_times:
        marker.write_text(str(failures + 1))
        raise RuntimeError(f"sink unavailable (failure {failures + 1} of {args.fail_times})")
    with counted.open("a") as out:
        out.write(f"{batch_id} {batch.count()}\n")


def start():  # builds the query again at each restart, on the same checkpoint
    events = (
        spark.readStream.format("json")
        .schema("id long")
        .option("maxFilesPerTrigger", 1)
        .load(str(work / "in"))
    )
    if args.sink == "foreach":
        writer = events.writeStream.foreachBatch(write)
    else:
        writer = events.writeStream.format("chkpt-delta").option("path", str(work / "table"))
    return (
        writer.option("checkpointLocation", str(work / "chk"))
        .queryName("restart-job")
        .trigger(availableNow=True)
        .start()
    )


settings = dict(item.split("=", 1) for item in args.set)
code = spark_chkpt.run_supervised(start=start, strategy=settings)
if counted.exists():
    rows = sum(int(line.split()[1]) for line in counted.read_text().splitlines())
    print(f"rows {rows}", flush=True)
sys.exit(code)
