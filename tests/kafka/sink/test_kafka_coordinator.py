"""The Kafka sink's coordinator (phase 2 of the ``chkpt-kafka`` sink) without a broker.

Pure unit tests: an in-memory producer records what :class:`KafkaCoordinator` sends per
topic-partition (and answers with offsets), the control topic's index is read back from
what it sent, and Spark's ``offsets/<N>`` files are written under ``tmp_path``. Crashes
are simulated by making the coordinator's kill points raise instead of SIGKILL.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from spark_chkpt import failpoints as fault
from spark_chkpt.alignment.barrier import (
    BARRIER_KEY,
    Barrier,
    IndexEntry,
    control_topic_for,
    is_barrier,
)
from spark_chkpt.alignment.index import BarrierIndex
from spark_chkpt.errors import QueryIdentityError
from spark_chkpt.kafka.control.topic import write_entry
from spark_chkpt.kafka.sink import barriers as barrier_writer
from spark_chkpt.kafka.sink import committer as kafka_coordinator
from spark_chkpt.kafka.sink.committable import ProducedOutput
from spark_chkpt.kafka.sink.committer import KafkaCoordinator
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings
from spark_chkpt.snapshot.store import SnapshotStore

APP = "3f9d0c1e-query-id"
TOPIC = "mid"
CONTROL = control_topic_for(TOPIC)
PARTITIONS = 3


@dataclass
class Sent:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


class Future:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    def get(self, timeout: float | None = None) -> Future:
        return self


class FakeMetadata:
    """kafka-python's cluster metadata as the producer caches it: ``partitions`` is the
    broker's count, ``known`` what the producer last fetched; ``request_update`` fetches."""

    def __init__(self) -> None:
        self.partitions = self.known = PARTITIONS
        self.updates = 0

    def request_update(self) -> Any:
        self.updates += 1
        self.known = self.partitions
        return Done()


class Done:
    def add_both(self, callback: Any, *args: Any) -> None:
        callback(*args)


class FakeSender:
    def wakeup(self) -> None:
        pass


