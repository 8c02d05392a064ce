"""A barrier topic whose control topic was deleted (issue 24, hole 7), on the real broker,
through the source's planner and read tasks (no Spark here).

Job A wrote snapshot 0 into ``mid`` (its records, barrier 0, the control topic's entry),
then an attempt of batch 1 was killed after its records were acknowledged; an operator
deleted ``__chkpt.<mid>``. Job B must not read the killed attempt's records as if the
topic were plain (it did: they came again after A's replay): its read task fails with
one error naming the missing control topic and the way back. The way back works: the
control topic created again (empty) and A's replay of batch 1 committed, a fresh B reads
every record of A's committed attempts once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from spark_chkpt.alignment.barrier import (
    ATTEMPT_HEADER,
    BARRIER_KEY,
    Barrier,
    IndexEntry,
    control_topic_for,
)
from spark_chkpt.errors import AlignmentError
from spark_chkpt.kafka.client.topics import create_topic, delete_topic
from spark_chkpt.kafka.control.topic import (
    CONTROL_TOPIC_CONFIG,
    ensure_control_topic,
    write_entry,
)
from spark_chkpt.kafka.source.fetcher import read_task
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.planner import SourcePlanner

pytestmark = pytest.mark.integration


def _snapshot(producer: Any, topic: str, snapshot: int, attempt: str, ids: range) -> None:
    """A's write tasks' records of ``attempt``, then (if ``snapshot`` >= 0) its commit:
    the barrier record and the control topic's complete entry."""
    for i in ids:
        producer.send(
            topic, value=str(i).encode(), partition=0, headers=[(ATTEMPT_HEADER, attempt.encode())]
        )
    producer.flush()
    if snapshot < 0:
        return
    marker = Barrier(app_id="job-a", snapshot_id=snapshot, attempts=(attempt,))
    sent = producer.send(
        topic, key=BARRIER_KEY, value=marker.value(), partition=0, headers=marker.headers()
    )
    producer.flush()
    entry = IndexEntry(
        kind="complete",
        app_id="job-a",
        snapshot_id=snapshot,
        topic=topic,
        attempts=(attempt,),
        positions={0: sent.get(timeout=30).offset},
        counts={0: len(ids)},
    )
    write_entry(producer, control_topic=control_topic_for(topic), entry=entry)


def _job_b_reads(bootstrap_servers: str, topic: str) -> list[int]:
    """A fresh job B: one batch from the earliest offset, planned and read as Spark's
    source does (``aligned``, the default)."""
    config = SourceConfig.from_options(
        {
            "kafka.bootstrap.servers": bootstrap_servers,
            "subscribe": topic,
            "startingOffsets": "earliest",
        }
    )
    planner = SourcePlanner(config=config)
    try:
        start = planner.initial_offsets()
        end = planner.latest_offset(start, max_rows=None, read_all=True)
        ids: list[int] = []
        for specs in planner.read_tasks(start, end):
            for batch in read_task(config=config, specs=specs, client_id="job-b"):
                ids += [int(bytes(v)) for v in pa.Table.from_batches([batch])["value"].to_pylist()]
        return sorted(ids)
    finally:
        planner.stop()


def test_a_deleted_control_topic_fails_the_reader_then_its_recreation_reads_once(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    topic = make_topic(partitions=1)
    control = control_topic_for(topic)
    ensure_control_topic(bootstrap_servers=bootstrap_servers, name=control)
    _snapshot(producer, topic, 0, "a-0-0", range(0, 10))
    _snapshot(producer, topic, -1, "a-1-0", range(10, 15))  # batch 1's killed attempt
    assert _job_b_reads(bootstrap_servers, topic) == list(range(10))  # the control topic at work

    delete_topic(bootstrap_servers=bootstrap_servers, name=control)
    with pytest.raises(AlignmentError) as info:
        _job_b_reads(bootstrap_servers, topic)
    message = str(info.value)
    assert f"control topic {control} does not exist" in message
    assert topic in message and "alignment=none" in message

    # The way back: the control topic created again, empty (A's next commit does it too);
    # A replays batch 1 with a new attempt; B reads each committed record once.
    create_topic(bootstrap_servers=bootstrap_servers, name=control, config=CONTROL_TOPIC_CONFIG)
    _snapshot(producer, topic, 1, "a-1-1", range(10, 15))
    assert _job_b_reads(bootstrap_servers, topic) == list(range(15))
