"""Quix Streams exactly-once on the benchmark's topic, for comparison (optional).

    <python with quixstreams> bench/quix.py --servers HOST:PORT --topic bench --records N

Standalone: it imports only Quix Streams and the standard library, so it runs under any
interpreter that has ``quixstreams`` (``pip install 'spark-chkpt[bench]'``, or a venv of
its own: Quix pins confluent-kafka below 2.13). The app reads the topic from the
beginning with ``processing_guarantee="exactly-once"`` (Kafka transactions), parses each
JSON value, and writes it to a new topic: the same work as the Kafka → Kafka run. It
prints one JSON line: the records processed and the seconds from the app's start to
the last one.
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
    )
    source = app.topic(args.topic, value_deserializer="json")
    target = app.topic(f"{args.topic}-quix-{run_id}", value_serializer="json")
    counted = {"rows": 0, "last": 0.0}

    def seen(value: dict) -> dict:
        counted["rows"] += 1
        counted["last"] = time.monotonic()
        return value

    sdf = app.dataframe(source).apply(seen)
    sdf.to_topic(target)
    started = time.monotonic()
    app.run(count=args.records, timeout=args.timeout, collect=False)
    seconds = time.monotonic() - started
    print(json.dumps({"rows": counted["rows"], "seconds": seconds}), flush=True)
    return 0 if counted["rows"] >= args.records else 1


if __name__ == "__main__":
    raise SystemExit(main())
