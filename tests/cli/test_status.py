"""``spark-chkpt status`` against a broker (issue 39): each partition's committed offset,
its end and the lag, run as a user runs the command (a subprocess from a folder outside
the repo); no Spark is started, so the command answers in seconds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.delta.sink.test_coordinator import Query
from tests.helpers import chkpt_cli, ok

pytestmark = pytest.mark.integration


def test_status_shows_committed_offsets_ends_and_lag(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    topic = make_topic(partitions=2)
    for partition, count in ((0, 7), (1, 4)):
        for i in range(count):
            producer.send(topic, value=b"v%d" % i, partition=partition)
    producer.flush()
    query = Query(tmp_path / "job")
    query.plan(0, {topic: {"0": 5, "1": 4}})
    (query.checkpoint / "commits").mkdir()
    (query.checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = chkpt_cli(
        elsewhere, "status", str(query.checkpoint), "--bootstrap-servers", bootstrap_servers,
        "--json",
    )  # fmt: skip
    status = json.loads(ok(done))
    assert status["committed_batch"] == 0
    assert status["partitions"] == [
        {"topic": topic, "partition": 0, "committed": 5, "end": 7, "lag": 2},
        {"topic": topic, "partition": 1, "committed": 4, "end": 4, "lag": 0},
    ]
    text = ok(chkpt_cli(elsewhere, "status", str(query.checkpoint), "--bootstrap-servers",
                        bootstrap_servers))  # fmt: skip
    assert f"{topic}-0" in text and "SparkContext" not in done.stderr


def test_status_of_a_kafka_sink_shows_its_barrier_offsets(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    from spark_chkpt.alignment.barrier import IndexEntry, control_topic_for
    from spark_chkpt.kafka.control.topic import ensure_control_topic, write_entry
    from spark_chkpt.snapshot.record import SnapshotRecord
    from spark_chkpt.snapshot.store import SnapshotStore

    topic = make_topic(partitions=2)
    control = control_topic_for(topic)
    ensure_control_topic(bootstrap_servers=bootstrap_servers, name=control)
    entry = IndexEntry(
        kind="complete", app_id="app-1", snapshot_id=0, topic=topic, attempts=("a0",),
        positions={0: 3, 1: 8},
    )  # fmt: skip
    write_entry(producer, control_topic=control, entry=entry)
    query = Query(tmp_path / "job")
    SnapshotStore(checkpoint_location=str(query.checkpoint)).put(
        SnapshotRecord(
            batch_id=0,
            app_id="app-1",
            query_name=None,
            sink="chkpt-kafka",
            source_offsets=[],
            table_version=None,
            rows=11,
            files=0,
            bytes=0,
            commit_ms=1.0,
            target=topic,
        )
    )
    status = json.loads(ok(chkpt_cli(tmp_path, "status", str(query.checkpoint), "--json",
                                     "--bootstrap-servers", bootstrap_servers)))  # fmt: skip
    assert status["last_snapshot"]["barriers"] == {topic: {"0": 3, "1": 8}}
    text = ok(chkpt_cli(tmp_path, "status", str(query.checkpoint), "--bootstrap-servers",
                        bootstrap_servers))  # fmt: skip
    assert f'barriers at {{"{topic}": {{"0": 3, "1": 8}}}}' in text
