"""``spark-chkpt broker``: the embedded broker in the foreground."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any


def run(args: argparse.Namespace) -> int:
    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.testing.embedded_broker import EmbeddedBroker

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with EmbeddedBroker(host=args.host, port=args.port) as broker:
        for spec in args.topic:
            name, _, parts = spec.partition(":")
            create_topic(
                bootstrap_servers=broker.bootstrap_servers,
                name=name,
                partitions=int(parts or 1),
                exist_ok=True,
            )
        print(broker.bootstrap_servers, flush=True)
        print(
            f"# embedded Kafka-protocol broker (in memory); log: {broker.log_path}; "
            "Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
    return 0


def add_parser(sub: Any) -> None:
    broker = sub.add_parser(
        "broker", help="run the embedded broker in the foreground and print its bootstrap address"
    )
    broker.add_argument("--host", default="127.0.0.1")
    broker.add_argument("--port", type=int, default=None, help="default: a free port")
    broker.add_argument(
        "--topic",
        action="append",
        default=[],
        help="create NAME[:PARTITIONS] once the broker is up (repeatable)",
    )
    broker.set_defaults(run=run)
