"""The stream reader's planning decisions, on a scripted offset reader (no Kafka, no Spark):
read limits, minOffsetsPerTrigger/maxTriggerDelay, Trigger.AvailableNow, new and lost
partitions; and the same reader as Spark 4.0 and 4.1 ask it, with no start or limit."""

from __future__ import annotations

import pickle
import tempfile
from typing import Any

import pytest

from spark_chkpt.connectors.kafka_source import KafkaStreamReader
from spark_chkpt.errors import DataLossError
from spark_chkpt.kafka.source.options import SourceConfig, read_task_count
from spark_chkpt.offsets import TopicPartition
from spark_chkpt.runtime import spark_version
from spark_chkpt.runtime.spark_version import read_limits

LIMITS = read_limits()  # Spark 4.2's admission control; empty before it
admission_control = pytest.mark.skipif(
    not LIMITS, reason="Spark 4.2's read limits (pyspark.sql.streaming.datasource)"
)


def ReadAllAvailable() -> Any:  # Spark's class, found on the running Spark
    return LIMITS["ReadAllAvailable"]()


def ReadMaxRows(rows: int) -> Any:
    return LIMITS["ReadMaxRows"](rows)


T0, T1, T2 = (TopicPartition("ev", p) for p in range(3))


class ScriptedOffsets:
    """Answers offset queries from dictionaries the test changes between calls."""

    def __init__(
        self, earliest: dict[TopicPartition, int], latest: dict[TopicPartition, int]
    ) -> None:
        self.earliest_map = earliest
        self.latest_map = latest

    def partitions(self) -> list[TopicPartition]:
        return sorted(self.latest_map)

    def earliest(self, tps: Any) -> dict[TopicPartition, int]:
        return {tp: self.earliest_map[tp] for tp in tps}

    def latest(self, tps: Any) -> dict[TopicPartition, int]:
        return {tp: self.latest_map[tp] for tp in tps}

    def close(self) -> None:
        pass


def _plain_topic(topic: str, *, refresh: bool = True) -> None:
    """No control topic: the topic carries no barriers."""


def reader(
    offsets: ScriptedOffsets, *, task_slots: int | None = None, **options: str
) -> KafkaStreamReader:
    given = {"kafka.bootstrap.servers": "h:1", "subscribe": "ev", **options}
    config = SourceConfig.from_options(given, task_slots=task_slots)
    r = KafkaStreamReader(config=config, options=given)
    r.planner._offsets = offsets  # type: ignore[assignment]
    r.planner.barrier_entries = _plain_topic  # type: ignore[method-assign]
    return r


def _ranges(part: Any) -> list[tuple[int, int, int]]:
    return [(s.range.tp.partition, s.range.start, s.range.end) for s in part.specs]


def test_partitions_per_task_groups_distinct_partitions() -> None:
    offsets = ScriptedOffsets({T0: 0, T1: 0, T2: 0}, {T0: 10, T1: 10, T2: 10})
    parts = reader(offsets, partitionsPerTask="2").partitions(
        {"ev": {"0": 0, "1": 0, "2": 0}}, {"ev": {"0": 10, "1": 10, "2": 10}}
    )
    assert [_ranges(p) for p in parts] == [[(0, 0, 10), (1, 0, 10)], [(2, 0, 10)]]


FOUR = {"ev": {"0": 0, "1": 0, "2": 0, "3": 0}}, {"ev": {"0": 10, "1": 10, "2": 10, "3": 10}}


def _four() -> ScriptedOffsets:
    tps = [TopicPartition("ev", p) for p in range(4)]
    return ScriptedOffsets(dict.fromkeys(tps, 0), dict.fromkeys(tps, 10))


@pytest.mark.parametrize(
    ("slots", "tasks"),
    [
        (None, [[0], [1], [2], [3]]),
        (2, [[0, 1], [2, 3]]),
        (3, [[0, 1], [2, 3]]),
        (8, [[0], [1], [2], [3]]),
    ],
)
def test_read_tasks_fit_the_sessions_task_slots(slots: int | None, tasks: list[list[int]]) -> None:
    """Without partitionsPerTask, a batch's read tasks are at most the session's task
    slots (one wave of tasks per batch); an unknown slot count keeps one partition each.
    (recordsPerTask=1: every record would take a task of its own.)"""
    parts = reader(_four(), task_slots=slots, recordsPerTask="1").partitions(*FOUR)
    assert [[p for p, _, _ in _ranges(part)] for part in parts] == tasks


@pytest.mark.parametrize(
    ("records", "slots", "per_task", "tasks"),
    [
        (0, 2, 5_000, 1),
        (1, 2, 5_000, 1),
        (5_000, 2, 5_000, 1),
        (5_001, 2, 5_000, 2),
        (20_000, 2, 5_000, 2),  # capped at the task slots
        (20_000, 8, 5_000, 4),
        (1_700, 8, 500, 4),
    ],
)
def test_read_task_count_is_one_per_records_per_task_within_the_slots(
    records: int, slots: int, per_task: int, tasks: int
) -> None:
    assert read_task_count(records=records, task_slots=slots, records_per_task=per_task) == tasks


