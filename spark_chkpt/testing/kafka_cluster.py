"""A real Apache Kafka cluster on loopback: three KRaft nodes, each broker and controller.

    with KafkaCluster() as cluster:
        create_topic(bootstrap_servers=cluster.bootstrap_servers, name="events",
                     partitions=4, replication_factor=3)
        node = cluster.leader_of("events", 0)
        cluster.kill(node)      # kill -9: a crash
        cluster.start(node)     # back with its data, waits until it serves again
        cluster.stop(node)      # a controlled shutdown, as a rolling restart does

Each node is an :class:`~spark_chkpt.testing.kafka_broker.EmbeddedKafka` of its own JVM
(node ids 1, 2, 3; one cluster id; the three controllers are the static quorum), on the
settings production clusters run: replication factor 3 for every topic and internal topic,
``min.insync.replicas=2``, no unclean leader election. The nodes are formatted and started
in parallel (a node's broker opens its listener only once a majority of controllers has
elected a leader). Every wait is bounded and says what it waited for.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import BrokerError
from spark_chkpt.testing.kafka_broker import EmbeddedKafka, new_cluster_id
from spark_chkpt.testing.processes import ServerProcess, free_port

log = logging.getLogger(__name__)

NODES = 3

# What a production cluster of three runs on (the broker defaults and the internal topics
# at RF 3, writes acknowledged by two replicas, a dead leader never replaced by a replica
# that missed writes); the internal topics get few partitions, for a quick start.
PRODUCTION_SETTINGS: Mapping[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text`` as a signed 32-bit int."""
    data = text.encode("utf-16-be")  # Java hashes UTF-16 code units
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


