"""An S3-compatible server on loopback: s3proxy, started by the project.

    with S3Proxy() as s3:
        s3.create_bucket("chkpt")
        write_deltalake("s3://chkpt/t", data, storage_options=s3.storage_options)

More: docs/concepts/runtime.md (spark_chkpt/testing/s3_server.py).
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
from spark_chkpt.testing.kafka_broker import _java
from spark_chkpt.testing.processes import ServerProcess, free_port, halt, launch

log = logging.getLogger(__name__)

ACCESS_KEY = "chkpt-test-key"
SECRET_KEY = "chkpt-test-secret"
REGION = "us-east-1"
_LOGBACK = """\
<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>[%d] %level %logger{20} %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="OUT"/></root>
  <logger name="org.gaul.s3proxy" level="INFO"/>
</configuration>
"""


class S3Server(ServerProcess):
    """An S3-compatible server on ``host:port`` with the project's test key: its endpoint
    and the options delta-rs is given for it (s3proxy and SeaweedFS share them)."""

    host: str
    port: int

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


class S3Proxy(S3Server):
    """s3proxy (the ``transient`` backend unless ``backend`` names another) as a context
    manager."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        heap: str = "512m",
        startup_timeout_s: float = 60.0,
        backend: str = "transient",
    ) -> None:
        self.host = host
        self.backend = backend
        self.port = port or free_port(host)
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.data_dir = Path(tempfile.mkdtemp(prefix=f"spark-chkpt-s3-{self.port}-"))
        self.log_path = Path(tempfile.gettempdir()) / f"spark-chkpt-s3-{self.port}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """Environment for the AWS SDKs (pyarrow, boto3): the endpoint and the key, and
        checksums only where S3 requires them (s3proxy rejects the newer SDKs' default
        CRC checksums: XAmzContentSHA256Mismatch, NotImplemented)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
            "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
        }

    def hadoop_settings(self) -> dict[str, str]:
        """``spark.hadoop.fs.s3a.*`` for a SparkSession that reads and writes ``s3a://``."""
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
            "spark.hadoop.fs.s3a.checksum.validation": "false",
            "spark.hadoop.fs.s3a.create.checksum.algorithm": "NONE",
        }

    def properties(self) -> dict[str, str]:
        return {
            "s3proxy.endpoint": self.endpoint,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": ACCESS_KEY,
            "s3proxy.credential": SECRET_KEY,
            "jclouds.provider": self.backend,
            "jclouds.identity": "unused",
            "jclouds.credential": "unused",
            "jclouds.filesystem.basedir": str(self.data_dir / "blobs"),
        }

    def start(self) -> S3Proxy:
        if self._process is not None:
            return self
        from spark_chkpt.runtime.jars import jars

        (self.data_dir / "blobs").mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "s3proxy.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.data_dir / "logback.xml").write_text(_LOGBACK)
        command = [
            _java(),
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlogback.configurationFile={self.data_dir / 'logback.xml'}",
            "-cp",
            os.pathsep.join(jars("s3proxy")),
            "org.gaul.s3proxy.Main",
            "--properties",
            str(config),
        ]
        self._process = launch(command, log_path=self.log_path)
        try:
            self._wait_ready(Deadline.after(seconds=self.startup_timeout_s))
        except BaseException:
            self._halt()
            raise
        log.info("s3proxy ready at %s (log: %s)", self.endpoint, self.log_path)
        return self

    def _wait_ready(self, deadline: Deadline) -> None:
        import urllib.error
        import urllib.request

        while not deadline.expired():
            assert self._process is not None
            if self._process.poll() is not None:
                raise S3ServerError(
                    f"s3proxy exited with code {self._process.returncode}; log "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            try:
                urllib.request.urlopen(self.endpoint, timeout=1.0).close()
                return
            except urllib.error.HTTPError:
                return  # it answers (403: an unsigned request)
            except OSError:
                time.sleep(0.1)
        raise S3ServerError(
            f"s3proxy at {self.endpoint} did not answer within {self.startup_timeout_s}s; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def create_bucket(self, name: str) -> None:
        """A bucket (a folder of the backend, created as s3proxy's filesystem store does)."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            endpoint_override=self.endpoint,
            region=REGION,
            allow_bucket_creation=True,
        )
        fs.create_dir(name)

    def _halt(self) -> None:
        process, self._process = self._process, None
        halt(process, what="s3proxy")

    def stop(self) -> None:
        """Stop the server and delete its objects."""
        self._halt()
        shutil.rmtree(self.data_dir, ignore_errors=True)
