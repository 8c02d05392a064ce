"""A restarted reader of an aged barrier topic, on the real broker, through the source's
planner and read tasks (no Spark here): each batch's report names the control-topic
offset a reader restarting at its end needs the index from (``index_from``); the
restarted reader seeks there, holds a few entries instead of every snapshot's, and plans
and reads what a reader of the whole control topic plans and reads."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.kafka.client.topics import create_topic, delete_topic
from spark_chkpt.kafka.control.topic import CONTROL_TOPIC_CONFIG, ensure_control_topic
from spark_chkpt.kafka.source.fetcher import read_task
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.planner import SourcePlanner
from spark_chkpt.offsets import meta_of
from tests.kafka.control.test_lost_control_topic import _snapshot

pytestmark = pytest.mark.integration

PER_BATCH = 33  # three snapshots of ten records and a barrier


def _planner(servers: str, topic: str, starting: str = "earliest") -> SourcePlanner:
    return SourcePlanner(
        config=SourceConfig.from_options(
            {
                "kafka.bootstrap.servers": servers,
                "subscribe": topic,
                "startingOffsets": starting,
                "maxOffsetsPerTrigger": str(PER_BATCH),
            },
            streaming=True,
        )
    )


def _batch(planner: SourcePlanner, start: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    end = planner.latest_offset(start, max_rows=PER_BATCH, read_all=False)
    ids: list[int] = []
    for specs in planner.read_tasks(start, end):
        for batch in read_task(config=planner.config, specs=specs, client_id="restart"):
            ids += [int(bytes(v)) for v in pa.Table.from_batches([batch])["value"].to_pylist()]
    return end, sorted(ids)


def test_a_restarted_reader_reads_the_index_from_its_report_and_plans_the_same(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    topic = make_topic(partitions=1)
    ensure_control_topic(bootstrap_servers=bootstrap_servers, name=control_topic_for(topic))
    for n in range(30):  # snapshot n: records 10n..10n+9 at offsets 11n.., its barrier at 11n+10
        _snapshot(producer, topic, n, f"a-{n}-0", range(10 * n, 10 * n + 10))

    first = _planner(bootstrap_servers, topic, json.dumps({topic: {"0": 11 * 20}}))
    try:
        start = first.initial_offsets()
        end, ids = _batch(first, start)
    finally:
        first.stop()
    assert ids == list(range(200, 230))
    report = meta_of(end)["topics"][topic]
    # Snapshots 20..22 read: the next batch needs entry 22 (where the reader stands) on.
    assert report["index_from"] == 22

    restarted = _planner(bootstrap_servers, topic)
    whole = _planner(bootstrap_servers, topic)
    try:
        again, ids = _batch(restarted, end)
        held = [e.offset for e in restarted._indexes[topic].entries]
        without = json.loads(json.dumps(end))
        del without["__chkpt__"]["topics"][topic]["index_from"]  # an offset log of before
        again_whole, ids_whole = _batch(whole, without)
        whole_held = len(whole._indexes[topic].entries)
    finally:
        restarted.stop()
        whole.stop()
    assert ids == ids_whole == list(range(230, 260))
    assert again == again_whole
    assert meta_of(again)["topics"][topic]["index_from"] == 25
    assert min(held) >= 22 and len(held) <= 8  # not the 30 entries the control topic holds
    assert whole_held <= 8  # a reader of the whole topic forgets the past once planned

    # The control topic deleted and created again, longer than the report's offset by
    # the time the reader restarts: the report's control topic id no longer matches,
    # and the reader reads the new one from its beginning (seeking to 25 would skip the
    # entries of snapshots 30..54, the next ones this reader meets).
    report = meta_of(again)["topics"][topic]
    assert isinstance(report.get("index_id"), str)
    control = control_topic_for(topic)
    delete_topic(bootstrap_servers=bootstrap_servers, name=control)
    create_topic(bootstrap_servers=bootstrap_servers, name=control, config=CONTROL_TOPIC_CONFIG)
    for n in range(30, 60):
        _snapshot(producer, topic, n, f"a-{n}-0", range(10 * n, 10 * n + 10))
    recreated = _planner(bootstrap_servers, topic)
    try:
        recreated.latest_offset(again, max_rows=PER_BATCH, read_all=False)
        offsets = [e.offset for e in recreated._indexes[topic].entries]
    finally:
        recreated.stop()
    assert offsets and min(offsets) == 0
