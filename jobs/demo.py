"""The demo: page-view events through the chkpt-kafka source on an embedded broker.

    make demo        # or: python -m spark_chkpt.jobs.demo [--events N] [--partitions P]

Starts the embedded broker, writes the seeds' example (per-app page-view log events),
reads them back with ``Trigger.AvailableNow`` in micro-batches bounded by
``maxOffsetsPerTrigger``, and prints what a user checks: rows, unique ids, the offsets
Spark logged, and page views per app.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="spark-chkpt demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=6_000)
    parser.add_argument("--workdir", default=None, help="default: a new temporary folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from spark_chkpt.broker import EmbeddedBroker
    from spark_chkpt.generator import PAGE_VIEW_SCHEMA_DDL, produce_page_views
    from spark_chkpt.session import build_session
    from spark_chkpt.topics import create_topic

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spark-chkpt-demo-"))
    topic = "page-views"
    with EmbeddedBroker() as broker:
        print(f"[demo] embedded broker at {broker.bootstrap_servers}")
        create_topic(
            bootstrap_servers=broker.bootstrap_servers, name=topic, partitions=args.partitions
        )
        started = time.monotonic()
        produce_page_views(
            bootstrap_servers=broker.bootstrap_servers, topic=topic, first=0, count=args.events
        )
        print(
            f"[demo] wrote {args.events} page-view events to {topic} "
            f"({args.partitions} partitions) in {time.monotonic() - started:.1f}s"
        )

        spark = build_session(
            app_name="spark-chkpt-demo",
            master="local[2]",
            conf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        events = (
            spark.readStream.format("chkpt-kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
            .load()
            .selectExpr(
                f"from_json(CAST(value AS STRING), '{PAGE_VIEW_SCHEMA_DDL}') AS e",
                "partition",
                "offset",
            )
            .select("e.*", "partition", "offset")
        )
        checkpoint = workdir / "checkpoint"
        query = (
            events.writeStream.format("memory")
            .queryName("page_views")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        for progress in query.recentProgress:
            print(
                f"[demo] batch {progress['batchId']}: {progress['numInputRows']} rows, "
                f"offsets -> {progress['sources'][0]['endOffset']}"
            )
        rows, unique = spark.sql(
            "SELECT count(*), count(DISTINCT event_id) FROM page_views"
        ).first()  # type: ignore[misc]
        print("[demo] page views per app:")
        for row in spark.sql(
            "SELECT app, count(*) AS pv FROM page_views GROUP BY app ORDER BY app"
        ).collect():
            print(f"         {row.app}: {row.pv}")
        last = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
        logged = json.loads((checkpoint / "offsets" / str(last)).read_text().splitlines()[-1])
        print(f"[demo] offsets in Spark's log (batch {last}): {json.dumps(logged)}")
        ok = rows == unique == args.events
        print(
            f"[demo] rows read: {rows}, unique event ids: {unique}, written: {args.events}"
            f" -> every event exactly once: {'yes' if ok else 'NO'}"
        )
        spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
