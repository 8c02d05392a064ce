"""A real Apache Kafka broker: one KRaft node (broker and controller) on loopback.

    with EmbeddedKafka() as kafka:
        create_topic(bootstrap_servers=kafka.bootstrap_servers, name="events", partitions=4)

The broker runs in its own JVM from the jars ``make setup`` fetched. Its storage
is on disk, in a temporary folder by default or in ``data_dir``: ``restart()`` keeps it,
so a test can stop the broker in the middle of a query and bring the same topics back.
The public surface is the Tansu launcher's (``bootstrap_servers``, ``start()``, ``stop()``,
``pause()``/``resume()``, a context manager).

``secured=True`` starts the client listener as SASL_SSL: SCRAM-SHA-512 over TLS with a CA
and broker certificate made here (openssl, PEM: ``ca_pem``), SCRAM users made at format
time (``admin``, the super user, and ``alice``) and ``StandardAuthorizer`` (ACLs by
:meth:`EmbeddedKafka.grant`).
:meth:`EmbeddedKafka.client_settings` and :meth:`EmbeddedKafka.options` are one user's
credentials as kafka-python settings and as Spark's ``kafka.*`` options.

Settings are the ones a test wants (replication factor 1, no auto-created topics,
retention and the log cleaner checked every second, a 256 MB heap).
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import BrokerError
from spark_chkpt.testing.kafka_security import SecuredListener
from spark_chkpt.testing.processes import (
    LOG_TAIL,
    PausableBroker,
    free_port,
    halt,
    launch,
    port_open,
)

log = logging.getLogger(__name__)

# Log to stdout (the launcher sends it to the log file): INFO for the broker's life
# cycle, WARN for the chatty parts.
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
logger.image.name = org.apache.kafka.image
logger.image.level = WARN
logger.metadata.name = org.apache.kafka.metadata
logger.metadata.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
"""


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerError("the Kafka broker needs Java 17 or newer: no `java` on PATH")
    return found


