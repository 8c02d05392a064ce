"""A restarted ``chkpt-kafka`` coordinator against an aged control topic, on the real
broker (no Spark): each commit's snapshot record holds how far it read the control topic
(``control_read``), and a coordinator in a new process reads on from there instead of
from offset 0; read from the start when the control topic was created again, and right
after a savepoint rewind and a stale writer racing it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.alignment.barrier import IndexEntry, control_topic_for
from spark_chkpt.errors import QueryIdentityError
from spark_chkpt.kafka.client.pool import ClientCache
from spark_chkpt.kafka.client.topics import create_topic, delete_topic
from spark_chkpt.kafka.control.topic import CONTROL_TOPIC_CONFIG
from spark_chkpt.kafka.sink import committer
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.kafka.sink.committer import KafkaCoordinator
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.sink.rewind import KafkaRewind
from spark_chkpt.snapshot.epoch import write_epoch
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint
from spark_chkpt.snapshot.settings import SnapshotSettings
from spark_chkpt.snapshot.store import SnapshotStore

pytestmark = pytest.mark.integration

APP = "restart-app"
OLD = 400  # snapshots in the control topic before the query's restart


class Query:
    """One query's checkpoint folder and a coordinator per commit, as Spark builds one."""

    def __init__(self, root: Path, *, servers: str, topic: str, step: int = 100) -> None:
        self.checkpoint = root / "checkpoint"
        (self.checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
        self.servers, self.topic, self.step = servers, topic, step

    def sources(self, batch_id: int) -> dict[str, Any]:
        return {"in": {"0": self.step * (batch_id + 1)}}

    def plan(self, batch_id: int) -> None:
        lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})]
        lines.append(json.dumps(self.sources(batch_id)))
        (self.checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines) + "\n")

    def commit(self, batch_id: int) -> SnapshotRecord:
        self.plan(batch_id)
        coordinator = KafkaCoordinator(
            config=KafkaSinkConfig(
                bootstrap_servers=self.servers,
                topic=self.topic,
                control_topic=None,
                checkpoint_location=str(self.checkpoint),
                query_name="q",
                txn_app_id=None,
                retained_snapshots=10,
                producer_settings={},
            ),
            snapshot=SnapshotSettings(
                checkpoint_location=str(self.checkpoint), app_id=APP, query_name="q"
            ),
        )
        output = ProducedOutput(
            attempt=f"a-{batch_id}", batch_id=batch_id, task=0, counts={self.topic: {0: 1}}
        )
        return coordinator.commit(batch_id=batch_id, messages=[output])

    def store(self) -> SnapshotStore:
        return SnapshotStore(checkpoint_location=str(self.checkpoint))

    def index(self) -> Any:
        """The running process's control-topic reader of this query's app."""
        key = (self.servers, control_topic_for(self.topic), self.topic, APP)
        return committer._INDEXES._clients[key]

    def aged(self, snapshots: range) -> Query:
        """Commit 0 (it creates the control topic), then ``snapshots``' entries as
        earlier commits wrote them."""
        self.commit(0)
        _age(self.servers, self.topic, snapshots)
        return self


