"""Control topics are created once per process, with retention that never expires the
index (a reader from ``earliest`` needs the entries of the oldest data)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from spark_chkpt.kafka.client import topics
from spark_chkpt.kafka.control import topic as control_topic


def test_control_topic_is_created_once_with_infinite_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []
    described: list[dict[str, Any]] = []
    monkeypatch.setattr(topics, "create_topic", lambda **kw: calls.append(kw))
    monkeypatch.setattr(topics, "topic_configs", lambda **kw: described.append(kw))  # None
    monkeypatch.setattr(topics, "replication_factors", lambda **kw: {})
    monkeypatch.setattr(control_topic, "_ENSURED", set())
    for _ in range(3):
        control_topic.ensure_control_topic(bootstrap_servers="b:9092", name="__chkpt.t")
    assert len(calls) == 1
    assert [d["names"] for d in described] == [["__chkpt.t", "t"]]  # settings checked once
    assert calls[0]["name"] == "__chkpt.t" and calls[0]["partitions"] == 1
    assert calls[0]["exist_ok"] is True
    assert calls[0]["config"] == {"retention.ms": "-1", "retention.bytes": "-1"}
    assert calls[0]["replication_factor"] == -1  # the broker's default.replication.factor


def test_the_users_replication_settings_create_the_control_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(topics, "create_topic", lambda **kw: calls.append(kw))
    monkeypatch.setattr(topics, "topic_configs", lambda **kw: None)
    monkeypatch.setattr(topics, "replication_factors", lambda **kw: {})
    monkeypatch.setattr(control_topic, "_ENSURED", set())
    control_topic.ensure_control_topic(
        bootstrap_servers="b:9092", name="__chkpt.t", replication_factor=3, min_insync_replicas=2
    )
    assert calls[0]["replication_factor"] == 3
    assert calls[0]["config"]["min.insync.replicas"] == "2"


def test_a_control_topic_less_replicated_than_its_data_topic_is_named_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Created before the control topic took the cluster's replication (or by hand): the
    sink starts, and the driver's log names both topics, both factors and the fix."""
    monkeypatch.setattr(topics, "create_topic", lambda **kw: None)
    monkeypatch.setattr(topics, "topic_configs", lambda **kw: None)
    monkeypatch.setattr(topics, "replication_factors", lambda **kw: {"__chkpt.t": 1, "t": 3})
    monkeypatch.setattr(control_topic, "_ENSURED", set())
    with caplog.at_level("WARNING", logger=control_topic.__name__):
        control_topic.ensure_control_topic(bootstrap_servers="b:9092", name="__chkpt.t")
    (line,) = [r.getMessage() for r in caplog.records if "replication factor" in r.getMessage()]
    assert "__chkpt.t has replication factor 1, below its data topic t's 3" in line
    assert "kafka-reassign-partitions" in line and "delete it" in line
    for factors in ({"__chkpt.t": 3, "t": 3}, {"__chkpt.t": 3, "t": 1}, {"__chkpt.t": 1}):
        assert not control_topic.warn_if_less_replicated(
            name="__chkpt.t", data="t", factors=factors
        )


class _Record:
    def __init__(self, offset: int, value: bytes) -> None:
        self.offset = offset
        self.value = value


class _StaleConsumer:
    """A kafka-python consumer reused across refreshes: its ``highwater`` is the one of
    its last fetch response until a new response arrives, and the first poll after a
    seek returns nothing (the fetch is still in flight), as on a loaded machine."""

    config: ClassVar[dict[str, int]] = {"request_timeout_ms": 30_000}  # kafka-python's

    def __init__(self, log: list[bytes], *, stale_highwater: int | None) -> None:
        self.log = log
        self._highwater: int | None = stale_highwater
        self._position = 0
        self._polls = 0

    def topics(self) -> set[str]:
        return {"__chkpt.t"}

    def assign(self, partitions: list[Any]) -> None:
        pass

    def seek(self, tp: Any, offset: int) -> None:
        self._position = offset
        self._polls = 0

    def end_offsets(self, partitions: list[Any], timeout_ms: int | None = None) -> dict[Any, int]:
        return {tp: len(self.log) for tp in partitions}

    def poll(self, *, timeout_ms: int, max_records: int) -> dict[Any, list[_Record]]:
        from kafka import TopicPartition

        self._polls += 1
        if self._polls == 1:
            return {}
        self._highwater = len(self.log)
        records = [_Record(o, self.log[o]) for o in range(self._position, len(self.log))]
        self._position = len(self.log)
        return {TopicPartition("__chkpt.t", 0): records} if records else {}

    def highwater(self, tp: Any) -> int | None:
        return self._highwater

    def position(self, tp: Any) -> int:
        return self._position