class FakeProducer:
    """Records every send per topic-partition; offsets count from 0 per partition."""

    def __init__(self) -> None:
        self.log: dict[tuple[str, int], list[Sent]] = defaultdict(list)
        self.flushes = 0
        self._metadata = FakeMetadata()
        self._sender = FakeSender()

    def partitions_for(self, topic: str) -> set[int]:
        return set(range(self._metadata.known))

    def send(
        self,
        topic: str,
        *,
        key: bytes | None = None,
        value: bytes,
        partition: int,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> Future:
        records = self.log[(topic, partition)]
        records.append(Sent(topic, partition, len(records), key, value, list(headers or [])))
        return Future(len(records) - 1)

    def flush(self, timeout: float | None = None) -> None:
        self.flushes += 1

    def data(self, partition: int, n: int) -> None:
        """``n`` data records a write task produced into ``TOPIC``-``partition``."""
        for _ in range(n):
            self.send(TOPIC, value=b"{}", partition=partition, headers=[("chkpt.attempt", b"x")])

    def entries(self, control: str = CONTROL) -> list[IndexEntry]:
        return [
            IndexEntry.parse(r.value, topic=control, partition=0, offset=r.offset)
            for r in self.log[(control, 0)]
        ]

    def barriers(self, topic: str = TOPIC) -> dict[int, list[tuple[int, Barrier]]]:
        """Per partition: (offset, barrier) of every barrier record, in order."""
        found: dict[int, list[tuple[int, Barrier]]] = {}
        for (t, p), records in sorted(self.log.items()):
            if t != topic:
                continue
            for r in records:
                if is_barrier(r.headers):
                    assert r.key == BARRIER_KEY
                    found.setdefault(p, []).append(
                        (r.offset, Barrier.parse(r.value, topic=t, partition=p, offset=r.offset))
                    )
        return found

    def sends(self) -> int:
        return sum(len(r) for r in self.log.values())


class FakeIndex(BarrierIndex):
    """What ``ControlTopic.refresh`` would read: every entry the producer sent so far."""

    def __init__(self, producer: FakeProducer, *, control_topic: str, data_topic: str) -> None:
        super().__init__(data_topic=data_topic, entries=producer.entries(control_topic))
        self.control_topic = control_topic


class Crash(Exception):
    """A simulated SIGKILL at a kill point."""


@pytest.fixture
def producer(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProducer]:
    fake = FakeProducer()

    def index(self: KafkaCoordinator, topic: str, batch: Any = None) -> FakeIndex:
        control = self.config.control_topic or control_topic_for(topic)
        return FakeIndex(fake, control_topic=control, data_topic=topic)

    monkeypatch.setattr(KafkaCoordinator, "_producer", lambda self: fake)
    monkeypatch.setattr(KafkaCoordinator, "_index", index)
    yield fake


@pytest.fixture
def crash_at(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``crash_at("after-intent@3")``: that kill point raises :class:`Crash`."""

    def kill(point: fault.FaultPoint, batch_id: int) -> None:
        if fault.armed(point, batch_id):
            raise Crash(point.value)

    monkeypatch.setattr(kafka_coordinator, "failpoint", kill)
    monkeypatch.setattr(barrier_writer, "failpoint", kill)  # between-barriers

    def arm(spec: str | None) -> None:
        if spec is None:
            monkeypatch.delenv(fault.ENV, raising=False)
        else:
            monkeypatch.setenv(fault.ENV, spec)

    arm(None)
    return arm


def offsets(batch_id: int, *, base: int = 0, report: str = "r") -> dict[str, Any]:
    """An upstream chkpt-kafka source's end offset for a batch, with its alignment report."""
    end = base + 100 * (batch_id + 1)
    return {"in": {"0": end, "1": end + 1}, "__chkpt__": {"mode": "aligned", "note": report}}


class Query:
    """One query's checkpoint folder under ``tmp_path`` and its coordinator."""

    def __init__(self, root: Path, *, topic: str | None = TOPIC, app_id: str = APP) -> None:
        self.checkpoint = root / "checkpoint"
        (self.checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
        self.topic = topic
        self.app_id = app_id

    def plan(self, batch_id: int, *sources: Any) -> None:
        """Write ``offsets/<batch_id>`` as Spark does (a version line, batch metadata,
        one line per source)."""
        if not sources:
            sources = (offsets(batch_id),)
        lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})]
        lines += ["-" if s is None else json.dumps(s) for s in sources]
        (self.checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines) + "\n")

    def coordinator(self) -> KafkaCoordinator:
        """A new coordinator, as Spark builds a new writer for every batch and restart."""
        return KafkaCoordinator(
            config=KafkaSinkConfig(
                bootstrap_servers="127.0.0.1:1",
                topic=self.topic,
                control_topic=None,
                checkpoint_location=str(self.checkpoint),
                query_name="q",
                txn_app_id=None,
                retained_snapshots=10,
                producer_settings={},
            ),
            snapshot=SnapshotSettings(
                checkpoint_location=str(self.checkpoint), app_id=self.app_id, query_name="q"
            ),
        )

    def commit(self, batch_id: int, *outputs: ProducedOutput | None) -> SnapshotRecord:
        return self.coordinator().commit(messages=list(outputs), batch_id=batch_id)

    def stored(self, batch_id: int) -> SnapshotRecord | None:
        return SnapshotStore(checkpoint_location=str(self.checkpoint)).get(batch_id)


def produced(
    producer: FakeProducer, batch_id: int, attempt: str, counts: dict[int, int], task: int = 0
) -> ProducedOutput:
    """What one write task attempt produced into ``TOPIC`` (its records land in the log)."""
    for partition, n in counts.items():
        producer.data(partition, n)
    return ProducedOutput(attempt=attempt, batch_id=batch_id, task=task, counts={TOPIC: counts})


def kinds(producer: FakeProducer) -> list[tuple[str, int]]:
    return [(e.kind, e.snapshot_id) for e in producer.entries()]


# -- (A) the protocol's steps ---------------------------------------------------------------