@pytest.fixture
def restart(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """``restart()``: the coordinator's process ends (its cached control-topic readers
    with it); the next commit is a new driver's."""
    caches: list[ClientCache[Any]] = []

    def new_process() -> None:
        if caches:
            for key in list(caches[-1]._clients):
                caches[-1].retire(key)
        cache: ClientCache[Any] = ClientCache(close=lambda index: index.close())
        caches.append(cache)
        monkeypatch.setattr(committer, "_INDEXES", cache)

    new_process()
    yield new_process
    new_process()


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many control-topic records the readers parse (one per record read)."""
    count = [0]
    parse = IndexEntry.parse.__func__  # type: ignore[attr-defined]

    def counting(cls: Any, *args: Any, **kwargs: Any) -> IndexEntry:
        count[0] += 1
        return parse(cls, *args, **kwargs)

    monkeypatch.setattr(IndexEntry, "parse", classmethod(counting))
    return count


def _age(servers: str, topic: str, snapshots: range, *, generation: int = 0) -> None:
    """``complete`` entries of the query's app for ``snapshots``, as its earlier commits
    wrote them (written directly: hundreds of commits would take a minute)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=servers, linger_ms=5)
    try:
        for n in snapshots:
            entry = IndexEntry(
                kind="complete",
                app_id=APP,
                snapshot_id=n,
                topic=topic,
                attempts=(f"a-{n}",),
                positions={0: n},
                counts={0: 1},
                generation=generation,
            )
            producer.send(
                control_topic_for(topic), key=entry.key(), value=entry.value(), partition=0
            )
        producer.flush()
    finally:
        producer.close()


def test_a_restarted_coordinator_reads_its_control_topic_from_the_recorded_point(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    restart: Callable[[], None],
    parsed: list[int],
) -> None:
    """Red before: the restarted commit parsed every one of the 400+ entries."""
    topic = make_topic(partitions=2)
    query = Query(tmp_path, servers=bootstrap_servers, topic=topic).aged(range(1, OLD))
    query.commit(OLD)
    record = query.store().get(OLD)
    assert record is not None and record.control_read[topic]["offset"] >= OLD

    restart()
    parsed[0] = 0
    again = query.commit(OLD + 1)
    assert again.outcome == "committed" and again.attempts == [f"a-{OLD + 1}"]
    # Read from the point of commit OLD's fence: its intent and complete, nothing before;
    # kept after the commit: what a restart from OLD + 1's point would read, none yet.
    assert parsed[0] <= 4, parsed[0]
    assert query.index().entries == []

    # The same batch again after another restart (Spark's commit log lost it): read
    # from commit OLD's point, it is found committed and nothing is written.
    restart()
    assert query.commit(OLD + 1) == query.store().get(OLD + 1)
    assert [(e.kind, e.snapshot_id) for e in query.index().entries][2:] == [
        ("intent", OLD + 1),
        ("complete", OLD + 1),
    ]


def test_a_running_coordinator_holds_what_a_restart_would_read(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    restart: Callable[[], None],
) -> None:
    """A driver that runs for months never restarts: after each commit its reader keeps
    only the entries from that commit's recorded point on, as a restarted one would read
    (red before: two entries more per batch, and the fence, the check for an earlier
    commit and the open intents each walked them all, every batch). A retry of the last
    batch in the same process still finds it committed."""
    topic = make_topic(partitions=1)
    query = Query(tmp_path, servers=bootstrap_servers, topic=topic)
    for n in range(30):
        query.commit(n)
        # kept: from batch n's recorded point on, where batch n's own entries begin
        assert query.index().entries == [], (n, query.index().entries)

    # Spark runs batch 29 again (its commit log write failed): read from 29's point, its
    # entries say it is committed, and nothing is written again.
    assert query.commit(29) == query.store().get(29)
    entries = [(e.kind, e.snapshot_id) for e in query.index().entries]
    assert entries == [("intent", 29), ("complete", 29)], entries

    # Another query in the same process, started from a copy of an older checkpoint of
    # the same app id that read other offsets: its batch 21 meets batch 21's entries, as
    # a restart reading from its record of 20 would (the reader is read again from
    # there, not taken trimmed at 29), and is refused by name.
    older = Query(tmp_path / "older", servers=bootstrap_servers, topic=topic, step=7)
    shutil.copytree(query.checkpoint / "chkpt", older.checkpoint / "chkpt")
    for n in range(21, 30):
        (older.checkpoint / "chkpt" / "snapshots" / f"{n}.json").unlink()
    with pytest.raises(QueryIdentityError, match="batch 21"):
        older.commit(21)