class EmbeddedKafka(SecuredListener, PausableBroker):
    """An Apache Kafka broker (KRaft, single node) as a context manager."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        heap: str = "256m",
        startup_timeout_s: float = 60.0,
        log_path: str | os.PathLike[str] | None = None,
        settings: Mapping[str, str] | None = None,
        secured: bool = False,
        users: tuple[str, ...] = ("alice", "bob"),
        node_id: int = 1,
        cluster_id: str | None = None,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id or new_cluster_id()
        self.secured = secured
        # name -> password (random per broker); "admin" is the super user.
        self.users = {name: secrets.token_hex(12) for name in ("admin", *users)}
        self.host = host
        self.port = port or free_port(host)
        self.controller_port = free_port(host)
        self.sasl_plaintext_port = free_port(host)  # secured only
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.settings = dict(settings or {})
        self._own_dir = data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix=f"spark-chkpt-kafka-{self.port}-"))
            if data_dir is None
            else Path(data_dir)
        )
        self.log_path = (
            Path(log_path)
            if log_path
            else Path(tempfile.gettempdir()) / f"spark-chkpt-kafka-{self.port}.log"
        )
        self._process: subprocess.Popen[bytes] | None = None
        self.started_in_s: float | None = None  # process start -> first metadata answer

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    # -- configuration ----------------------------------------------------------------

    def properties(self) -> dict[str, str]:
        """The broker's ``server.properties``."""
        listener = f"PLAINTEXT://{self.host}:{self.port}"
        controller = f"CONTROLLER://{self.host}:{self.controller_port}"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": f"{self.node_id}@{self.host}:{self.controller_port}",
            "listeners": f"{listener},{controller}",
            "advertised.listeners": listener,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            # Retention and compaction in seconds, not minutes: tests use them.
            "log.initial.task.delay.ms": "0",
            "log.retention.check.interval.ms": "1000",
            "log.cleaner.backoff.ms": "1000",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
            "log.cleaner.threads": "1",
            # A timed-out transaction aborted within a second of its timeout, not within
            # ten: the transaction chains wait for the broker's abort.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        }
        if self.secured:
            props.update(self._secured_properties())
        props.update(self.settings)
        return props

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2)
        return config

    def _command(self, main: str, *args: str) -> list[str]:
        from spark_chkpt.runtime.jars import jars

        classpath = os.pathsep.join(jars("kafka-broker"))
        return [
            _java(),
            f"-Xmx{self.heap}",
            "-Xms32m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xss512k",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.data_dir / 'app-logs'}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _format(self, config: Path) -> None:
        """Format the storage unless an earlier start did (a restart keeps the data)."""
        if (self.data_dir / "logs" / "meta.properties").is_file():
            return
        command = self._command(  # "=": a random cluster id may start with "-"
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={self.cluster_id}",
            f"--config={config}",
            *(
                f"--add-scram=SCRAM-SHA-512=[name={name},password={password}]"
                for name, password in (self.users.items() if self.secured else ())
            ),
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BrokerError(
                f"formatting the Kafka storage in {self.data_dir} failed (exit "
                f"{done.returncode}): {' '.join(command[-3:])}\n"
                f"{(done.stdout + done.stderr)[-LOG_TAIL:]}"
            )

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> EmbeddedKafka:
        if self._process is not None:
            return self
        if self.secured:
            self._make_certificates()
        config = self._write_config()
        self._format(config)
        began = time.monotonic()
        self._process = launch(self._command("kafka.Kafka", str(config)), log_path=self.log_path)
        try:
            self._wait_ready(Deadline.after(seconds=self.startup_timeout_s))
        except BaseException:
            self._halt()
            raise
        self.started_in_s = time.monotonic() - began
        log.info(
            "Kafka broker ready at %s in %.1fs (log: %s)",
            self.bootstrap_servers,
            self.started_in_s,
            self.log_path,
        )
        return self

    def _wait_ready(self, deadline: Deadline) -> None:
        """Until a metadata request to this broker lists it (KRaft opens the client
        listener once the node has caught up with the metadata log and is unfenced).

        Each metadata probe runs in a thread while the broker's process is watched: a
        port taken by another process accepts and never answers, kafka-python then waits
        about 17 s whatever its timeouts, and the broker (which cannot bind) has long
        exited; its exit is the error, at once."""
        from concurrent.futures import ThreadPoolExecutor

        from kafka.errors import KafkaError

        last: Exception | None = None
        probes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-ready")
        try:
            while not deadline.expired():
                self._raise_if_exited()
                if not self._port_open():
                    time.sleep(0.05)
                    continue
                probe = probes.submit(self._lists_itself)
                while not probe.done():
                    self._raise_if_exited()
                    time.sleep(0.05)
                try:
                    if probe.result():
                        return
                except (KafkaError, OSError, ValueError) as e:
                    last = e
                time.sleep(0.1)
        finally:
            probes.shutdown(wait=False)
        raise BrokerError(
            f"the Kafka broker at {self.bootstrap_servers} did not answer metadata requests "
            f"within {self.startup_timeout_s}s ({last}); log {self.log_path}:\n{self.log_tail()}"
        )

    def _raise_if_exited(self) -> None:
        assert self._process is not None
        if self._process.poll() is not None:
            raise BrokerError(
                f"the Kafka broker exited with code {self._process.returncode} on "
                f"{self.bootstrap_servers}; log {self.log_path}:\n{self.log_tail()}"
            )

    def _lists_itself(self) -> bool:
        """Whether a metadata request to this broker lists this node."""
        from spark_chkpt.kafka.client.factory import kafka_admin

        admin = kafka_admin(
            bootstrap_servers=self.bootstrap_servers,
            settings=self.client_settings("admin"),
            request_timeout_ms=2000,
        )
        try:
            brokers = admin.describe_cluster().get("brokers") or ()
            return any(b.get("broker_id") == self.node_id for b in brokers)
        finally:
            admin.close()

    def _port_open(self) -> bool:
        """Whether the client listener accepts connections (a cheap check before the
        metadata probe: kafka-python backs off for seconds after a refused bootstrap)."""
        return port_open(self.host, self.port)

    def _halt(self, *, timeout_s: float = 30.0) -> None:
        """Stop the JVM (SIGTERM: a controlled shutdown that flushes the logs), keeping
        the storage; SIGKILL after ``timeout_s``."""
        process, self._process = self._process, None
        halt(process, timeout_s=timeout_s, what="the Kafka broker")

    def kill(self) -> None:
        """SIGKILL the broker, as a crash: the storage stays for a ``restart()``."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def restart(self, *, keep_data: bool = True) -> EmbeddedKafka:
        """Stop and start again on the same ports; ``keep_data=False`` starts empty."""
        self._halt()
        if not keep_data:
            shutil.rmtree(self.data_dir / "logs", ignore_errors=True)
        return self.start()

    def stop(self) -> None:
        """Stop the broker; a temporary storage folder of its own is deleted."""
        self._halt(timeout_s=10.0)
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
