"""A user's job: chkpt-kafka's records into the plugin's ``chkpt-jsonl`` folder, once
with ``Trigger.AvailableNow`` (run by the chains as a driver in its own session)."""

from __future__ import annotations

import argparse

from spark_chkpt.session import build_session


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap-servers", "--topic", "--path", "--checkpoint"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets-per-trigger", default="100")
    args = parser.parse_args()
    spark = build_session(app_name="chkpt-jsonl-job", master="local[2]")  # registers it
    query = (
        spark.readStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        .load()
        .selectExpr("CAST(value AS STRING) AS id", "partition", "offset")
        .writeStream.format("chkpt-jsonl")
        .option("path", args.path)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
