"""A user's job with a mistake in it: the README's Kafka → Delta job, Trigger.AvailableNow,
with the reader's options given on the command line.

    python mistakes_job.py WORKDIR NAME=VALUE...

Each NAME=VALUE is one ``.option()`` of the ``chkpt-kafka`` reader, spelled as given (a
misspelled name, a topic that does not exist). Prints ``rows <n>`` if the query ends.
"""

import sys

from deltalake import DeltaTable
from pyspark.sql import SparkSession

import spark_chkpt

workdir, pairs = sys.argv[1], sys.argv[2:]

spark = SparkSession.builder.master("local[2]").appName("mistakes-job").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
spark_chkpt.register(spark)

reader = spark.readStream.format("chkpt-kafka").option("startingOffsets", "earliest")
for pair in pairs:
    name, _, value = pair.partition("=")
    reader = reader.option(name, value)
events = reader.load()
query = (
    events.selectExpr("CAST(value AS STRING) AS json", "topic", "partition", "offset")
    .writeStream.format("chkpt-delta")
    .option("path", f"{workdir}/events")
    .option("checkpointLocation", f"{workdir}/chk")
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
print(f"rows {DeltaTable(f'{workdir}/events').to_pyarrow_table().num_rows}", flush=True)
