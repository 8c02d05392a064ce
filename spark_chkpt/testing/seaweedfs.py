"""An S3-compatible server that enforces conditional writes, on loopback: SeaweedFS.

    with SeaweedS3() as s3:
        s3.create_bucket("race")
        write_deltalake("s3://race/t", data, storage_options=s3.storage_options)

s3proxy (:mod:`spark_chkpt.testing.s3_server`) serves every other S3 test, but it
ignores ``If-None-Match: *`` on PUT, so two Delta writers of one version could both
"succeed" there whatever delta-rs does. SeaweedFS (Apache-2.0) answers a second
conditional PUT of a key with 412 PreconditionFailed, and exactly one of several
concurrent ones wins, as S3 does: the two-writer tests run on it.

The server is ``weed mini`` (master, volume server, filer and S3 gateway in one process,
objects in a temporary folder), the ``weed`` command ``make test`` builds from
``go/seaweedfs`` into ``.cache/seaweedfs/weed`` (``SPARK_CHKPT_WEED`` names another
build). Every port is a free loopback port (its WebDAV, admin UI, Iceberg and Lance
servers are off); it takes the same test key as s3proxy (:data:`ACCESS_KEY`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import S3ServerError
from spark_chkpt.testing.processes import free_port, halt, launch
from spark_chkpt.testing.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

log = logging.getLogger(__name__)


def weed_binary() -> Path:
    """The ``weed`` command: ``SPARK_CHKPT_WEED``, else what ``make test`` built."""
    from spark_chkpt.runtime.jars import checkout_root

    chosen = os.environ.get("SPARK_CHKPT_WEED")
    path = Path(chosen) if chosen else checkout_root() / ".cache" / "seaweedfs" / "weed"
    if not path.is_file():
        raise S3ServerError(
            f"SeaweedFS's weed command is not at {path}: run `make test` or "
            "`make .cache/seaweedfs/weed` (they build it from go/seaweedfs with Go), or set "
            "SPARK_CHKPT_WEED to a weed binary"
        )
    return path


class SeaweedS3(S3Server):
    """``weed mini`` with its S3 gateway, as a context manager."""

    def __init__(self, *, host: str = "127.0.0.1", startup_timeout_s: float = 90.0) -> None:
        self.host = host
        self.port = free_port(host)
        self.startup_timeout_s = startup_timeout_s
        self.data_dir = Path(tempfile.mkdtemp(prefix=f"spark-chkpt-weed-{self.port}-"))
        self.log_path = Path(tempfile.gettempdir()) / f"spark-chkpt-weed-{self.port}.log"
        self._process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        ports = {
            name: free_port(self.host)
            for name in (
                "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                "filer.port", "filer.port.grpc", "s3.port.grpc", "admin.port",
                "admin.port.grpc",
            )
        }  # fmt: skip
        return [
            str(weed_binary()),
            "mini",
            f"-dir={self.data_dir}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-s3.port={self.port}",
            *(f"-{name}={port}" for name, port in ports.items()),
            "-admin.ui=false",
            "-admin.port.legacy=0",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]

    def start(self) -> SeaweedS3:
        if self._process is not None:
            return self
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        self._process = launch(self.command(), log_path=self.log_path, env=env)
        try:
            self._wait_ready(Deadline.after(seconds=self.startup_timeout_s))
        except BaseException:
            self._halt()
            raise
        log.info("SeaweedFS S3 ready at %s (log: %s)", self.endpoint, self.log_path)
        return self

    def _client(self):  # type: ignore[no-untyped-def]
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(retries={"max_attempts": 1}),
        )

    def _wait_ready(self, deadline: Deadline) -> None:
        client = self._client()
        last: Exception | None = None
        while not deadline.expired():
            assert self._process is not None
            if self._process.poll() is not None:
                raise S3ServerError(
                    f"weed mini exited with code {self._process.returncode}; log "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            try:  # the gateway answers once the filer and a volume server are up
                client.list_buckets()
                return
            except Exception as e:  # not listening yet, or the filer not ready
                last = e
                time.sleep(0.25)
        raise S3ServerError(
            f"SeaweedFS's S3 gateway at {self.endpoint} did not answer within "
            f"{self.startup_timeout_s}s ({last}); log {self.log_path}:\n{self.log_tail()}"
        )

    def create_bucket(self, name: str) -> None:
        self._client().create_bucket(Bucket=name)

    def _halt(self) -> None:
        process, self._process = self._process, None
        halt(process, what="weed mini")

    def stop(self) -> None:
        """Stop the server and delete its objects."""
        self._halt()
        shutil.rmtree(self.data_dir, ignore_errors=True)