def test_a_small_batch_is_one_read_task_and_a_large_one_takes_every_slot() -> None:
    """The default (recordsPerTask 5,000): a batch of 1,000-odd records over 64
    partitions is one task; 20,000 records take both of two slots, every partition in
    exactly one of them."""
    tps = [TopicPartition("ev", p) for p in range(64)]
    start = {"ev": {str(p): 0 for p in range(64)}}

    def tasks(per_partition: int) -> list[list[int]]:
        offsets = ScriptedOffsets(dict.fromkeys(tps, 0), dict.fromkeys(tps, per_partition))
        end = {"ev": {str(p): per_partition for p in range(64)}}
        parts = reader(offsets, task_slots=2).partitions(start, end)
        return [[p for p, _, _ in _ranges(part)] for part in parts]

    assert tasks(20) == [list(range(64))]  # 1,280 records
    assert tasks(312) == [list(range(32)), list(range(32, 64))]  # 19,968 records
    assert (
        SourceConfig.from_options(
            {"kafka.bootstrap.servers": "h:1", "subscribe": "ev"}
        ).records_per_task
        == 5_000
    )


def test_partitions_per_task_and_min_partitions_override_the_task_slots() -> None:
    grouped = reader(_four(), task_slots=2, partitionsPerTask="1").partitions(*FOUR)
    assert len(grouped) == 4
    # minPartitions asks for that many Spark partitions, as with Spark's Kafka source.
    split = reader(_four(), task_slots=2, minPartitions="8").partitions(*FOUR)
    assert len(split) == 8


@admission_control
def test_max_offsets_per_trigger_is_the_default_read_limit() -> None:
    offsets = ScriptedOffsets({T0: 0, T1: 0}, {T0: 300, T1: 100})
    r = reader(offsets, maxOffsetsPerTrigger="200")
    limit = r.getDefaultReadLimit()
    assert limit == ReadMaxRows(200)
    end = r.latestOffset({"ev": {"0": 0, "1": 0}}, limit)
    assert end == {"ev": {"0": 150, "1": 50}}
    # Trigger.AvailableNow / ReadAllAvailable ignores the option, as Spark requires.
    assert r.latestOffset({"ev": {"0": 0, "1": 0}}, ReadAllAvailable()) == {
        "ev": {"0": 300, "1": 100}
    }


@admission_control
def test_min_offsets_waits_until_enough_or_max_trigger_delay() -> None:
    offsets = ScriptedOffsets({T0: 0}, {T0: 5})
    r = reader(offsets, minOffsetsPerTrigger="10", maxOffsetsPerTrigger="100", maxTriggerDelay="1h")
    start = {"ev": {"0": 0}}
    assert r.latestOffset(start, r.getDefaultReadLimit()) is start  # 5 < 10: skip trigger
    offsets.latest_map[T0] = 12
    assert r.latestOffset(start, r.getDefaultReadLimit()) == {"ev": {"0": 12}}
    r2 = reader(
        ScriptedOffsets({T0: 0}, {T0: 5}),
        minOffsetsPerTrigger="10",
        maxOffsetsPerTrigger="100",
        maxTriggerDelay="0ms",
    )
    assert r2.latestOffset(start, r2.getDefaultReadLimit()) == {"ev": {"0": 5}}


@admission_control
def test_available_now_stops_at_the_offsets_seen_when_it_started() -> None:
    offsets = ScriptedOffsets({T0: 0}, {T0: 50})
    r = reader(offsets, maxOffsetsPerTrigger="30")
    r.prepareForTriggerAvailableNow()
    offsets.latest_map[T0] = 1000  # written after the query started: not read
    offsets.latest_map[T1] = 9
    offsets.earliest_map[T1] = 0
    first = r.latestOffset({"ev": {"0": 0}}, ReadMaxRows(30))
    assert first == {"ev": {"0": 30}}
    second = r.latestOffset(first, ReadMaxRows(30))
    assert second == {"ev": {"0": 50}}
    assert r.latestOffset(second, ReadMaxRows(30)) == second


@admission_control
def test_new_partitions_are_read_from_earliest() -> None:
    offsets = ScriptedOffsets({T0: 0, T1: 4}, {T0: 10, T1: 9})
    r = reader(offsets)
    end = r.latestOffset({"ev": {"0": 10}}, ReadAllAvailable())
    assert end == {"ev": {"0": 10, "1": 9}}
    parts = r.partitions({"ev": {"0": 10}}, end)
    assert [_ranges(p) for p in parts] == [[(1, 4, 9)]]