def _complete(snapshot: int) -> bytes:
    from spark_chkpt.alignment.barrier import IndexEntry

    entry = IndexEntry(
        kind="complete",
        app_id="app",
        snapshot_id=snapshot,
        topic="t",
        attempts=("a",),
        positions={0: 10},
    )
    return entry.value()


def test_a_refresh_returns_every_entry_acknowledged_before_it_started() -> None:
    """The read ends at the control topic's end offset asked for at the start of the
    refresh, not at the high watermark a reused consumer remembers from its previous
    fetch: with that stale mark a first empty poll ended the read, and a commit's
    'already committed?' check missed the complete entry written just before (red
    before: the second refresh returned nothing)."""
    log = [_complete(0)]
    index = control_topic.ControlTopic(
        bootstrap_servers="b:9092", control_topic="__chkpt.t", data_topic="t"
    )
    consumer = _StaleConsumer(log, stale_highwater=None)  # a new consumer
    index._consumer = consumer
    assert [e.snapshot_id for e in index.refresh()] == [0]
    log.append(_complete(1))  # acknowledged by the broker before the next refresh
    consumer._highwater = 1  # what the consumer remembers of its last fetch
    assert [e.snapshot_id for e in index.refresh()] == [1]


class _Cluster:
    def __init__(self, topics: set[str]) -> None:
        self._topics = topics

    def topics(self) -> set[str]:
        return set(self._topics)


def test_a_refresh_on_fresh_metadata_asks_no_metadata_again() -> None:
    """The sink's commit checks the data topic's id (a metadata request) right before
    it reads the index: the read then takes whether the control topic exists from that
    metadata instead of asking again (about 11 ms a request: kafka-python spaces them).
    Without the flag it still asks; a control topic the metadata lacks reads nothing."""
    log = [_complete(0)]
    index = control_topic.ControlTopic(
        bootstrap_servers="b:9092", control_topic="__chkpt.t", data_topic="t"
    )
    consumer = _StaleConsumer(log, stale_highwater=None)
    asked: list[str] = []
    topics = consumer.topics

    def asking() -> set[str]:
        asked.append("metadata")
        return topics()

    consumer.topics = asking  # type: ignore[method-assign]
    consumer._cluster = _Cluster({"__chkpt.t"})  # type: ignore[attr-defined]
    index._consumer = consumer
    assert [e.snapshot_id for e in index.refresh(metadata_fresh=True)] == [0]
    assert asked == []
    log.append(_complete(1))
    assert [e.snapshot_id for e in index.refresh()] == [1]
    assert asked == ["metadata"]
    consumer._cluster = _Cluster(set())  # type: ignore[attr-defined]
    log.append(_complete(2))
    assert index.refresh(metadata_fresh=True) == []


def test_a_refresh_given_fresh_topics_asks_no_metadata_of_its_own() -> None:
    """The source's planner hands over the topics its offset reader has just listed:
    the index reads its new entries without a metadata request of its own, and a
    control topic missing from those topics reads as no entries."""
    index = control_topic.ControlTopic(
        bootstrap_servers="b:9092", control_topic="__chkpt.t", data_topic="t"
    )
    consumer: Any = _StaleConsumer([_complete(0)], stale_highwater=None)
    asked: list[str] = []
    consumer.topics = lambda: asked.append("metadata") or {"__chkpt.t"}
    index._consumer = consumer
    assert [e.snapshot_id for e in index.refresh(topics={"t", "__chkpt.t"})] == [0]
    assert index.refresh(topics={"t"}) == []
    assert asked == []
    assert [e.snapshot_id for e in index.refresh()] == []  # without: one request
    assert asked == ["metadata"]


