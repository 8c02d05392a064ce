"""``spark-chkpt lineage``: a Delta version back to every upstream snapshot."""

from __future__ import annotations

import argparse
import os
from typing import Any

from spark_chkpt.cli.commands import add_brokers, add_json, command

ENV = "KAFKA_BOOTSTRAP_SERVERS"


def bootstrap_servers(given: str | None) -> str | None:
    """``--bootstrap-servers``, else ``$KAFKA_BOOTSTRAP_SERVERS``, else None; either one
    given but blank is refused (kafka-python would try to bootstrap from ``['']``)."""
    from spark_chkpt.errors import ChkptError

    if given is not None:
        if not given.strip():
            raise ChkptError("--bootstrap-servers is empty: give host:port[,host:port...]")
        return given
    found = os.environ.get(ENV)
    if found is not None and not found.strip():
        raise ChkptError(
            f"${ENV} is set but empty: give host:port[,host:port...] in it or with "
            f"--bootstrap-servers, or unset it to stop the walk at the table's writer"
        )
    return found


def run(args: argparse.Namespace) -> int:
    """from a Delta version to the snapshot that wrote it, its source offsets and, through
    the barriers, every upstream query's snapshot and its offsets"""
    from spark_chkpt.fs import qualify
    from spark_chkpt.lineage import trace

    lineage = trace(
        table=qualify(args.table),
        version=args.version,
        bootstrap_servers=bootstrap_servers(args.bootstrap_servers),
        upstream=[qualify(c) for c in args.upstream],
    )
    print(lineage.to_json() if args.json else lineage.to_text())
    return 0


def add_parser(sub: Any) -> None:
    lineage = command(sub, "lineage", run=run)
    lineage.add_argument("table", help="the chkpt-delta (or DeltaUpsert) table's path")
    lineage.add_argument("--version", type=int, required=True, help="the Delta version")
    add_brokers(
        lineage,
        help="the Kafka broker of the barrier topics, to follow upstream queries through "
        "their control topics (default: $KAFKA_BOOTSTRAP_SERVERS; without it the walk "
        "stops at the table's writer)",
    )
    lineage.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="CHECKPOINT",
        help="an upstream query's checkpointLocation: adds the snapshot records it holds "
        "(repeat for several queries)",
    )
    add_json(lineage)