class KafkaCluster(ServerProcess):
    """Three Kafka nodes (KRaft, combined roles) as a context manager; nodes by id 1-3."""

    def __init__(
        self,
        *,
        nodes: int = NODES,
        host: str = "127.0.0.1",
        heap: str = "384m",
        data_dir: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 120.0,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix="spark-chkpt-kafka-cluster-"))
            if data_dir is None
            else Path(data_dir)
        )
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        ids = range(1, nodes + 1)
        controller_ports = {node: free_port(host) for node in ids}
        voters = ",".join(f"{n}@{host}:{port}" for n, port in controller_ports.items())
        cluster_id = new_cluster_id()
        self.nodes: dict[int, EmbeddedKafka] = {}
        for node in ids:
            broker = EmbeddedKafka(
                host=host,
                data_dir=self.data_dir / f"node-{node}",
                heap=heap,
                startup_timeout_s=startup_timeout_s,
                node_id=node,
                cluster_id=cluster_id,
                settings={
                    **PRODUCTION_SETTINGS,
                    "controller.quorum.voters": voters,
                    **(settings or {}),
                },
            )
            # The voters name each node's controller port: the node must listen there.
            broker.controller_port = controller_ports[node]
            self.nodes[node] = broker
        self.log_path = self.nodes[1].log_path
        self.started_in_s: float | None = None  # the whole cluster, first start

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.nodes.values())

    def node(self, node: int) -> EmbeddedKafka:
        if node not in self.nodes:
            raise BrokerError(f"no Kafka node {node} in this cluster (nodes {sorted(self.nodes)})")
        return self.nodes[node]

    # -- life cycle -------------------------------------------------------------------

    def start(self, node: int | None = None) -> KafkaCluster:
        """Start every node (in parallel), or ``node`` alone, and wait until each started
        one serves metadata (a node's start includes its formatting, first time only)."""
        if node is not None:
            self.node(node).start()
            return self
        began = time.monotonic()
        self._on_each(lambda broker: broker.start())  # a running node is left as it is
        if self.started_in_s is None:
            self.started_in_s = time.monotonic() - began
            log.info("Kafka cluster of %d nodes ready in %.1fs", len(self.nodes), self.started_in_s)
        return self

    def _on_each(self, action: Callable[[EmbeddedKafka], Any]) -> None:
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            futures = [pool.submit(action, broker) for broker in self.nodes.values()]
            errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            for broker in self.nodes.values():
                broker.kill()
            raise errors[0]  # type: ignore[misc]

    def kill(self, node: int) -> None:
        """SIGKILL ``node``'s JVM (a crash); its storage stays for :meth:`start`."""
        self.node(node).kill()

    def stop(self, node: int | None = None) -> None:
        """A controlled shutdown of ``node`` (SIGTERM: its leaderships move first), its
        storage kept; without ``node``, the whole cluster, its temporary folder deleted."""
        if node is not None:
            self.node(node)._halt(timeout_s=60.0)
            return
        self._on_each(lambda broker: broker._halt(timeout_s=30.0))
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def running(self, node: int) -> bool:
        return self.node(node).pid is not None

    # -- questions --------------------------------------------------------------------

    def _admin(self) -> Any:
        from spark_chkpt.kafka.client.factory import kafka_admin

        live = [b.bootstrap_servers for b in self.nodes.values() if b.pid is not None]
        if not live:
            raise BrokerError("no Kafka node of the cluster is running")
        return kafka_admin(bootstrap_servers=",".join(live), request_timeout_ms=10000)

    def _ask(self, what: str, question: Callable[[Any], Any], *, timeout_s: float = 30.0) -> Any:
        """``question(admin)`` answered by a running node, asked again while a node it
        reached is dying (a killed node stays in the metadata until it is fenced)."""
        from kafka.errors import KafkaError

        deadline = Deadline.after(seconds=timeout_s)
        while True:
            try:
                admin = self._admin()
                try:
                    return question(admin)
                finally:
                    admin.close()
            except (KafkaError, OSError) as e:
                if deadline.expired():
                    raise BrokerError(
                        f"the Kafka cluster did not answer {what} within {timeout_s}s: {e}"
                    ) from e
                time.sleep(0.2)

    def describe(self, topic: str) -> list[dict[str, Any]]:
        """``topic``'s partitions as the cluster's metadata has them, by partition:
        ``partition_index``, ``leader_id`` (-1: none), ``replica_nodes``, ``isr_nodes``."""
        described = self._ask(f"a describe of {topic!r}", lambda a: a.describe_topics([topic]))
        if not described or described[0].get("error_code"):
            raise BrokerError(f"topic {topic!r} is not known to the cluster: {described}")
        return sorted(described[0]["partitions"], key=lambda p: p["partition_index"])

    def replication_factor(self, topic: str) -> int:
        """``topic``'s replication factor (its partitions' fewest replicas)."""
        return min(len(p["replica_nodes"]) for p in self.describe(topic))

    def leader_of(self, topic: str, partition: int, *, timeout_s: float = 60.0) -> int:
        """The node that leads ``topic``-``partition`` now, waiting up to ``timeout_s``
        while it has none (an election under way)."""
        deadline = Deadline.after(seconds=timeout_s)
        while True:
            found = [p for p in self.describe(topic) if p["partition_index"] == partition]
            if not found:
                raise BrokerError(f"topic {topic!r} has no partition {partition}")
            leader = int(found[0]["leader_id"])
            if leader in self.nodes and self.running(leader):
                return leader
            if deadline.expired():
                raise BrokerError(
                    f"{topic}-{partition} had no leader on a running node within "
                    f"{timeout_s}s (last: {found[0]})"
                )
            time.sleep(0.2)

    def controller(self) -> int:
        """The node whose controller leads the KRaft quorum (the active controller)."""
        quorum = self._ask("a describe of the KRaft quorum", lambda a: a.describe_metadata_quorum())
        return int(quorum["topics"][0]["partitions"][0]["leader_id"])

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node that leads ``transactional_id``'s partition of ``__transaction_state``
        (Kafka's partitioning: the id's Java hash code, made non-negative, modulo the
        topic's partition count)."""
        partitions = len(self.describe("__transaction_state"))
        partition = (java_string_hash(transactional_id) & 0x7FFFFFFF) % partitions
        return self.leader_of("__transaction_state", partition)

    def reassign(self, topic: str, *, timeout_s: float = 60.0) -> dict[int, tuple[int, int]]:
        """A partition reassignment of ``topic``, as ``kafka-reassign-partitions.sh`` does
        one: each partition's replica list rotated by one (its second replica first), then
        a preferred-leader election, so that every partition's leader moves to another
        node with no node down. Waits until the reassignment is done and each partition
        is led by its new first replica; returns each partition's (old, new) leader."""
        from kafka import TopicPartition

        described = self.describe(topic)
        before = {p["partition_index"]: list(p["replica_nodes"]) for p in described}
        leaders = {p["partition_index"]: int(p["leader_id"]) for p in described}
        moved = {
            TopicPartition(topic, index): [*replicas[1:], replicas[0]]
            for index, replicas in before.items()
        }
        refused = self._ask(
            f"a reassignment of {topic!r}", lambda a: a.alter_partition_reassignments(moved)
        )
        failed = {tp: error for tp, error in refused.items() if error is not None}
        if failed:
            raise BrokerError(f"the cluster refused the reassignment of {topic!r}: {failed}")
        deadline = Deadline.after(seconds=timeout_s)
        while self._ask("the reassignments under way", lambda a: a.list_partition_reassignments()):
            if deadline.expired():
                raise BrokerError(f"the reassignment of {topic!r} took over {timeout_s}s")
            time.sleep(0.2)
        self._ask(
            f"a preferred-leader election of {topic!r}",
            lambda a: a.elect_leaders(0, {topic: sorted(before)}, raise_errors=False),
        )
        wanted = {tp.partition: replicas[0] for tp, replicas in moved.items()}
        while True:
            now = {p["partition_index"]: int(p["leader_id"]) for p in self.describe(topic)}
            if now == wanted:
                return {index: (leaders[index], now[index]) for index in sorted(now)}
            if deadline.expired():
                raise BrokerError(
                    f"{topic}'s leaders are {now} {timeout_s}s after the reassignment, "
                    f"not the new preferred replicas {wanted}"
                )
            time.sleep(0.2)

    def wait_in_sync(self, topics: Sequence[str], *, timeout_s: float = 120.0) -> None:
        """Until every partition of ``topics`` has each of its replicas in sync (a node
        started again has caught up): what an operator waits for between two restarts."""
        deadline = Deadline.after(seconds=timeout_s)
        behind: list[str] = []
        while not deadline.expired():
            behind = [
                f"{topic}-{p['partition_index']} (isr {p['isr_nodes']} of {p['replica_nodes']})"
                for topic in topics
                for p in self.describe(topic)
                if set(p["isr_nodes"]) != set(p["replica_nodes"])
            ]
            if not behind:
                return
            time.sleep(0.2)
        raise BrokerError(
            f"partitions were not fully in sync within {timeout_s}s: {', '.join(behind)}"
        )
