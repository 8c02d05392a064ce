"""Partition growth as an operation of the simulation, on the real Kafka broker (issue 35).

:mod:`test_protocol`'s model has a fake topic: it can add a partition, but no client
metadata exists there to go stale, which is where growth broke a running query. This
machine drives the source's real driver side (:class:`SourcePlanner`, its kafka-python
offset probe) and its real read tasks (:func:`read_task`, through the worker's consumer
pool, so a consumer that read the topic before it grew is the one that reads after) on a
real topic, with hypothesis choosing the schedule: records produced, partitions added
(between batches, or after a batch was planned and before it is read), batches planned
and read, a read task that fails and is run again, the driver restarted from its last
committed offsets, with either read client and one to six partitions per task. After the
last step the query drains, and every record written is read exactly once.

Each step is a broker round trip, so this runs tens of schedules, not thousands
(``SIM_GROWTH_EXAMPLES``, default 20). Needs Apache Kafka (CreatePartitions).
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from spark_chkpt.kafka.client.topics import add_partitions, create_topic
from spark_chkpt.kafka.source.fetcher import read_task
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.planner import SourcePlanner
from tests.helpers import BROKER_ENV

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get(BROKER_ENV) == "tansu", reason="Tansu has no CreatePartitions"
    ),
]

MAX_PARTITIONS = 8
SERVERS: list[str] = []  # the session's broker, set by the fixture below


class SourceGrowth(RuleBasedStateMachine):
    """One query reading one topic; ``end`` is what Spark's commit log holds."""

    @initialize(
        client=st.sampled_from(["kafka-python", "confluent"]),
        per_task=st.sampled_from(["3", "1", "6"]),
    )
    def start(self, client: str, per_task: str) -> None:
        from kafka import KafkaProducer

        self.servers = SERVERS[0]
        self.topic = f"sim-growth-{uuid.uuid4().hex[:8]}"
        self.partitions = 2
        create_topic(bootstrap_servers=self.servers, name=self.topic, partitions=2)
        self.config = SourceConfig.from_options(
            {
                "kafka.bootstrap.servers": self.servers,
                "subscribe": self.topic,
                "startingOffsets": "earliest",
                "kafka.client": client,
                "partitionsPerTask": per_task,
            }
        )
        self.producer = KafkaProducer(bootstrap_servers=self.servers.split(","), linger_ms=1)
        self.producer_knows = 2
        self.planner = SourcePlanner(config=self.config)
        self.end: Any = self.planner.initial_offsets()
        self.planned: tuple[Any, list[Any]] | None = None
        self.sent = 0
        self.read: Counter[int] = Counter()
        # A running query: it has read the topic (its pooled consumer knows two partitions).
        self.produce(10)
        self.batch()

    def _read(self, tasks: list[Any]) -> list[int]:
        ids: list[int] = []
        for specs in tasks:
            for batch in read_task(config=self.config, specs=specs, client_id="sim"):
                ids += [int(bytes(v)) for v in pa.Table.from_batches([batch])["value"].to_pylist()]
        return ids

    @rule(n=st.integers(min_value=1, max_value=25))
    def produce(self, n: int) -> None:
        from kafka import KafkaProducer

        if self.producer_knows != self.partitions:  # kafka-python refuses a new partition
            self.producer.close()
            self.producer = KafkaProducer(bootstrap_servers=self.servers.split(","), linger_ms=1)
            self.producer_knows = self.partitions
        for _ in range(n):
            self.producer.send(
                self.topic, value=str(self.sent).encode(), partition=self.sent % self.partitions
            )
            self.sent += 1
        self.producer.flush()

    @precondition(lambda self: self.partitions < MAX_PARTITIONS)
    @rule(more=st.integers(min_value=1, max_value=3), n=st.integers(min_value=1, max_value=25))
    def grow(self, more: int, n: int) -> None:
        """Partitions added while records arrive: ``n`` records spread over all of them."""
        self.partitions = min(MAX_PARTITIONS, self.partitions + more)
        add_partitions(bootstrap_servers=self.servers, name=self.topic, total=self.partitions)
        self.produce(n)

    @precondition(lambda self: self.planned is None)
    @rule()
    def plan(self) -> None:
        """latestOffset and the batch's read tasks (Spark writes offsets/N)."""
        end = self.planner.latest_offset(self.end, max_rows=None, read_all=False)
        self.planned = (end, self.planner.read_tasks(self.end, end))

    @rule()
    def batch(self) -> None:
        """The planned batch (or a new one) runs, its tasks succeed, Spark commits it."""
        if self.planned is None:
            self.plan()
        self.run()

    def run(self) -> None:
        assert self.planned is not None
        end, tasks = self.planned
        self.read.update(self._read(tasks))
        self.planner.commit_group(end)
        self.end, self.planned = end, None

    @precondition(lambda self: self.planned is not None)
    @rule()
    def fail_a_task(self) -> None:
        """A read task runs and its output is thrown away (the task failed after it read;
        Spark runs the batch again): nothing of it may count."""
        assert self.planned is not None
        self._read(self.planned[1][:1])

    @rule()
    def restart_driver(self) -> None:
        """The driver dies and the query restarts from its checkpoint: a planned batch is
        planned again by the new run from the same start (as Spark replays offsets/N)."""
        self.planner.stop()
        self.planner = SourcePlanner(config=self.config)
        if self.planned is not None:
            end = self.planned[0]
            self.planned = (end, self.planner.read_tasks(self.end, end))

    def teardown(self) -> None:
        if not hasattr(self, "planner"):
            return
        try:
            if self.planned is not None:
                self.run()
            for _ in range(5):
                self.plan()
                if self.planned is not None and self.planned[0] == self.end:
                    self.planned = None
                    break
                self.run()
            twice = sorted(i for i, n in self.read.items() if n > 1)
            missing = sorted(set(range(self.sent)) - set(self.read))
            assert not twice, f"read twice: {twice}"
            assert not missing, f"never read: {missing}"
            assert set(self.read) == set(range(self.sent))
        finally:
            self.planner.stop()
            self.producer.close()


@pytest.fixture(autouse=True)
def _broker(bootstrap_servers: str) -> None:
    SERVERS[:] = [bootstrap_servers]


TestSourceGrowth = SourceGrowth.TestCase
TestSourceGrowth.settings = settings(
    max_examples=int(os.environ.get("SIM_GROWTH_EXAMPLES", "20")),
    stateful_step_count=10,
    deadline=None,
    database=None,
)