def test_first_commit_writes_intent_one_barrier_per_partition_complete_and_record(
    tmp_path: Path, producer: FakeProducer
) -> None:
    query = Query(tmp_path)
    query.plan(0)
    a = produced(producer, 0, "t0-a", {0: 2, 1: 1})
    b = produced(producer, 0, "t1-a", {1: 3, 2: 4}, task=1)

    record = query.commit(0, a, None, b)

    intent, complete = producer.entries()
    assert (intent.kind, complete.kind) == ("intent", "complete")
    assert intent.attempts == complete.attempts == ("t0-a", "t1-a")
    assert intent.counts == complete.counts == {0: 2, 1: 4, 2: 4}
    assert (intent.app_id, intent.snapshot_id, intent.topic) == (APP, 0, TOPIC)
    barriers = producer.barriers()
    assert sorted(barriers) == [0, 1, 2]
    for partition, found in barriers.items():
        ((offset, barrier),) = found  # exactly one barrier per partition
        assert barrier == Barrier(app_id=APP, snapshot_id=0, attempts=("t0-a", "t1-a"))
        assert offset == len(producer.log[(TOPIC, partition)]) - 1  # after all the data
        assert complete.positions[partition] == offset
    assert complete.positions == {0: 2, 1: 4, 2: 4}
    assert record.outcome == CommitOutcome.COMMITTED.value
    assert (record.batch_id, record.rows, record.attempts) == (0, 10, ["t0-a", "t1-a"])
    assert record.source_offsets == [offsets(0)]
    assert query.stored(0) == record


def test_barriers_reach_a_partition_added_after_the_producer_read_its_metadata(
    tmp_path: Path, producer: FakeProducer
) -> None:
    """Issue 24, hole 3: the barrier producer is cached per process; its metadata lists
    3 partitions after the topic grew to 5. A write task (a fresh producer) wrote to
    partition 3; partition 4 got no record. Both get barrier 0: the committer reads the
    metadata anew and adds the partitions the tasks wrote to."""
    producer._metadata.partitions = 5
    query = Query(tmp_path)
    query.plan(0)
    a = produced(producer, 0, "t0-a", {0: 2, 3: 5})

    query.commit(0, a)

    assert sorted(producer.barriers()) == [0, 1, 2, 3, 4]
    _, complete = producer.entries()
    assert complete.positions == {0: 2, 1: 0, 2: 0, 3: 5, 4: 0}
    assert producer._metadata.updates == 1


def test_commit_that_finds_an_intent_resumes_with_the_intents_attempts_not_its_own(
    tmp_path: Path, producer: FakeProducer
) -> None:
    """A commit crashed after its intent: the re-run (another attempt of every task)
    confirms the attempts the intent fixed, so exactly one copy of the data counts."""
    query = Query(tmp_path)
    query.plan(4)
    first = produced(producer, 4, "t0-first", {0: 5})
    write_entry(
        producer,
        control_topic=CONTROL,
        entry=IndexEntry(
            kind="intent",
            app_id=APP,
            snapshot_id=4,
            topic=TOPIC,
            attempts=(first.attempt,),
            counts={0: 5},
        ),
    )
    again = produced(producer, 4, "t0-again", {0: 5, 2: 1})

    record = query.commit(4, again)

    assert kinds(producer) == [("intent", 4), ("complete", 4)]  # no second intent
    complete = producer.entries()[1]
    assert complete.attempts == ("t0-first",)
    assert complete.counts == {0: 5}
    assert all(
        [b.attempts for _, b in found] == [("t0-first",)] for found in producer.barriers().values()
    )
    assert (record.outcome, record.rows, record.attempts) == ("committed", 5, ["t0-first"])