def test_a_recreated_control_topic_is_read_from_its_start(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    restart: Callable[[], None],
    parsed: list[int],
) -> None:
    """The control topic deleted and created again, holding more entries than the
    recorded offset by the restart, among them a complete entry of the next batch before
    that offset: the recorded id no longer matches, the restart reads the new topic from
    0 and finds the batch committed (a seek would have written it a second time)."""
    topic = make_topic(partitions=1)
    query = Query(tmp_path, servers=bootstrap_servers, topic=topic).aged(range(1, 50))
    query.commit(50)
    point = query.store().get(50).control_read[topic]  # type: ignore[union-attr]
    control = control_topic_for(topic)
    delete_topic(bootstrap_servers=bootstrap_servers, name=control)
    create_topic(bootstrap_servers=bootstrap_servers, name=control, config=CONTROL_TOPIC_CONFIG)
    _age(bootstrap_servers, topic, range(51, 52))  # batch 51, committed at offset 0
    _age(bootstrap_servers, topic, range(1000, 1000 + point["offset"] + 10))

    restart()
    parsed[0] = 0
    record = query.commit(51)
    assert record.outcome == "committed" and record.attempts == ["a-51"]  # the entry's
    assert parsed[0] >= point["offset"] + 11
    assert not [e for e in query.index().entries if e.kind == "intent"]  # nothing written again


@pytest.mark.parametrize("restarted", [True, False], ids=["restarted", "running"])
def test_after_a_rewind_and_a_stale_writer_the_restart_reads_what_it_needs(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    restart: Callable[[], None],
    parsed: list[int],
    restarted: bool,
) -> None:
    """A savepoint rewind to snapshot 30 revokes 31..32 under generation 1. The restored
    query's restart reads from snapshot 30's point: it sees the revocation and commits
    31 anew. Then a stale writer of generation 0 appends a complete entry of snapshot 40
    after the restored query's point, the revocation before it: the next restart finds
    an entry of an older generation than its record's and reads from the start, so the
    revocation still takes snapshot 40 back and batch 32 is committed, not skipped.
    ``running``: the same in a driver that never restarts, whose reader keeps only what a
    restart would read, and the revocation (else snapshot 40 would count as newer)."""
    topic = make_topic(partitions=1)
    query = Query(tmp_path, servers=bootstrap_servers, topic=topic).aged(range(1, 30))
    for n in (30, 31, 32):
        query.commit(n)
    kept = query.store().get(30)
    assert kept is not None

    # The restore: the checkpoint as of snapshot 30 under generation 1, the revocation.
    rewind = KafkaRewind(
        point=RewindPoint(
            savepoint_id="sp",
            app_id=APP,
            batch_id=30,
            source_offsets=[query.sources(30)],
            target=topic,
            record=kept,
        ),
        bootstrap_servers=bootstrap_servers,
    )
    generation = rewind.plan()
    assert generation == 1
    for n in (31, 32):
        (query.checkpoint / "chkpt" / "snapshots" / f"{n}.json").unlink()
    write_epoch(
        _location(query.checkpoint), generation=generation, started_by="rewind", source="sp"
    )
    rewind.apply(generation=generation, checkpoint_location=str(query.checkpoint))

    if restarted:
        restart()
    parsed[0] = 0
    record = query.commit(31)
    assert record.outcome == "committed"
    if restarted:
        assert parsed[0] <= 10, parsed[0]  # from snapshot 30's point, not the 30+ before
    assert query.store().get(31).control_read[topic]["generation"] == 1  # type: ignore[union-attr]

    _age(bootstrap_servers, topic, range(40, 41), generation=0)  # the stale writer
    if restarted:
        restart()
    parsed[0] = 0
    record = query.commit(32)
    assert record.outcome == "committed" and record.attempts == ["a-32"]
    if restarted:
        assert parsed[0] > 30  # the whole control topic, read again
    else:
        assert len(query.index().entries) <= 4, query.index().entries


def _location(path: Path) -> Any:
    from spark_chkpt.fs import resolve

    return resolve(str(path))
