"""Quix Streams exactly-once on the benchmark's topic, for comparison (optional).

    <python with quixstreams> bench/quix.py --servers HOST:PORT --topic bench --records N

Standalone: it imports only Quix Streams and the standard library, so it runs under any
interpreter that has ``quixstreams`` (``pip install 'spark-chkpt[bench]'``, or a venv of
its own: Quix pins confluent-kafka below 2.13). The app reads the topic from the
beginning with ``processing_guarantee="exactly-once"`` (Kafka transactions), parses each
JSON value, and writes it to a new topic: the same work as the Kafka → Kafka run. It
prints one JSON line: the records processed, the seconds from the app's start to the
end of ``app.run``, and that time split by the app's own callback (its first and last
record): ``startup_s`` (the app's start-up, the consumer group's join and the first
fetch, to the first record), ``steady_s`` (first to last record: the steady rate,
commits of ``--commit-interval`` included) and ``close_s`` (the last record to the end:
the last transaction's commit and the close).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/quix.py")
    parser.add_argument("--servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--commit-interval", type=float, default=5.0, help="Quix's commit_interval (seconds)"
    )
    args = parser.parse_args(argv)

    from quixstreams import Application

    run_id = uuid.uuid4().hex[:8]
    app = Application(
        broker_address=args.servers,
        consumer_group=f"bench-quix-{run_id}",
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        loglevel="WARNING",
        use_changelog_topics=False,
        commit_interval=args.commit_interval,
    )
    source = app.topic(args.topic, value_deserializer="json")
    target = app.topic(f"{args.topic}-quix-{run_id}", value_serializer="json")
    counted = {"rows": 0, "first": 0.0, "last": 0.0}

    def seen(value: dict) -> dict:
        counted["rows"] += 1
        counted["last"] = time.monotonic()
        if counted["rows"] == 1:
            counted["first"] = counted["last"]
        return value

    sdf = app.dataframe(source).apply(seen)
    sdf.to_topic(target)
    started = time.monotonic()
    app.run(count=args.records, timeout=args.timeout, collect=False)
    ended = time.monotonic()
    rows, first, last = counted["rows"], counted["first"], counted["last"]
    steady = last - first
    print(
        json.dumps(
            {
                "rows": rows,
                "seconds": ended - started,
                "startup_s": first - started,
                "steady_s": steady,
                "close_s": ended - last,
                "steady_rps": (rows - 1) / steady if steady > 0 else None,
                "commit_interval": args.commit_interval,
            }
        ),
        flush=True,
    )
    return 0 if counted["rows"] >= args.records else 1


if __name__ == "__main__":
    raise SystemExit(main())