def test_a_commit_held_after_its_intent_while_another_run_completed_it_writes_nothing_more(
    tmp_path: Path, producer: FakeProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 51: the driver's JVM killed while its Python commit worker, held after the
    intent of batch 1, lived on; a new driver resumed that intent and completed batch 1.
    Let go, the old worker reads the control topic again (it was held past HELD_S) and
    stops with FencedError: no second barrier, no second complete entry."""
    from spark_chkpt.errors import FencedError

    query = Query(tmp_path)
    query.plan(1)
    old = produced(producer, 1, "t0-old", {0: 2, 1: 1})
    new = produced(producer, 1, "t0-new", {0: 2, 1: 1})
    monkeypatch.setattr(kafka_coordinator, "HELD_S", 0.0)  # every commit counts as held

    def new_driver_meanwhile(point: fault.FaultPoint, batch_id: int) -> None:
        if point is fault.FaultPoint.AFTER_INTENT:
            query.commit(1, new)  # resumes the old intent: its attempts, barriers, complete

    monkeypatch.setattr(kafka_coordinator, "failpoint", new_driver_meanwhile)
    with pytest.raises(FencedError, match=r"held .* another run of the query completed"):
        query.commit(1, old)
    assert kinds(producer) == [("intent", 1), ("complete", 1)]
    assert {p: len(found) for p, found in producer.barriers().items()} == {0: 1, 1: 1, 2: 1}


def test_commit_that_finds_complete_is_a_duplicate_and_writes_no_barrier(
    tmp_path: Path, producer: FakeProducer
) -> None:
    query = Query(tmp_path)
    query.plan(2)
    first = query.commit(2, produced(producer, 2, "t0-a", {0: 3}))
    sent = producer.sends()

    replay = query.commit(2, produced(producer, 2, "t0-b", {0: 3}))

    assert producer.sends() == sent + 3  # only the replay's own data records
    assert kinds(producer) == [("intent", 2), ("complete", 2)]
    assert replay == first  # the store's record of the first commit


def test_commit_of_n_when_the_index_holds_n_plus_1_is_a_duplicate(
    tmp_path: Path, producer: FakeProducer
) -> None:
    query = Query(tmp_path)
    query.plan(6)
    write_entry(
        producer,
        control_topic=CONTROL,
        entry=IndexEntry(kind="intent", app_id=APP, snapshot_id=7, topic=TOPIC, attempts=("x",)),
    )
    sent = producer.sends()

    record = query.commit(6, produced(producer, 6, "t0-late", {1: 2}))

    assert producer.sends() == sent + 2
    assert producer.barriers() == {}
    assert record.outcome == CommitOutcome.DUPLICATE.value
    assert (record.rows, record.attempts) == (0, [])
    assert query.stored(6) == record
    # another app's snapshots in the same topic do not count
    other = Query(tmp_path / "other", app_id="another-app")
    other.plan(6)
    assert other.commit(6, produced(producer, 6, "t0-o", {1: 1})).outcome == "committed"


def test_empty_batch_completes_with_barriers_naming_no_attempt(
    tmp_path: Path, producer: FakeProducer
) -> None:
    query = Query(tmp_path)
    query.plan(0)

    record = query.commit(0, ProducedOutput(attempt="t0-a", batch_id=0, task=0, counts={}))

    assert kinds(producer) == [("intent", 0), ("complete", 0)]
    assert producer.entries()[1].attempts == ()
    assert all([b.attempts for _, b in found] == [()] for found in producer.barriers().values())
    assert len(producer.barriers()) == PARTITIONS
    assert (record.outcome, record.rows, record.attempts) == ("empty", 0, [])


def test_empty_batch_without_a_topic_option_writes_nothing_to_kafka(
    tmp_path: Path, producer: FakeProducer
) -> None:
    query = Query(tmp_path, topic=None)  # the topic comes from each row's topic column
    query.plan(3)

    record = query.commit(3, None)

    assert producer.sends() == 0
    assert (record.outcome, record.rows) == ("empty", 0)
    assert query.stored(3) == record


# -- (B) a crash between the complete entry and the store ---------------------------------


def test_rerun_after_a_crash_between_complete_and_store_repairs_the_record(
    tmp_path: Path, producer: FakeProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = Query(tmp_path)
    query.plan(5)

    def crash(self: SnapshotStore, record: SnapshotRecord) -> None:
        raise Crash("store")

    with monkeypatch.context() as m:
        m.setattr(SnapshotStore, "put", crash)
        with pytest.raises(Crash):
            query.commit(5, produced(producer, 5, "t0-a", {0: 4, 2: 3}))
    assert kinds(producer) == [("intent", 5), ("complete", 5)]
    assert query.stored(5) is None

    record = query.commit(5, produced(producer, 5, "t0-b", {0: 4, 2: 3}))

    assert kinds(producer) == [("intent", 5), ("complete", 5)]
    assert (record.outcome, record.rows, record.attempts) == ("committed", 7, ["t0-a"])
    assert record.source_offsets == [offsets(5)]
    assert query.stored(5) == record


def test_rerun_after_a_crash_between_complete_and_store_of_an_empty_batch(
    tmp_path: Path, producer: FakeProducer, crash_at: Any
) -> None:
    query = Query(tmp_path)
    query.plan(1)
    crash_at("after-complete@1")
    with pytest.raises(Crash, match="after-complete"):
        query.commit(1, ProducedOutput(attempt="t0-a", batch_id=1, task=0, counts={}))
    crash_at(None)

    record = query.commit(1, ProducedOutput(attempt="t0-b", batch_id=1, task=0, counts={}))

    assert (record.outcome, record.rows) == ("empty", 0)
    assert query.stored(1) == record


def test_after_complete_kill_point_fires_after_the_complete_entry_before_the_store(
    tmp_path: Path, producer: FakeProducer, crash_at: Any
) -> None:
    query = Query(tmp_path)
    query.plan(3)
    crash_at("after-complete@3")
    with pytest.raises(Crash, match="after-complete"):
        query.commit(3, produced(producer, 3, "t0-a", {1: 6}))
    assert kinds(producer) == [("intent", 3), ("complete", 3)]
    assert query.stored(3) is None

    record = query.commit(3, produced(producer, 3, "t0-b", {1: 6}))
    assert (record.outcome, record.rows, record.attempts) == ("committed", 6, ["t0-a"])


# -- (C) query identity: the source offsets in the entries --------------------------------


def test_index_entries_carry_the_batch_source_offsets_without_the_report(
    tmp_path: Path, producer: FakeProducer
) -> None:
    query = Query(tmp_path)
    query.plan(2, offsets(2), None)
    query.commit(2, produced(producer, 2, "t0-a", {0: 1}))

    expected = ({"in": {"0": 300, "1": 301}}, None)
    assert [e.sources for e in producer.entries()] == [expected, expected]


def another_run(producer: FakeProducer, kind: str, batch_id: int, sources: Any) -> None:
    """Index entries of (APP, batch_id) written by a run that read other offsets."""
    written: tuple[Literal["intent", "complete"], ...] = (
        ("intent", "complete") if kind == "complete" else ("intent",)
    )
    for k in written:
        write_entry(
            producer,
            control_topic=CONTROL,
            entry=IndexEntry(
                kind=k,
                app_id=APP,
                snapshot_id=batch_id,
                topic=TOPIC,
                attempts=("other-run",),
                counts={0: 9},
                positions={0: 9} if k == "complete" else {},
                sources=sources,
            ),
        )


@pytest.mark.parametrize("kind", ["intent", "complete"])
def test_entry_of_another_run_for_the_same_batch_is_a_query_identity_error(
    tmp_path: Path, producer: FakeProducer, kind: str
) -> None:
    """A query restarted from a fresh checkpoint with the same txnAppId: its batch 1 is
    not the batch 1 in the control topic, and must neither resume nor skip it."""
    query = Query(tmp_path)
    query.plan(1, offsets(1, base=5000))
    another_run(producer, kind, 1, ({"in": {"0": 200, "1": 201}},))
    sent = producer.sends()

    with pytest.raises(QueryIdentityError) as info:
        query.commit(1, produced(producer, 1, "t0-new", {0: 2}))

    message = str(info.value)
    for part in (TOPIC, CONTROL, APP, "batch 1", '"0": 200', '"0": 5200', "txnAppId"):
        assert part in message, part
    assert producer.sends() == sent + 2  # no entry, no barrier
    assert query.stored(1) is None


def test_entries_without_source_offsets_are_trusted(tmp_path: Path, producer: FakeProducer) -> None:
    """Entries written before the field existed parse and are resumed as before."""
    query = Query(tmp_path)
    query.plan(1)
    another_run(producer, "intent", 1, None)
    assert b"sources" not in producer.log[(CONTROL, 0)][0].value

    record = query.commit(1, produced(producer, 1, "t0-new", {0: 2}))

    assert (record.rows, record.attempts) == (9, ["other-run"])
    assert producer.entries()[-1].sources == ({"in": {"0": 200, "1": 201}},)


def test_a_different_alignment_report_is_the_same_run(
    tmp_path: Path, producer: FakeProducer, crash_at: Any
) -> None:
    query = Query(tmp_path)
    query.plan(2, offsets(2, report="first"))
    crash_at("after-intent@2")
    with pytest.raises(Crash):
        query.commit(2, produced(producer, 2, "t0-a", {0: 1}))
    crash_at(None)
    query.plan(2, offsets(2, report="second"))

    record = query.commit(2, produced(producer, 2, "t0-b", {0: 1}))

    assert (record.outcome, record.attempts) == ("committed", ["t0-a"])


# -- (E) kill points inside the protocol ----------------------------------------------------


def test_after_intent_kill_point_fires_before_any_barrier_and_the_rerun_resumes(
    tmp_path: Path, producer: FakeProducer, crash_at: Any
) -> None:
    query = Query(tmp_path)
    query.plan(0)
    crash_at("after-intent@0")
    with pytest.raises(Crash, match="after-intent"):
        query.commit(0, produced(producer, 0, "t0-a", {0: 2, 1: 2}))
    assert kinds(producer) == [("intent", 0)]
    assert producer.barriers() == {}
    crash_at(None)

    record = query.commit(0, produced(producer, 0, "t0-b", {0: 2, 1: 2}))

    assert kinds(producer) == [("intent", 0), ("complete", 0)]
    assert (record.rows, record.attempts) == (4, ["t0-a"])


def test_between_barriers_kill_point_leaves_one_barrier_and_the_rerun_writes_all(
    tmp_path: Path, producer: FakeProducer, crash_at: Any
) -> None:
    query = Query(tmp_path)
    query.plan(2)
    crash_at("between-barriers@2")
    with pytest.raises(Crash, match="between-barriers"):
        query.commit(2, produced(producer, 2, "t0-a", {0: 1, 1: 1, 2: 1}))
    first = producer.barriers()
    assert list(first) == [0] and len(first[0]) == 1  # the first partition only
    assert producer.flushes >= 2  # the intent's flush, then the first barrier's
    assert kinds(producer) == [("intent", 2)]
    crash_at(None)

    record = query.commit(2, produced(producer, 2, "t0-b", {0: 1, 1: 1, 2: 1}))

    barriers = producer.barriers()
    assert [len(barriers[p]) for p in range(PARTITIONS)] == [2, 1, 1]
    complete = producer.entries()[-1]
    assert complete.positions == {p: barriers[p][-1][0] for p in range(PARTITIONS)}
    assert (record.rows, record.attempts) == (3, ["t0-a"])
    # armed for another batch, the barriers go out together
    query.plan(3)
    crash_at("between-barriers@9")
    query.commit(3, produced(producer, 3, "t0-c", {0: 1}))
    assert [len(found) for found in producer.barriers().values()] == [3, 2, 2]


def test_a_writer_of_an_older_generation_is_fenced_before_any_entry_or_barrier(
    tmp_path: Path, producer: FakeProducer
) -> None:
    """Issue 24: the control topic records each writer's generation; a checkpoint of an
    older one (the app id's checkpoint before a restore) commits nothing."""
    from spark_chkpt.errors import FencedError
    from spark_chkpt.fs import resolve
    from spark_chkpt.snapshot.epoch import write_epoch

    restored = Query(tmp_path / "restored")
    write_epoch(resolve(str(restored.checkpoint)), generation=2, started_by="fork", source="sp")
    restored.plan(0)
    restored.commit(0, produced(producer, 0, "t0-a", {0: 1}))
    assert [e.generation for e in producer.entries()] == [2, 2]
    written = kinds(producer)

    old = Query(tmp_path / "old")
    old.plan(1)
    with pytest.raises(FencedError) as info:
        old.commit(1, produced(producer, 1, "t0-b", {0: 1}))
    assert "generation 0" in str(info.value) and "generation 2" in str(info.value)
    assert kinds(producer) == written  # no entry, no barrier
    assert old.stored(1) is None


def test_one_commit_checks_each_topics_id_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence and the check for an earlier commit both read the index, milliseconds
    apart in one commit: the topic's id (a metadata request, about 11 ms) is checked by
    the first read, whose metadata also tells whether the control topic exists; the
    second read only reads on. The next commit checks the id again (red before: two
    checks and two more metadata requests per commit)."""
    from spark_chkpt.kafka.client.pool import ClientCache
    from spark_chkpt.kafka.sink.committer import KafkaBatch

    calls: list[str] = []

    class Index:
        def __init__(self, **_: Any) -> None:
            self.topic_id: str | None = None
            self.trimmed_after = -1

        def current_topic_id(self) -> str:
            calls.append("id")
            return "id-1"

        def refresh(self, *, metadata_fresh: bool = False) -> list[IndexEntry]:
            calls.append("read on fresh metadata" if metadata_fresh else "read")
            return []

    monkeypatch.setattr(kafka_coordinator, "ControlTopic", Index)
    monkeypatch.setattr(kafka_coordinator, "ensure_control_topic", lambda **_: None)
    monkeypatch.setattr(kafka_coordinator, "_INDEXES", ClientCache(close=lambda _: None))
    coordinator = Query(tmp_path).coordinator()
    first = KafkaBatch(batch_id=0)
    coordinator._index(TOPIC, first)  # built: its id read
    coordinator._index(TOPIC, first)
    assert calls == ["id", "read on fresh metadata", "read"]
    calls.clear()
    coordinator._index(TOPIC, KafkaBatch(batch_id=1))  # cached: the stale check asks
    assert calls == ["id", "read on fresh metadata"]