@admission_control
def test_lost_partition_fails_or_warns() -> None:
    offsets = ScriptedOffsets({T0: 0}, {T0: 10})
    with pytest.raises(DataLossError, match="ev-1"):
        reader(offsets).latestOffset({"ev": {"0": 0, "1": 3}}, ReadAllAvailable())
    end = reader(offsets, failOnDataLoss="false").latestOffset(
        {"ev": {"0": 0, "1": 3}}, ReadAllAvailable()
    )
    assert end == {"ev": {"0": 10}}


@admission_control
def test_offsets_going_back_is_data_loss() -> None:
    offsets = ScriptedOffsets({T0: 0}, {T0: 4})
    with pytest.raises(DataLossError, match=r"ev-0.*ends at 4"):
        reader(offsets).latestOffset({"ev": {"0": 9}}, ReadAllAvailable())


def test_min_partitions_splits_ranges() -> None:
    offsets = ScriptedOffsets({T0: 0, T1: 0}, {T0: 100, T1: 100})
    parts = reader(offsets, minPartitions="4").partitions(
        {"ev": {"0": 0, "1": 0}}, {"ev": {"0": 100, "1": 100}}
    )
    assert len(parts) == 4
    assert sorted(r for p in parts for r in _ranges(p)) == [
        (0, 0, 50),
        (0, 50, 100),
        (1, 0, 50),
        (1, 50, 100),
    ]


def test_reader_pickles_without_its_driver_consumer() -> None:
    r = reader(ScriptedOffsets({T0: 0}, {T0: 1}))
    clone = pickle.loads(pickle.dumps(r))
    assert clone.planner._offsets is None
    assert clone.config == r.config


def test_a_batch_planned_before_the_control_topic_existed_replays_as_plain() -> None:
    """Batch N was planned while the topic had no control topic (no report in its end
    offset). Replayed after the control topic appeared, it must read what the first run
    read: barriers skipped, no tagged record dropped."""
    offsets = ScriptedOffsets({T0: 0}, {T0: 10})
    r = reader(offsets)
    r.planner.barrier_entries = lambda topic, refresh=True: []  # type: ignore[method-assign]
    parts = r.partitions({"ev": {"0": 0}}, {"ev": {"0": 10}})
    specs = [s for p in parts for s in p.specs]
    assert [(s.markers, s.filter) for s in specs] == [(True, None)]
    # A batch planned with a report keeps its mode: aligned filters by the index.
    parts = r.partitions(
        {"ev": {"0": 0}},
        {"ev": {"0": 10}, "__chkpt__": {"topics": {"ev": {"mode": "aligned"}}}},
    )
    (spec,) = [s for p in parts for s in p.specs]
    assert spec.filter is not None and spec.filter.confirm_until == 10


def test_before_spark_4_2_the_reader_keeps_its_start_and_applies_the_limit() -> None:
    """Spark 4.0 and 4.1 call latestOffset() alone: the reader starts at its initial
    offsets, caps each batch at maxOffsetsPerTrigger, and goes on from the end of the
    batch Spark planned (partitions), or recovered after a restart."""
    offsets = ScriptedOffsets({T0: 0}, {T0: 50})
    r = reader(offsets, startingOffsets="earliest", maxOffsetsPerTrigger="30")
    r.planner.initial_offsets = lambda: {"ev": {"0": 0}}  # type: ignore[method-assign]
    first = r.latestOffset()
    assert first == {"ev": {"0": 30}}
    r.partitions(r.initialOffset(), first)
    second = r.latestOffset()
    assert second == {"ev": {"0": 50}}
    r.partitions(first, second)
    assert r.latestOffset() == second  # nothing new: the start again, no batch
    restarted = reader(offsets, startingOffsets="earliest", maxOffsetsPerTrigger="30")
    restarted.partitions(first, first)  # Spark's setLatestSeenOffset after a restart
    assert restarted.latestOffset() == second


def test_before_spark_4_2_a_one_batch_trigger_takes_everything(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trigger.AvailableNow before Spark 4.2 is one batch: start() hands the query's
    sources a file (spark_version.claim_available_now), and the batch is not capped."""
    options = {
        "kafka.bootstrap.servers": "h:1",
        "subscribe": "ev",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "30",
    }
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    handoff = spark_version._handoff_file(spark_version.options_key(options))
    handoff.parent.mkdir(parents=True, exist_ok=True)
    handoff.write_text("1\n")
    offsets = ScriptedOffsets({T0: 0}, {T0: 50})
    r = reader(offsets, startingOffsets="earliest", maxOffsetsPerTrigger="30")
    r.planner.initial_offsets = lambda: {"ev": {"0": 0}}  # type: ignore[method-assign]
    assert r.latestOffset() == {"ev": {"0": 50}}
    assert not handoff.exists()  # claimed once: another query's reader is capped
    other = reader(offsets, startingOffsets="earliest", maxOffsetsPerTrigger="30")
    other.planner.initial_offsets = lambda: {"ev": {"0": 0}}  # type: ignore[method-assign]
    assert other.latestOffset() == {"ev": {"0": 30}}
