"""OffsetReader.earliest against a broker that lists the earliest offset too high (the
embedded broker once answered 2032 for a partition whose records start at 0): pure unit
tests over a stand-in for kafka-python's consumer."""

from __future__ import annotations

import logging
from collections import namedtuple
from typing import Any

import pytest
from kafka import TopicPartition as KTP
from kafka.errors import OffsetOutOfRangeError

from spark_chkpt.kafka.source.offset_reader import OffsetReader
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.offsets import TopicPartition

Record = namedtuple("Record", "offset")


class _Consumer:
    """Lists ``listed`` as earliest; a fetch from 0 returns the first of ``present`` (or
    fails out of range where ``present`` says None, as a Kafka broker does)."""

    def __init__(self, listed: dict[int, int], present: dict[int, int | None]) -> None:
        self.listed, self.present = listed, present
        self.positions: dict[KTP, int] = {}
        self.assigned: list[KTP] = []

    def beginning_offsets(self, ktps: list[KTP], timeout_ms: int | None = None) -> dict[KTP, int]:
        return {k: self.listed[k.partition] for k in ktps}

    def assign(self, ktps: list[KTP]) -> None:
        self.assigned = list(ktps)

    def seek(self, ktp: KTP, offset: int) -> None:
        self.positions[ktp] = offset

    def position(self, ktp: KTP) -> int:
        return self.positions[ktp]

    def poll(self, *, timeout_ms: int, max_records: int) -> dict[KTP, list[Record]]:
        out = {
            k: o
            for k, o in self.positions.items()
            if k in self.assigned and self.present[k.partition] is None and o == 0
        }
        if out:
            raise OffsetOutOfRangeError(out)
        got = {}
        for k in self.assigned:
            first = self.present[k.partition]
            if first is not None and self.positions[k] <= first:
                got[k] = [Record(first)]
                self.positions[k] = first + 1
        return got


def _reader(consumer: _Consumer) -> OffsetReader:
    reader = OffsetReader(
        config=SourceConfig.from_options({"kafka.bootstrap.servers": "x:9092", "subscribe": "t"}),
        client_id="test",
    )
    reader._consumer = consumer
    return reader


def test_a_listed_earliest_above_the_first_record_is_corrected_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = _Consumer(listed={0: 0, 1: 2032, 2: 7}, present={0: 0, 1: 0, 2: 7})
    tps = [TopicPartition("t", p) for p in range(3)]
    with caplog.at_level(logging.WARNING):
        got = _reader(consumer).earliest(tps)
    assert got == {tps[0]: 0, tps[1]: 0, tps[2]: 7}
    assert "t-1: the broker lists the earliest offset as 2032, but the records start at 0" in (
        caplog.text
    )
    assert consumer.assigned == []  # the probe leaves nothing assigned


def test_an_earliest_above_0_on_a_kafka_broker_stands() -> None:
    """Retention deleted the records below it: the fetch from 0 is out of range."""
    consumer = _Consumer(listed={0: 500, 1: 0}, present={0: None, 1: 0})
    tps = [TopicPartition("t", p) for p in range(2)]
    assert _reader(consumer).earliest(tps) == {tps[0]: 500, tps[1]: 0}


def test_no_probe_when_every_partition_starts_at_0() -> None:
    consumer: Any = _Consumer(listed={0: 0}, present={0: 0})
    consumer.poll = None  # a fetch would fail the test
    assert _reader(consumer).earliest([TopicPartition("t", 0)]) == {TopicPartition("t", 0): 0}


class _ProbeConsumer:
    """kafka-python's fetch path as the latest() probe meets it: the broker lists the base
    offset of each partition's last batch plus one (Tansu), every partition's fetch
    response has arrived, and a poll parses them one by one until it holds
    ``max_records`` records, each parsed response setting its partition's high
    watermark. position() validates every assigned partition (counted)."""

    def __init__(self, *, listed: dict[int, int], true_ends: dict[int, int]) -> None:
        self.listed, self.true_ends = listed, true_ends
        self.assigned: list[KTP] = []
        self.high: dict[KTP, int] = {}
        self.polls = 0
        self.validations = 0
        self.config = {"isolation_level": "read_uncommitted"}

    def end_offsets(self, ktps: list[KTP], timeout_ms: int | None = None) -> dict[KTP, int]:
        return {k: self.listed[k.partition] for k in ktps}

    def beginning_offsets(self, ktps: list[KTP], timeout_ms: int | None = None) -> dict[KTP, int]:
        return {k: 0 for k in ktps}

    def assign(self, ktps: list[KTP]) -> None:
        self.assigned = list(ktps)
        self.high = {}

    def seek(self, ktp: KTP, offset: int) -> None:
        pass

    def position(self, ktp: KTP) -> int:
        self.validations += len(self.assigned)
        return self.high.get(ktp, self.listed[ktp.partition] - 1)

    def highwater(self, ktp: KTP) -> int | None:
        return self.high.get(ktp)

    def poll(self, *, timeout_ms: int, max_records: int) -> dict[KTP, list[Record]]:
        self.polls += 1
        got: dict[KTP, list[Record]] = {}
        for k in self.assigned:
            if k in self.high:
                continue
            if sum(len(v) for v in got.values()) >= max_records:
                break
            self.high[k] = self.true_ends[k.partition]
            got[k] = [Record(self.true_ends[k.partition] - 1)]
        return got


