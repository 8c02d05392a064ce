"""The confluent adapter's error rules, on a scripted librdkafka consumer (no broker)."""

from __future__ import annotations

from typing import Any

import confluent_kafka as ck
import pytest

from spark_chkpt.errors import KafkaReadError
from spark_chkpt.kafka.client.consumer import ConfluentConsumer, OffsetOutOfRangeError
from spark_chkpt.offsets import TopicPartition


class Message:
    def __init__(self, partition: int, offset: int, error: Any = None) -> None:
        self._partition, self._offset, self._error = partition, offset, error

    def error(self) -> Any:
        return self._error

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)

    def headers(self) -> None:
        return None


class Scripted:
    """Hands out one scripted batch per poll; records seeks and reassignments."""

    def __init__(self, batches: list[list[Message]]) -> None:
        self.batches = batches
        self.calls: list[tuple[str, Any]] = []
        self.refuse_seek = False

    def poll(self, timeout: float) -> Message | None:
        return self.batches[0][0] if self.batches and self.batches[0] else None

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        assert 0 <= num_messages <= 1_000_000
        batch = self.batches.pop(0)
        return batch[1:]

    def seek(self, tp: Any) -> None:
        if self.refuse_seek:
            raise ck.KafkaException(ck.KafkaError(ck.KafkaError._STATE))
        self.calls.append(("seek", (tp.partition, tp.offset)))

    def incremental_unassign(self, tps: list[Any]) -> None:
        self.calls.append(("unassign", [tp.partition for tp in tps]))

    def incremental_assign(self, tps: list[Any]) -> None:
        self.calls.append(("assign", [(tp.partition, tp.offset) for tp in tps]))

    def assign(self, tps: list[Any]) -> None:
        pass

    def close(self) -> None:
        pass


def _adapter(batches: list[list[Message]]) -> tuple[ConfluentConsumer, Scripted]:
    adapter = ConfluentConsumer({"bootstrap.servers": "127.0.0.1:1"})
    adapter._consumer.close()
    scripted = Scripted(batches)
    adapter._consumer = scripted
    adapter.assign({TopicPartition("t", 0): 0, TopicPartition("t", 1): 0})
    return adapter, scripted


def test_records_polled_with_an_out_of_range_error_are_returned_then_the_error() -> None:
    out_of_range = ck.KafkaError(ck.KafkaError._AUTO_OFFSET_RESET)
    adapter, _ = _adapter(
        [[Message(0, 5), Message(1, 7), Message(0, 9, out_of_range), Message(1, 8)]]
    )
    polled = adapter.poll(timeout_ms=10, max_records=2_000_000)
    assert [r.offset for r in polled[TopicPartition("t", 1)]] == [7, 8]
    assert [r.offset for r in polled[TopicPartition("t", 0)]] == [5]
    with pytest.raises(OffsetOutOfRangeError, match="t-0"):
        adapter.poll(timeout_ms=10, max_records=10)
    assert adapter.poll(timeout_ms=10, max_records=10) == {}  # raised once


def test_a_partition_that_refuses_seek_is_assigned_again_at_the_offset() -> None:
    adapter, scripted = _adapter([])
    adapter.seek(TopicPartition("t", 1), 42)
    scripted.refuse_seek = True
    adapter.seek(TopicPartition("t", 0), 17)
    assert scripted.calls == [("seek", (1, 42)), ("unassign", [0]), ("assign", [(0, 17)])]


def test_transient_errors_are_left_to_librdkafka_and_others_fail_the_task() -> None:
    transport = ck.KafkaError(ck.KafkaError._TRANSPORT)
    adapter, _ = _adapter([[Message(0, 1), Message(0, -1, transport), Message(0, 2)]])
    polled = adapter.poll(timeout_ms=10, max_records=10)
    assert [r.offset for r in polled[TopicPartition("t", 0)]] == [1, 2]
    denied = ck.KafkaError(ck.KafkaError.TOPIC_AUTHORIZATION_FAILED)
    adapter, _ = _adapter([[Message(0, 1, denied)]])
    with pytest.raises(KafkaReadError, match="t-0 offset 1"):
        adapter.poll(timeout_ms=10, max_records=10)


@pytest.mark.parametrize(
    ("stamps", "times", "types"),
    [
        ([(1, 10), (1, 11), (1, 12)], [10, 11, 12], [0, 0, 0]),  # create time
        ([(2, 10), (2, 11), (2, 12)], [10, 11, 12], [1, 1, 1]),  # log-append time
        ([(0, -1), (2, 11), (1, 12)], [-1, 11, 12], [0, 1, 0]),  # none, mixed
        ([(0, -1)] * 3, [-1, -1, -1], [0, 0, 0]),  # no timestamps at all
    ],
)
def test_messages_become_records_field_by_field(
    stamps: list[tuple[int, int]], times: list[int], types: list[int]
) -> None:
    """The records built column-wise from librdkafka's messages (``map`` over the
    message methods) carry each message's own key, value, offset, timestamp, type and
    headers, in order."""
    adapter, _ = _adapter([])
    keys = [b"k0", None, b""]
    headers = [None, [("h", b"1"), ("h", None)], None]
    messages = [
        ck.Message(
            topic="t",
            partition=0,
            offset=40 + i,
            key=keys[i],
            value=b"v%d" % i,
            timestamp=stamps[i],
            headers=headers[i],
        )
        for i in range(3)
    ]
    records = adapter._records(messages)
    assert [tuple(r) for r in records] == [
        (keys[i], b"v%d" % i, 40 + i, times[i], types[i], headers[i]) for i in range(3)
    ]
    assert adapter._records([]) == []
