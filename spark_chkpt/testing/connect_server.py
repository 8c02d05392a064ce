"""A local Spark Connect server for the project: pyspark's own ``SparkConnectServer``
started with spark-submit, with Spark's Kafka connector and delta-spark (the jars
``make setup`` fetched), Delta's extension and catalog, and ``PYSPARK_PYTHON`` set to an
interpreter that imports spark_chkpt (this one unless ``python`` is given).

    with ConnectServer() as server:
        spark = server.session()  # SparkSession.builder.remote(server.url).create()
        spark_chkpt.register(spark)

``make connect-server`` (``python -m spark_chkpt.testing.connect_server``) runs one in the
foreground on port 15002; ``--print-command`` prints its spark-submit command instead.

It is how Databricks serverless compute and standard-access-mode clusters run PySpark:
the client sends plans over gRPC; the server's JVM and its Python workers run them.
``kill()`` is a crash of the server's whole process tree (its JVM, PySpark's daemon and
workers, the foreachBatch workers); ``start()`` again brings it back on the same port.

More: docs/concepts/runtime.md (spark_chkpt/testing/connect_server.py).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import ConnectServerError
from spark_chkpt.testing.processes import ServerProcess, free_port, kill_tree, launch, port_open

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def spark_submit() -> str:
    """pyspark's own ``spark-submit`` (the one whose jars hold the Connect server)."""
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


class ConnectServer(ServerProcess):
    """A Spark Connect server on ``host:port`` (a free port unless given), as a context
    manager. ``python``: the interpreter its Python workers run (``PYSPARK_PYTHON``);
    ``conf``: more ``--conf`` settings, winning over the defaults here."""

    def __init__(
        self,
        *,
        python: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        master: str = "local[2]",
        conf: Mapping[str, str] | None = None,
        startup_timeout_s: float = 180.0,
    ) -> None:
        self.python = python or sys.executable
        self.host = host
        self.port = port or free_port(host)
        self.master = master
        self.conf = dict(conf or {})
        self.startup_timeout_s = startup_timeout_s
        self.log_path = Path(tempfile.gettempdir()) / f"spark-chkpt-connect-{self.port}.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._sessions: list[Any] = []  # the client sessions session() handed out

    @property
    def url(self) -> str:
        """The client's ``SparkSession.builder.remote(...)`` address."""
        return f"sc://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def settings(self) -> dict[str, str]:
        """The server's ``--conf`` settings: the project's jars and Delta's session
        settings, the state store defaults of the project's sessions, a small local
        machine's partitions, then ``conf``."""
        from spark_chkpt.session import STATE_STORE_DEFAULTS, connector_settings

        return {
            **connector_settings(),
            **STATE_STORE_DEFAULTS,
            "spark.connect.grpc.binding.address": self.host,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.pyspark.python": self.python,
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.ui.enabled": "false",
            "spark.databricks.delta.snapshotPartitions": "2",
            **self.conf,
        }

    def command(self) -> list[str]:
        command = [spark_submit(), "--master", self.master, "--class", SERVER_CLASS]
        for key, value in self.settings().items():
            command += ["--conf", f"{key}={value}"]
        return [*command, "--name", "spark-chkpt-connect", "spark-internal"]

    def start(self) -> ConnectServer:
        """Launch the server and wait (at most ``startup_timeout_s``) until its gRPC
        port accepts connections; :class:`ConnectServerError` with its log's end if it
        exits or does not answer in time."""
        env = {
            **os.environ,
            "PYSPARK_PYTHON": self.python,
            "PYSPARK_DRIVER_PYTHON": self.python,
        }
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        env.pop("SPARK_REMOTE", None)
        self.log_path.write_bytes(b"")
        self._process = launch(self.command(), log_path=self.log_path, env=env)
        deadline = Deadline.after(seconds=self.startup_timeout_s)
        while not self._answers():
            if self._process.poll() is not None:
                raise ConnectServerError(
                    f"the Spark Connect server exited {self._process.returncode} while "
                    f"starting; its log ({self.log_path}) ends:\n{self.log_tail()}"
                )
            if deadline.expired():
                self.stop()
                raise ConnectServerError(
                    f"the Spark Connect server did not listen on {self.host}:{self.port} "
                    f"within {self.startup_timeout_s:.0f}s; its log ({self.log_path}) "
                    f"ends:\n{self.log_tail()}"
                )
            time.sleep(0.25)
        log.info("Spark Connect server at %s (pid %s)", self.url, self._process.pid)
        return self

    def _answers(self) -> bool:
        return port_open(self.host, self.port)

    def session(self) -> Any:
        """A new client session of this server (``builder.remote(url).create()``)."""
        from pyspark.sql import SparkSession

        session = SparkSession.builder.remote(self.url).create()
        self._sessions.append(session)
        return session

    def kill(self) -> None:
        """``kill -9`` of the server's whole process tree, as a machine crash: the JVM,
        PySpark's daemon and workers, the foreachBatch workers. The client sessions
        :meth:`session` handed out are closed first (:func:`abandon`)."""
        while self._sessions:
            abandon(self._sessions.pop())
        if self._process is not None and self._process.poll() is None:
            kill_tree(self._process.pid)
            self._process.wait(timeout=30)

    def stop(self) -> None:
        self.kill()
        self._process = None


def abandon(session: Any) -> None:
    """Close a client session's channel without a word to its server (one that was
    killed): ``stop()``, and pyspark's own exit hook, would ask the dead server again
    for minutes (the client's retry policy)."""
    if not session.client.is_closed:
        session.client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark_chkpt.testing.connect_server",
        description="A local Spark Connect server with the project's jars, in the foreground.",
    )
    parser.add_argument("--port", type=int, default=15002)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--print-command", action="store_true", help="print the spark-submit command, start nothing"
    )
    args = parser.parse_args(argv)
    server = ConnectServer(port=args.port, master=args.master)
    if args.print_command:
        print(f"PYSPARK_PYTHON={shlex.quote(server.python)} {shlex.join(server.command())}")
        return 0
    with server:
        print(f"Spark Connect server at {server.url} (log: {server.log_path}); Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
