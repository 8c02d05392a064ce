"""An S3-compatible server on loopback: moto's S3, started by the project.

    with S3Server() as s3:
        s3.create_bucket("chkpt")
        write_deltalake("s3://chkpt/t", data, storage_options=s3.storage_options)

More: docs/concepts/runtime.md (spark_chkpt/testing/s3_server.py).
"""

from __future__ import annotations

import argparse
import functools
import logging
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import S3ServerError
from spark_chkpt.testing.processes import ServerProcess, free_port, halt, launch

log = logging.getLogger(__name__)

ACCESS_KEY = "chkpt-test-key"
SECRET_KEY = "chkpt-test-secret"
REGION = "us-east-1"


class S3Server(ServerProcess):
    """moto's S3 on ``host:port`` (a free port unless given) as a context manager."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 60.0,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = Path(tempfile.gettempdir()) / f"spark-chkpt-s3-{self.port}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def storage_options(self) -> dict[str, str]:
        """delta-rs's options (``chkpt-delta``'s ``storage.*`` without the prefix)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    @property
    def env(self) -> dict[str, str]:
        """Environment for the AWS SDKs (pyarrow, boto3): the endpoint and the key."""
        return {k: v for k, v in self.storage_options.items() if k != "AWS_ALLOW_HTTP"}

    def hadoop_settings(self) -> dict[str, str]:
        """``spark.hadoop.fs.s3a.*`` for a SparkSession that reads and writes ``s3a://``
        (path-style: the bucket in the path, as a server on an IP address needs)."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
            "spark.hadoop.fs.s3a.secret.key": SECRET_KEY,
            "spark.hadoop.fs.s3a.aws.credentials.provider": (
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
            ),
        }

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "spark_chkpt.testing.s3_server",
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]

    def start(self) -> S3Server:
        if self._process is not None:
            return self
        self.log_path.unlink(missing_ok=True)  # the request log of this server only
        self._process = launch(self.command(), log_path=self.log_path)
        try:
            self._wait_ready(Deadline.after(seconds=self.startup_timeout_s))
        except BaseException:
            self._halt()
            raise
        log.info("moto S3 ready at %s (log: %s)", self.endpoint, self.log_path)
        return self

    def client(self) -> Any:
        """A boto3 S3 client of this server (one attempt per call: no retries)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(retries={"max_attempts": 1}, max_pool_connections=16),
        )

    def _wait_ready(self, deadline: Deadline) -> None:
        import urllib.error
        import urllib.request

        while not deadline.expired():
            assert self._process is not None
            if self._process.poll() is not None:
                raise S3ServerError(
                    f"the S3 server (moto) exited with code {self._process.returncode}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1.0).close()
                return
            except urllib.error.HTTPError:
                return  # it answers
            except OSError:
                time.sleep(0.1)
        raise S3ServerError(
            f"the S3 server (moto) at {self.endpoint} did not answer within "
            f"{self.startup_timeout_s}s; log {self.log_path}:\n{self.log_tail()}"
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def answers(self, *, method: str, status: int, under: str) -> int:
        """How many ``method`` requests of a path under ``under`` (``/bucket/key-prefix``)
        the server answered with ``status`` so far, from its request log (one line per
        request: ``"PUT /bucket/key HTTP/1.1" 412 -``)."""
        pattern = re.compile(rf'"{re.escape(method)} {re.escape(under)}\S* HTTP/[\d.]+" {status} ')
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return 0
        return len(pattern.findall(text))

    def _halt(self) -> None:
        process, self._process = self._process, None
        halt(process, what="the S3 server (moto)")

    def stop(self) -> None:
        """Stop the server (its objects were in its memory: they are gone)."""
        self._halt()


def _atomic_conditional_writes() -> None:
    """moto's S3 handlers of a PUT and of a multipart completion, each under one lock
    when the request is conditional (``If-None-Match`` or ``If-Match``): the check of
    the key and the write are then one step, as on S3."""
    from moto.s3.responses import S3Response

    lock = threading.Lock()

    def guarded(handler: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(handler)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            headers = self.headers
            if headers.get("If-None-Match") is None and headers.get("If-Match") is None:
                return handler(self, *args, **kwargs)
            with lock:
                return handler(self, *args, **kwargs)

        return call

    S3Response.put_object = guarded(S3Response.put_object)  # type: ignore[method-assign]
    S3Response._key_response_post = guarded(  # type: ignore[method-assign]
        S3Response._key_response_post
    )


def serve(argv: Sequence[str] | None = None) -> None:
    """Run moto's server on ``--host``/``--port`` until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m spark_chkpt.testing.s3_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    _atomic_conditional_writes()
    from moto.server import main

    main(["--host", args.host, "--port", str(args.port)])


if __name__ == "__main__":
    serve()
