"""``spark-chkpt s3``: the project's S3-compatible test server (moto) in the foreground."""

from __future__ import annotations

import argparse
from typing import Any

from spark_chkpt.cli.commands import add_listen, command, serve


def run(args: argparse.Namespace) -> int:
    """run the S3-compatible test server (moto) and print its endpoint"""
    from spark_chkpt.testing.s3_server import S3Server

    server = S3Server(host=args.host, port=args.port)

    def ready() -> tuple[str, str]:
        for bucket in args.bucket:
            server.create_bucket(bucket)
        settings = [
            *(f"storage.{k}={v}" for k, v in server.storage_options.items()),
            *(f"{k}={v}" for k, v in server.hadoop_settings().items()),
        ]
        return server.endpoint, (
            f"# moto's S3 server, objects in memory; log: {server.log_path}; Ctrl-C stops it\n"
            + "\n".join(f"# {line}" for line in settings)
        )

    return serve(server, ready=ready)


def add_parser(sub: Any) -> None:
    s3 = command(sub, "s3", run=run)
    add_listen(s3)
    s3.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
