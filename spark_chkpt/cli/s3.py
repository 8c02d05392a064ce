"""``spark-chkpt s3``: the project's S3-compatible test server (moto) in the foreground."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any


def run(args: argparse.Namespace) -> int:
    from spark_chkpt.testing.s3_server import S3Server

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with S3Server(host=args.host, port=args.port) as server:
        for bucket in args.bucket:
            server.create_bucket(bucket)
        print(server.endpoint, flush=True)
        settings = [
            *(f"storage.{k}={v}" for k, v in server.storage_options.items()),
            *(f"{k}={v}" for k, v in server.hadoop_settings().items()),
        ]
        print(
            f"# moto's S3 server, objects in memory; log: {server.log_path}; Ctrl-C stops it\n"
            + "\n".join(f"# {line}" for line in settings),
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
    return 0


def add_parser(sub: Any) -> None:
    s3 = sub.add_parser(
        "s3", help="run the S3-compatible test server (moto) and print its endpoint"
    )
    s3.add_argument("--host", default="127.0.0.1")
    s3.add_argument("--port", type=int, default=None, help="default: a free port")
    s3.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
    s3.set_defaults(run=run)
