"""``spark-chkpt s3``: the project's S3-compatible test server (s3proxy) in the foreground."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any


def run(args: argparse.Namespace) -> int:
    from spark_chkpt.testing.s3_server import S3Proxy

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with S3Proxy(host=args.host, port=args.port, backend=args.backend) as server:
        for bucket in args.bucket:
            server.create_bucket(bucket)
        print(server.endpoint, flush=True)
        settings = [
            *(f"storage.{k}={v}" for k, v in server.storage_options.items()),
            *(f"{k}={v}" for k, v in server.hadoop_settings().items()),
            *(f"export {k}={v}" for k, v in server.env.items() if "CHECKSUM" in k),
        ]
        print(
            f"# s3proxy ({args.backend} backend); log: {server.log_path}; Ctrl-C stops it\n"
            + "\n".join(f"# {line}" for line in settings),
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
    return 0


def add_parser(sub: Any) -> None:
    s3 = sub.add_parser(
        "s3", help="run the S3-compatible test server (s3proxy) and print its endpoint"
    )
    s3.add_argument("--host", default="127.0.0.1")
    s3.add_argument("--port", type=int, default=None, help="default: a free port")
    s3.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
    s3.add_argument(
        "--backend",
        default="transient",
        choices=["transient", "filesystem"],
        help="objects in memory (default) or in a temporary folder",
    )
    s3.set_defaults(run=run)