def test_a_restarted_reader_reads_from_the_offset_its_report_names() -> None:
    """A reader restarting from its offset log seeks to the ``index_from`` of the last
    batch's report instead of reading every entry ever written; an offset past the end
    (the control topic was created again since) reads it from its beginning."""
    index = control_topic.ControlTopic(
        bootstrap_servers="b:9092", control_topic="__chkpt.t", data_topic="t", start_at=3
    )
    index._consumer = _StaleConsumer([_complete(n) for n in range(5)], stale_highwater=None)
    assert [e.snapshot_id for e in index.refresh()] == [3, 4]
    assert [e.offset for e in index.entries] == [3, 4] and index.position == 5
    recreated = control_topic.ControlTopic(
        bootstrap_servers="b:9092", control_topic="__chkpt.t", data_topic="t", start_at=10
    )
    recreated._consumer = _StaleConsumer([_complete(0), _complete(1)], stale_highwater=None)
    assert [e.snapshot_id for e in recreated.refresh()] == [0, 1]


def test_a_broker_refusing_while_the_sink_starts_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker of the cluster killed under a running query: the sink's start (each
    micro-batch's ``streamWriter()``) met its refused connection in the describe of the
    replication factors and the query died (``KafkaConnectionError: 111 ECONNREFUSED``),
    though two brokers of three were serving. Each admin call of the control topic's
    check is asked again while refused, as the driver's other reads are."""
    from kafka.errors import KafkaConnectionError

    from spark_chkpt.kafka.client import outage

    def refusing_once(answer: Any) -> Any:
        tries: list[int] = []

        def call(**kw: Any) -> Any:
            tries.append(1)
            if len(tries) == 1:
                raise KafkaConnectionError("111 ECONNREFUSED")
            return answer

        return call

    monkeypatch.setattr(outage, "RETRY_PAUSE_S", 0.01)
    monkeypatch.setattr(topics, "create_topic", refusing_once(None))
    monkeypatch.setattr(topics, "topic_configs", refusing_once(None))
    monkeypatch.setattr(topics, "replication_factors", refusing_once({"__chkpt.t": 3, "t": 3}))
    monkeypatch.setattr(control_topic, "_ENSURED", set())
    control_topic.ensure_control_topic(bootstrap_servers="b:9092", name="__chkpt.t")
    assert ("b:9092", "__chkpt.t") in control_topic._ENSURED


def test_a_broker_refusing_while_the_coordinator_reads_its_control_topic_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker of the cluster killed under a running barrier sink: the coordinator's
    commit read the control topic's metadata (``consumer.topics()``) from the dead node,
    kafka-python raised ``KafkaConnectionError: 111 ECONNREFUSED`` at once and the query
    died with two brokers of three serving. Each metadata request of the reader is asked
    again while refused, within the request timeout."""
    from kafka.errors import KafkaConnectionError

    from spark_chkpt.kafka.client import outage

    class RefusingOnce:
        config: ClassVar[dict[str, int]] = {"request_timeout_ms": 30_000}

        def __init__(self) -> None:
            self.tries = 0

        def topics(self) -> set[str]:
            self.tries += 1
            if self.tries % 2 == 1:
                raise KafkaConnectionError("111 ECONNREFUSED")
            return {"t"}

    monkeypatch.setattr(outage, "RETRY_PAUSE_S", 0.01)
    reader = control_topic.ControlTopic(
        bootstrap_servers="b:9092", control_topic="__chkpt.t", data_topic="t"
    )
    consumer = RefusingOnce()
    monkeypatch.setattr(reader, "_client", lambda: consumer)
    assert reader.exists() is False
    assert reader.refresh() == []  # no control topic yet: nothing to read
    assert consumer.tries == 4