def test_the_log_end_probe_corrects_every_partition_in_one_fetch_round() -> None:
    """Tansu lists a log end short of the last batch's records; the probe's high
    watermarks correct it, for 200 partitions in one poll (it took one poll and one
    position() per partition before: 200 polls, 40,000 position validations)."""
    parts = 200
    consumer = _ProbeConsumer(
        listed={p: 10 * p + 1 for p in range(parts)},
        true_ends={p: 10 * p + 5 for p in range(parts)},
    )
    tps = [TopicPartition("t", p) for p in range(parts)]
    assert _reader(consumer).latest(tps) == {tp: 10 * tp.partition + 5 for tp in tps}
    assert consumer.polls == 1
    assert consumer.validations == 0
    assert consumer.assigned == []


def test_the_probe_fetches_only_from_partitions_whose_listed_end_moved() -> None:
    """A partition with no new record batch keeps its probed end without a fetch; one
    whose listed end moved is probed again, alone."""
    consumer = _ProbeConsumer(listed={0: 11, 1: 21, 2: 0}, true_ends={0: 15, 1: 25, 2: 0})
    reader = _reader(consumer)
    tps = [TopicPartition("t", p) for p in range(3)]
    assert reader.latest(tps) == {tps[0]: 15, tps[1]: 25, tps[2]: 0}
    assert consumer.polls == 1
    assert reader.latest(tps) == {tps[0]: 15, tps[1]: 25, tps[2]: 0}
    assert consumer.polls == 1  # nothing moved: no fetch
    consumer.listed[1], consumer.true_ends[1] = 26, 30
    probed: list[list[KTP]] = []
    assign = consumer.assign
    consumer.assign = lambda ktps: (probed.append(list(ktps)), assign(ktps))  # type: ignore[method-assign]
    assert reader.latest(tps) == {tps[0]: 15, tps[1]: 30, tps[2]: 0}
    assert consumer.polls == 2
    assert probed[0] == [KTP("t", 1)]


class _BatchedLog:
    """A partition per ``batches`` entry, each a list of record-batch sizes, as a broker
    fetches them: a fetch from offset o returns the whole batch holding o (every record
    of it decoded by kafka-python, counted in ``decoded``), nothing at the high
    watermark; each response sets the partition's high watermark. ``listed``: the end
    ListOffsets gives (Kafka: the high watermark; Tansu: the last batch's base + 1)."""

    def __init__(self, batches: dict[int, list[int]], *, tansu: bool) -> None:
        self.bounds: dict[int, list[tuple[int, int]]] = {}
        for p, sizes in batches.items():
            at, bounds = 0, []
            for n in sizes:
                bounds.append((at, at + n))
                at += n
            self.bounds[p] = bounds
        self.tansu = tansu
        self.assigned: list[KTP] = []
        self.positions: dict[KTP, int] = {}
        self.high: dict[KTP, int] = {}
        self.decoded = 0
        self.blocked_ms = 0  # kafka-python's poll() waits out its timeout unless records come
        self.config = {"isolation_level": "read_uncommitted"}

    def _end(self, p: int) -> int:
        return self.bounds[p][-1][1] if self.bounds[p] else 0

    def end_offsets(self, ktps: list[KTP], timeout_ms: int | None = None) -> dict[KTP, int]:
        def listed(p: int) -> int:
            if self.tansu and self.bounds[p]:
                return self.bounds[p][-1][0] + 1
            return self._end(p)

        return {k: listed(k.partition) for k in ktps}

    def beginning_offsets(self, ktps: list[KTP], timeout_ms: int | None = None) -> dict[KTP, int]:
        return {k: 0 for k in ktps}

    def assign(self, ktps: list[KTP]) -> None:
        self.assigned = list(ktps)
        self.high = {}

    def seek(self, ktp: KTP, offset: int) -> None:
        self.positions[ktp] = offset

    def highwater(self, ktp: KTP) -> int | None:
        return self.high.get(ktp)

    def poll(self, *, timeout_ms: int, max_records: int) -> dict[KTP, list[Record]]:
        got: dict[KTP, list[Record]] = {}
        for k in self.assigned:
            at = self.positions[k]
            self.high[k] = self._end(k.partition)
            for base, end in self.bounds[k.partition]:
                if base <= at < end:
                    self.decoded += end - base
                    got[k] = [Record(o) for o in range(at, end)]
                    self.positions[k] = end
        if not got:
            self.blocked_ms += timeout_ms
        return got


def test_on_kafka_the_log_end_probe_decodes_no_record() -> None:
    """Kafka lists the high watermark: the probe's fetch starts there and its answer
    carries no record. It started at the last record before, and kafka-python decoded
    that record's whole batch (here 2,000 records per partition, 8,000 in all: the
    kafka-age bench's restarts spent 0.25 s each on it)."""
    consumer = _BatchedLog({p: [5, 2_000] for p in range(4)}, tansu=False)
    tps = [TopicPartition("t", p) for p in range(4)]
    assert _reader(consumer).latest(tps) == dict.fromkeys(tps, 2_005)
    assert consumer.decoded == 0
    # An answer without records does not hold the probe for its 2 s deadline (a poll
    # with the whole deadline as its timeout did, on the broker: 2.1 s per restart).
    assert consumer.blocked_ms <= 50
    assert consumer.assigned == []


def test_on_tansu_the_log_end_probe_still_finds_the_high_watermark() -> None:
    """Tansu lists the last batch's base + 1: the fetch from there returns that batch
    and the high watermark past it, for a last batch of one record and of many."""
    consumer = _BatchedLog({0: [5, 2_000], 1: [3, 1], 2: [7]}, tansu=True)
    tps = [TopicPartition("t", p) for p in range(3)]
    assert _reader(consumer).latest(tps) == {tps[0]: 2_005, tps[1]: 4, tps[2]: 7}
