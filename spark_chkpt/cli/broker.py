"""``spark-chkpt broker [--kafka]``: an embedded broker (Tansu, or Apache Kafka) in the
foreground."""

from __future__ import annotations

import argparse
from typing import Any

from spark_chkpt.cli.commands import add_listen, command, serve


def run(args: argparse.Namespace) -> int:
    """run the embedded broker in the foreground and print its bootstrap address"""
    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.testing.embedded_broker import EmbeddedBroker
    from spark_chkpt.testing.kafka_broker import EmbeddedKafka

    if args.data_dir and not args.kafka:
        print("spark-chkpt broker: --data-dir needs --kafka (Tansu keeps topics in memory)")
        return 2
    broker: EmbeddedKafka | EmbeddedBroker = (
        EmbeddedKafka(host=args.host, port=args.port, data_dir=args.data_dir)
        if args.kafka
        else EmbeddedBroker(host=args.host, port=args.port)
    )
    kind = (
        f"Apache Kafka (KRaft), data in {broker.data_dir}"
        if isinstance(broker, EmbeddedKafka)
        else "Kafka-protocol broker Tansu (in memory)"
    )

    def ready() -> tuple[str, str]:
        for spec in args.topic:
            name, _, parts = spec.partition(":")
            create_topic(
                bootstrap_servers=broker.bootstrap_servers,
                name=name,
                partitions=int(parts or 1),
                exist_ok=True,
            )
        return broker.bootstrap_servers, (
            f"# embedded {kind}; log: {broker.log_path}; Ctrl-C stops it"
        )

    return serve(broker, ready=ready)


def add_parser(sub: Any) -> None:
    broker = command(sub, "broker", run=run)
    add_listen(broker)
    broker.add_argument(
        "--kafka",
        action="store_true",
        help="run the real Apache Kafka broker (jars from `make setup`) instead of Tansu",
    )
    broker.add_argument(
        "--data-dir", default=None, help="with --kafka: keep the storage here (default: a temp dir)"
    )
    broker.add_argument(
        "--topic",
        action="append",
        default=[],
        help="create NAME[:PARTITIONS] once the broker is up (repeatable)",
    )
