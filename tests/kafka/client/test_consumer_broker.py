"""Both executor clients against the real broker, through the fetcher (no Spark here).

Every test runs with kafka-python and with confluent-kafka: the two must return the
same rows, stop at the same offsets and report loss the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_chkpt.errors import DataLossError, KafkaReadError
from spark_chkpt.kafka.client.consumer import CLIENTS, RangeConsumer, build_consumer
from spark_chkpt.kafka.client.pool import ConsumerPool
from spark_chkpt.kafka.source.fetcher import RangeFetcher
from spark_chkpt.kafka.source.intake import ReadSpec
from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.prefetch import PrefetchBuffer
from spark_chkpt.offsets import OffsetRange, TopicPartition
from tests.helpers import produce, produce_transactions

pytestmark = pytest.mark.integration


def _config(bootstrap_servers: str, topic: str, client: str, **options: str) -> SourceConfig:
    return SourceConfig.from_options(
        {
            "kafka.bootstrap.servers": bootstrap_servers,
            "subscribe": topic,
            "kafka.client": client,
            "includeHeaders": "true",
            "kafkaConsumer.pollTimeoutMs": "20000",
            **options,
        },
        streaming=False,
    )


def _read(
    config: SourceConfig,
    rng: OffsetRange | list[ReadSpec],
    *,
    pool: ConsumerPool | None = None,
    prefetch: PrefetchBuffer | None = None,
) -> tuple[pa.Table, RangeFetcher]:
    """Read one range (or several, with one consumer) into a table."""
    specs = rng if isinstance(rng, list) else [ReadSpec(range=rng)]
    with RangeFetcher(config=config, client_id="test", pool=pool, prefetch=prefetch) as fetcher:
        batches = list(fetcher.read_group(specs))
    table = pa.Table.from_batches(batches, schema=fetcher._schema)
    return table, fetcher


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def pool() -> Iterator[ConsumerPool]:
    """A consumer pool of the test's own; its consumers are closed afterwards."""
    consumers = ConsumerPool()
    yield consumers
    consumers.close_all()


def test_both_clients_return_the_same_rows(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    topic = make_topic()
    produce(
        producer,
        topic,
        [b"v%d" % i for i in range(300)],
        key=lambda i: None if i % 7 == 0 else b"k%d" % i,
        headers=lambda i: [("h", b"%d" % i), ("empty", b"")] if i % 3 == 0 else None,
    )
    rng = OffsetRange(TopicPartition(topic, 0), 5, 290)
    tables = [_read(_config(bootstrap_servers, topic, c), rng)[0] for c in CLIENTS]
    assert tables[0].num_rows == 285
    assert tables[0].column("offset").to_pylist() == list(range(5, 290))
    assert tables[0].equals(tables[1]), "kafka-python and confluent-kafka rows differ"
    row = tables[1].slice(1, 1).to_pylist()[0]  # offset 6: a key, headers, a create time
    assert row["key"] == b"k6" and row["headers"] == [
        {"key": "h", "value": b"6"},
        {"key": "empty", "value": b""},
    ]
    assert row["timestampType"] == 0 and row["timestamp"].year >= 2024


def test_a_pooled_consumer_reads_a_partition_again_after_it_was_paused(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    client: str,
    pool: ConsumerPool,
) -> None:
    topic = make_topic(partitions=2)
    produce(producer, topic, [b"%d" % i for i in range(40)], partitions=2)
    config = _config(bootstrap_servers, topic, client)
    for _ in range(3):  # the same consumer, the same partitions, paused at each end
        for p in (0, 1):
            table, _ = _read(config, OffsetRange(TopicPartition(topic, p), 0, 20), pool=pool)
            assert table.num_rows == 20
    assert pool.created == 1 and pool.reused == 5


def test_a_pooled_consumer_reads_a_partition_it_left_paused_with_records_in_hand(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    client: str,
    pool: ConsumerPool,
) -> None:
    """A grouped task ends one range while the client still holds fetched records of it
    (kafka-python parks them when the partition is paused); the next task on the same
    consumer reads that partition on at once. kafka-python 3.0 never fetched it again (its
    parked records are restored only while no other partition's are in hand): the bench
    stalled for the whole poll timeout in most queries with two partitions per task."""
    topic = make_topic(partitions=2)
    produce(producer, topic, [b"%d" % i for i in range(400)], partitions=2)
    config = _config(
        bootstrap_servers,
        topic,
        client,
        maxRecordsPerArrowBatch="5",
        prefetchRecords="0",
        **{"kafkaConsumer.pollTimeoutMs": "8000"},
    )
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    specs = [ReadSpec(range=OffsetRange(p0, 0, 10)), ReadSpec(range=OffsetRange(p1, 0, 150))]
    table, _ = _read(config, specs, pool=pool)
    assert table.num_rows == 160
    for start, end in ((10, 60), (60, 200)):
        started = time.monotonic()
        table, _ = _read(config, OffsetRange(p0, start, end), pool=pool)
        assert table["offset"].to_pylist() == list(range(start, end))
        assert time.monotonic() - started < 3.0  # not a stall waited out or replaced
    assert pool.created == 1


class _Wedged:
    """A real consumer that stopped handing out records (what a wedged client looks like
    to the fetcher): its polls come back empty."""

    def __init__(self, inner: RangeConsumer) -> None:
        self.inner = inner
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def poll(self, *, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        time.sleep(min(timeout_ms, 100) / 1000)
        return {}

    def close(self) -> None:
        self.closed = True
        self.inner.close()


def test_a_consumer_that_stops_fetching_is_replaced_once_and_the_range_read_whole(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    client: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No records for half of pollTimeoutMs while the planned range goes on: the task
    closes its consumer and reads on with a new one; a second stall fails it as before."""
    topic = make_topic(partitions=2)
    produce(producer, topic, [b"%d" % i for i in range(40)], partitions=2)
    config = _config(bootstrap_servers, topic, client, **{"kafkaConsumer.pollTimeoutMs": "4000"})
    built: list[Any] = []

    def factory(settings: Any) -> RangeConsumer:
        consumer = build_consumer(settings)
        built.append(_Wedged(consumer) if not built else consumer)
        return built[-1]  # type: ignore[no-any-return]

    pool = ConsumerPool(factory=factory)
    specs = [ReadSpec(range=OffsetRange(TopicPartition(topic, p), 0, 20)) for p in (0, 1)]
    try:
        started = time.monotonic()
        table, _ = _read(config, specs, pool=pool)
        took = time.monotonic() - started
    finally:
        pool.close_all()
    pairs = zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True)
    assert sorted(pairs) == [(p, o) for p in (0, 1) for o in range(20)]
    assert len(built) == 2 and built[0].closed and pool.created == 2
    assert 2.0 <= took < 4.0  # replaced after 2 s, long before the 4 s poll timeout
    assert "replacing the consumer" in caplog.text and f"{topic}-0 offset 0" in caplog.text

    always_wedged = ConsumerPool(factory=lambda settings: _Wedged(build_consumer(settings)))
    try:
        with pytest.raises(KafkaReadError, match="no records from"):
            _read(config, specs, pool=always_wedged)
    finally:
        always_wedged.close_all()


def test_a_range_ending_on_a_transaction_marker_is_read_past(
    bootstrap_servers: str, make_topic: Callable[..., str], client: str
) -> None:
    topic = make_topic()
    produce_transactions(bootstrap_servers, topic, batches=2, size=3)
    config = _config(bootstrap_servers, topic, client)
    # offsets 0-2 data, 3 commit marker, 4-6 data, 7 commit marker
    first, _ = _read(config, OffsetRange(TopicPartition(topic, 0), 0, 4))
    rest, _ = _read(config, OffsetRange(TopicPartition(topic, 0), 4, 8))
    assert first.column("offset").to_pylist() == [0, 1, 2]
    assert rest.column("offset").to_pylist() == [4, 5, 6]
    assert rest.column("value").to_pylist() == [b"t1-0", b"t1-1", b"t1-2"]


def test_a_pooled_consumer_is_not_reused_after_its_topic_was_recreated(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    client: str,
    pool: ConsumerPool,
) -> None:
    """The pool asks for the topic's id at each task: a confluent consumer that read the
    old topic is closed and a new one reads the new topic (kafka-python, which follows a
    changed id itself, is reused and costs no call)."""
    from spark_chkpt.kafka.client.topics import create_topic, delete_topic

    topic = make_topic()
    produce(producer, topic, [b"old%d" % i for i in range(10)])
    config = _config(bootstrap_servers, topic, client, prefetchRecords="0")
    table, _ = _read(config, OffsetRange(TopicPartition(topic, 0), 0, 10), pool=pool)
    assert table.num_rows == 10
    delete_topic(bootstrap_servers=bootstrap_servers, name=topic)
    create_topic(bootstrap_servers=bootstrap_servers, name=topic, partitions=1)
    produce(producer, topic, [b"new%d" % i for i in range(3)])
    for _ in range(2):  # the second task reuses the consumer that read the new topic
        table, _ = _read(config, OffsetRange(TopicPartition(topic, 0), 0, 3), pool=pool)
        assert table.column("value").to_pylist() == [b"new0", b"new1", b"new2"]
    retired = 1 if client == "confluent" else 0
    assert (pool.created, pool.reused, pool.retired) == (1 + retired, 2 - retired, retired)


_REUSE_AFTER_RECREATE = """
import sys, time, confluent_kafka
from kafka import KafkaProducer
from spark_chkpt.kafka.client.topics import create_topic, delete_topic
servers, topic = sys.argv[1], sys.argv[2]
def fill(tag):
    producer = KafkaProducer(bootstrap_servers=servers)
    for i in range(3):
        producer.send(topic, b"%s%d" % (tag, i))
    producer.flush(); producer.close()
def read(consumer):
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.unassign()
    return got
consumer = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": "g-" + topic,
    "enable.auto.commit": False, "auto.offset.reset": "error", "fetch.queue.backoff.ms": 20})
fill(b"old")
assert read(consumer) == [b"old0", b"old1", b"old2"]
for tag in (b"new", b"newer"):
    delete_topic(bootstrap_servers=servers, name=topic)
    time.sleep(3)  # on Tansu librdkafka's metadata update crashed here (docs/known-limits.md)
    create_topic(bootstrap_servers=servers, name=topic, partitions=1)
    fill(tag)
    got = read(consumer)
    assert got == [tag + b"0", tag + b"1", tag + b"2"], got
consumer.close()
"""


def test_a_librdkafka_consumer_survives_its_topic_deleted_and_recreated(
    bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """Without this project's code or Spark: one librdkafka consumer reads a topic, the
    topic is deleted (the consumer idle, unassigned, as in the pool) and created again,
    twice, and the same consumer reads the new topic. On the embedded Tansu broker the
    process dies of SIGSEGV a few seconds after the delete; on Apache Kafka it must not,
    or librdkafka cannot be the default client."""
    import subprocess
    import sys

    topic = make_topic()
    child = subprocess.run(
        [sys.executable, "-c", _REUSE_AFTER_RECREATE, bootstrap_servers, topic],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])


def test_offsets_gone_from_the_partition_are_data_loss(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any, client: str
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"%d" % i for i in range(10)])
    gone = OffsetRange(TopicPartition(topic, 0), 5, 30)  # planned before a topic was recreated
    with pytest.raises(DataLossError, match=rf"{topic}-0: offsets \[10, 30\)"):
        _read(_config(bootstrap_servers, topic, client), gone)
    table, _ = _read(_config(bootstrap_servers, topic, client, failOnDataLoss="false"), gone)
    assert table.column("offset").to_pylist() == [5, 6, 7, 8, 9]


def test_records_fetched_past_the_end_serve_the_next_range_and_only_it(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    client: str,
    pool: ConsumerPool,
) -> None:
    topic = make_topic()
    produce(producer, topic, [b"%d" % i for i in range(1000)])
    config = _config(bootstrap_servers, topic, client)
    tp = TopicPartition(topic, 0)
    prefetch = PrefetchBuffer()
    first, _ = _read(config, OffsetRange(tp, 0, 100), pool=pool, prefetch=prefetch)
    assert len(prefetch) > 0, "one fetch of 1,000 small records goes past offset 100"
    second, fetcher = _read(config, OffsetRange(tp, 100, 400), pool=pool, prefetch=prefetch)
    assert fetcher.stats.prefetched > 0 and prefetch.stats.hits == 1
    assert second.column("offset").to_pylist() == list(range(100, 400))
    # a replay of an older range: the buffer (records from 400 on) must not be used
    again, fetcher = _read(config, OffsetRange(tp, 50, 450), pool=pool, prefetch=prefetch)
    assert fetcher.stats.prefetched == 0 and prefetch.stats.invalidated == 1
    assert again.column("offset").to_pylist() == list(range(50, 450))
    assert first.column("offset").to_pylist() == list(range(100))


def test_a_small_range_fetches_about_what_it_needs_once_the_record_size_is_known(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any, pool: ConsumerPool
) -> None:
    """kafka-python fetches up to max.partition.fetch.bytes (1 MB) of a partition, and a
    read task decodes all of it: a 100-record range of a 1 MB partition decoded the whole
    partition. Once a read in the worker has seen the topic's record size, a small
    range asks for about its own bytes: the records fetched past its end stay few."""
    topic = make_topic()
    produce(producer, topic, [b"%05d" % i + b"x" * 200 for i in range(5000)])
    config = _config(bootstrap_servers, topic, "kafka-python")
    tp = TopicPartition(topic, 0)
    first, _ = _read(config, OffsetRange(tp, 0, 100), pool=pool, prefetch=PrefetchBuffer())
    prefetch = PrefetchBuffer()
    second, _ = _read(config, OffsetRange(tp, 100, 200), pool=pool, prefetch=prefetch)
    assert first.column("offset").to_pylist() == list(range(100))
    assert second.column("offset").to_pylist() == list(range(100, 200))
    assert 0 < len(prefetch) < 1000, len(prefetch)  # 64 KB of ~220-byte records, not 1 MB


def test_a_reassigned_consumer_knows_no_end_until_it_fetches(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any, client: str
) -> None:
    """A stale end from an earlier task would turn new records into false data loss."""
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    produce(producer, topic, [b"%d" % i for i in range(5)])
    consumer = build_consumer(
        _config(bootstrap_servers, topic, client).fetch_settings(client_id="t")
    )
    try:
        consumer.assign({tp: 0})
        assert _poll_until(consumer, tp, 5) == list(range(5)) and consumer.highwater(tp) == 5
        produce(producer, topic, [b"%d" % i for i in range(5, 8)])
        consumer.assign({})
        consumer.assign({tp: 5})
        assert consumer.highwater(tp) is None
        assert _poll_until(consumer, tp, 3) == [5, 6, 7] and consumer.highwater(tp) == 8
    finally:
        consumer.close()


def _poll_until(consumer: RangeConsumer, tp: TopicPartition, count: int) -> list[int]:
    offsets: list[int] = []
    deadline = time.monotonic() + 20
    while len(offsets) < count and time.monotonic() < deadline:
        offsets += [r.offset for r in consumer.poll(timeout_ms=500, max_records=100).get(tp, [])]
    return offsets


def test_one_consumer_reading_several_partitions_keeps_each_in_order(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any, client: str
) -> None:
    topic = make_topic(partitions=3)
    produce(producer, topic, [b"%d" % i for i in range(3000)], partitions=3)
    config = _config(bootstrap_servers, topic, client)
    specs = [ReadSpec(range=OffsetRange(TopicPartition(topic, p), 0, 1000)) for p in range(3)]
    table, _ = _read(config, specs)
    for p in range(3):
        rows = table.filter(pc.equal(table.column("partition"), p))
        assert rows.column("offset").to_pylist() == list(range(1000))
        assert rows.column("value").to_pylist() == [b"%d" % (3 * o + p) for o in range(1000)]


def _tagged(tag: str) -> Callable[[int], list[tuple[str, bytes]]]:
    from spark_chkpt.alignment.barrier import ATTEMPT_HEADER

    return lambda i: [(ATTEMPT_HEADER, tag.encode())]


def _barrier_record(producer: Any, topic: str, snapshot: int, attempts: list[str]) -> None:
    from spark_chkpt.alignment.barrier import BARRIER_KEY, Barrier

    marker = Barrier(app_id="up", snapshot_id=snapshot, attempts=tuple(attempts))
    producer.send(
        topic, key=BARRIER_KEY, value=marker.value(), partition=0, headers=marker.headers()
    )
    producer.flush()


def _values(table: pa.Table) -> list[str]:
    return [bytes(v).decode() for v in table.column("value").to_pylist()]


def test_barrier_records_are_skipped_even_on_a_topic_read_as_plain(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any, client: str
) -> None:
    """A reader that cannot see the control topic (custom controlTopic, ACLs, deleted)
    reads the topic as plain: the barrier records must still never become rows."""
    topic = make_topic()
    produce(producer, topic, [b"a-0", b"a-1"], headers=_tagged("A"))
    _barrier_record(producer, topic, 0, ["A"])
    produce(producer, topic, [b"plain"])
    table, fetcher = _read(
        _config(bootstrap_servers, topic, client), OffsetRange(TopicPartition(topic, 0), 0, 4)
    )
    assert _values(table) == ["a-0", "a-1", "plain"]
    assert fetcher.stats.barriers == 1


def test_a_barrier_confirms_its_attempts_when_the_index_lost_them(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    client: str,
    pool: ConsumerPool,
) -> None:
    """The index entry of snapshot 0 is gone (retention, a recreated control topic): the
    barrier record itself names the attempts it confirms, so A's records are read and the
    failed attempt X's, which no barrier names, are still dropped, all in offset order."""
    topic = make_topic()
    produce(producer, topic, [b"a-0"], headers=_tagged("A"))
    produce(producer, topic, [b"x-0", b"x-1"], headers=_tagged("X"))
    produce(producer, topic, [b"a-1"], headers=_tagged("A"))
    produce(producer, topic, [b"plain-0"])
    _barrier_record(producer, topic, 0, ["A"])
    produce(producer, topic, [b"b-0"], headers=_tagged("B"))
    _barrier_record(producer, topic, 1, ["B"])
    produce(producer, topic, [b"x-2"], headers=_tagged("X"))
    produce(producer, topic, [b"plain-1"])
    from spark_chkpt.alignment.cut import RecordFilter

    config = _config(bootstrap_servers, topic, client)
    index_only_b = RecordFilter(confirmed=frozenset({"B"}), confirm_until=8)
    tp = TopicPartition(topic, 0)
    table, fetcher = _read(
        config, [ReadSpec(range=OffsetRange(tp, 0, 8), markers=True, filter=index_only_b)]
    )
    assert _values(table) == ["a-0", "a-1", "plain-0", "b-0"]
    assert (fetcher.stats.dropped, fetcher.stats.dropped_attempts) == (2, {"X"})
    # The same when a range comes whole from the prefetch buffer: its held records are
    # judged at its end (plain-1 waits behind x-2, and must not be lost with it).
    prefetch = PrefetchBuffer()
    to_ten = RecordFilter(confirmed=frozenset({"B"}), confirm_until=10)
    first, _ = _read(
        config,
        [ReadSpec(range=OffsetRange(tp, 0, 6), markers=True, filter=to_ten)],
        pool=pool,
        prefetch=prefetch,
    )
    second, fetcher = _read(
        config,
        [ReadSpec(range=OffsetRange(tp, 6, 10), markers=True, filter=to_ten)],
        pool=pool,
        prefetch=prefetch,
    )
    assert fetcher.stats.prefetched == 4
    assert _values(first) == ["a-0", "a-1", "plain-0"]
    assert _values(second) == ["b-0", "plain-1"]
    assert (fetcher.stats.dropped, fetcher.stats.dropped_attempts) == (1, {"X"})


def _mixed_topic(bootstrap_servers: str, topic: str, producer: Any) -> int:
    """One partition holding every shape of batch a read meets; returns its end offset.

    Plain batches with null keys, null values, headers and empty headers; one batch per
    codec; committed and aborted transactions (their markers take offsets); a barrier
    record and tagged records (read as plain: the barrier is never a row)."""
    from kafka import KafkaProducer

    produce(
        producer,
        topic,
        [b"v%d" % i if i % 11 else b"" for i in range(40)],
        key=lambda i: None if i % 7 == 0 else b"k%d" % i,
        headers=lambda i: [("h", b"%d" % i), ("empty", b"")] if i % 3 == 0 else None,
    )
    producer.send(topic, key=b"null-value", value=None, partition=0)
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        compressed = KafkaProducer(
            bootstrap_servers=bootstrap_servers, compression_type=codec, linger_ms=50
        )
        produce(
            compressed,
            topic,
            [(b"%s-%d-" % (codec.encode(), i)) * 20 for i in range(60)],
            headers=lambda i: [("i", b"%d" % i)] if i % 5 == 0 else None,
        )
        compressed.close()
    tx = KafkaProducer(
        bootstrap_servers=bootstrap_servers,
        transactional_id=f"tx-{topic}",
        compression_type="gzip",
    )
    tx.init_transactions()
    for n, commit in enumerate((True, False, True, False, True)):
        tx.begin_transaction()
        for i in range(7):
            tx.send(topic, value=b"tx%d-%d" % (n, i), key=b"%d" % i, partition=0)
        tx.flush()  # an abort drops what is not sent yet: these reach the log
        if commit:
            tx.commit_transaction()
        else:
            tx.abort_transaction()
    tx.close()
    produce(producer, topic, [b"a-0", b"a-1"], headers=_tagged("A"))
    _barrier_record(producer, topic, 0, ["A"])
    produce(producer, topic, [b"after-%d" % i for i in range(30)])
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    reader = KafkaConsumer(bootstrap_servers=bootstrap_servers)
    try:
        ktp = KafkaTopicPartition(topic, 0)
        return int(reader.end_offsets([ktp])[ktp])
    finally:
        reader.close()


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_columns_and_records_decode_the_same_table(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any, isolation: str
) -> None:
    """decode=columns (record batches straight into Arrow) against decode=records
    (kafka-python's record objects): the same rows, byte for byte, from every start,
    with Arrow batches cut small and the prefetch buffer handing records across reads."""
    topic = make_topic()
    end = _mixed_topic(bootstrap_servers, topic, producer)
    tp = TopicPartition(topic, 0)
    tables: dict[str, list[pa.Table]] = {}
    barriers: dict[str, int] = {}
    for decode in ("columns", "records"):
        config = _config(
            bootstrap_servers,
            topic,
            "kafka-python",
            decode=decode,
            maxRecordsPerArrowBatch="50",
            **{"kafka.isolation.level": isolation},
        )
        prefetch = PrefetchBuffer()
        got = []
        # starts inside compressed batches and inside transactions, ends past markers
        for start, stop in ((0, end), (0, 45), (45, 130), (130, 131), (131, 290), (290, end)):
            table, fetcher = _read(config, OffsetRange(tp, start, stop), prefetch=prefetch)
            got.append(table)
            assert fetcher._columnar == (decode == "columns")  # the path under test ran
            barriers[decode] = barriers.get(decode, 0) + fetcher.stats.barriers
        tables[decode] = got
    columns, records = tables["columns"], tables["records"]
    for a, b in zip(columns, records, strict=True):
        assert a.schema == b.schema
        assert a.equals(b), a.to_pylist()[:3]
    whole = columns[0]
    values = whole.column("value").to_pylist()
    aborted = [v for v in values if v is not None and v.startswith((b"tx1-", b"tx3-"))]
    assert bool(aborted) == (isolation == "read_uncommitted")
    assert b"tx4-6" in values and b"zstd-59-" * 20 in values and None in values
    assert whole.column("key").null_count > 0 and whole.column("headers").null_count > 0
    assert barriers["columns"] == barriers["records"] == 2  # once whole, once in a part
    assert pa.concat_tables(columns[1:]).equals(whole)


@pytest.mark.parametrize(("option", "expected"), [(None, 10), ("250", 250)])
def test_the_planners_metadata_refreshes_are_spaced_10_ms_unless_the_user_says(
    bootstrap_servers: str, option: str | None, expected: int
) -> None:
    """kafka-python 3.0.12 spaces metadata refreshes by its cluster metadata's
    ``retry_backoff_ms`` and does not pass the consumer's on (100 ms whatever it is
    given). The planner asks for fresh metadata on every call, so a query's
    initialOffset, prepareForTriggerAvailableNow and latestOffset, back to back, each
    waited about 100 ms (make bench: ~440 ms of planning per query start, ~130 ms now).
    Red before: 100 in both cases."""
    from spark_chkpt.kafka.source.offset_reader import OffsetReader

    options = {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": "any"}
    if option is not None:
        options["kafka.retry.backoff.ms"] = option
    reader = OffsetReader(config=SourceConfig.from_options(options), client_id="backoff")
    try:
        assert reader.consumer._cluster.config["retry_backoff_ms"] == expected
        reader.consumer.topics()  # the consumer works with it
    finally:
        reader.close()


class _Writer:
    """What chkpt-kafka sinks write into one topic, partition by partition: tagged records,
    barriers (their offsets kept) and the index entries a planner would read."""

    def __init__(self, producer: Any, topic: str, partitions: int) -> None:
        self.producer, self.topic, self.partitions = producer, topic, partitions
        self.entries: list[Any] = []
        self.revocations: list[Any] = []

    def records(self, make: Callable[[int], tuple[str | None, bytes]], n: int) -> None:
        from spark_chkpt.alignment.barrier import ATTEMPT_HEADER

        for p in range(self.partitions):
            for i in range(n):
                tag, value = make(i)
                headers = [(ATTEMPT_HEADER, tag.encode())] if tag else []
                self.producer.send(
                    self.topic, value=b"%d-" % p + value, partition=p, headers=headers
                )
        self.producer.flush()

    def barrier(self, app: str, snapshot: int, attempts: list[str], *, index: bool = True) -> None:
        from spark_chkpt.alignment.barrier import BARRIER_KEY, Barrier, IndexEntry

        marker = Barrier(app_id=app, snapshot_id=snapshot, attempts=tuple(attempts))
        sent = [
            self.producer.send(
                self.topic,
                key=BARRIER_KEY,
                value=marker.value(),
                partition=p,
                headers=marker.headers(),
            )
            for p in range(self.partitions)
        ]
        self.producer.flush()
        positions = {p: f.get(timeout=30).offset for p, f in enumerate(sent)}
        if index:
            self.entries.append(
                IndexEntry(
                    kind="complete",
                    app_id=app,
                    snapshot_id=snapshot,
                    topic=self.topic,
                    attempts=tuple(attempts),
                    positions=positions,
                )
            )

    def ends(self) -> dict[TopicPartition, int]:
        marks = [
            self.producer.send(self.topic, value=b"end", partition=p)
            for p in range(self.partitions)
        ]
        self.producer.flush()
        return {
            TopicPartition(self.topic, p): f.get(timeout=30).offset for p, f in enumerate(marks)
        }

    def revoke(
        self, app: str, snapshot: int, revoked: int, attempts: list[str], since: Any
    ) -> None:
        """Revoke ``app``'s snapshot ``revoked`` (a rewind to ``snapshot``): its attempts and
        the offsets from ``since`` (the barrier of ``snapshot``) to the log end now."""
        from spark_chkpt.alignment.barrier import IndexEntry

        ends = self.ends()  # the "end" marks fall inside the revoked offsets: skipped too
        self.revocations.append(
            IndexEntry(
                kind="revoke",
                app_id=app,
                snapshot_id=snapshot,
                topic=self.topic,
                attempts=tuple(attempts),
                positions={tp.partition: o + 1 for tp, o in ends.items()},
                starts={p: since.positions[p] + 1 for p in range(self.partitions)},
                revoked=(revoked,),
                generation=1,
            )
        )
        self.entries = [
            e for e in self.entries if not (e.app_id == app and e.snapshot_id == revoked)
        ]


def _read_both_ways(
    bootstrap_servers: str, topic: str, plans: list[tuple[str, list[ReadSpec]]]
) -> dict[str, tuple[set[str], tuple[int, int, int, set[str]]]]:
    """Read each plan with decode=columns and decode=records, each range in three pieces
    handed on through the prefetch buffer, Arrow batches cut small (held records span
    chunks), every partition with one consumer (the aligner between them): per plan and
    partition the same rows byte for byte, the same offsets, the same counts. Returns, per
    plan, the kinds of records read (a value's letters) and the counts (barriers, dropped,
    revoked, dropped attempts), for the test's own checks."""
    read: dict[str, tuple[set[str], tuple[int, int, int, set[str]]]] = {}
    for name, specs in plans:
        got: dict[str, tuple[pa.Table, tuple[int, int, int, set[str]]]] = {}
        for decode in ("columns", "records"):
            config = _config(
                bootstrap_servers,
                topic,
                "kafka-python",
                decode=decode,
                maxRecordsPerArrowBatch="23",
            )
            prefetch, tables, counts = PrefetchBuffer(), [], [0, 0, 0, set()]
            for piece in range(3):
                pieces = []
                for spec in specs:
                    rng = spec.range
                    step = max(1, (rng.end - rng.start) // 3)
                    lo = rng.start + piece * step
                    hi = rng.end if piece == 2 else min(rng.end, lo + step)
                    pieces.append(
                        ReadSpec(
                            range=OffsetRange(rng.tp, lo, hi),
                            markers=True,
                            filter=spec.filter,
                            fan_in=spec.fan_in,
                        )
                    )
                table, fetcher = _read(config, pieces, prefetch=prefetch)
                assert fetcher._columnar == (decode == "columns")  # the path under test ran
                tables.append(table)
                stats = fetcher.stats
                counts[0] += stats.barriers
                counts[1] += stats.dropped
                counts[2] += stats.revoked
                counts[3] |= stats.dropped_attempts
            whole = pa.concat_tables(tables)
            order = pc.sort_indices(whole, [("partition", "ascending"), ("offset", "ascending")])
            got[decode] = (whole.take(order), tuple(counts))  # type: ignore[assignment]
        (columns, by_columns), (records, by_records) = got["columns"], got["records"]
        assert columns.schema == records.schema
        assert columns.equals(records), f"{name}: the columnar read differs"
        assert by_columns == by_records, f"{name}: barriers, dropped, revoked, attempts differ"
        values = columns.column("value").to_pylist()
        read[name] = (
            {bytes(v).split(b"-")[-1].split(b".")[0].decode() for v in values},
            by_columns,
        )
    return read


def test_columns_and_records_judge_barrier_topics_the_same(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    """The identity test of barrier topics: decode=columns (column_judge, the aligner fed
    segments) against decode=records (RecordJudge record by record), on the cuts the
    planner makes in each mode and on a filter whose index lost most attempts: failed
    attempts interleaved with confirmed ones, attempts only a barrier confirms (held
    across chunks), a revoked snapshot (its offsets, its attempts, and a stale barrier of
    it written after the revocation), records still in flight, plain records."""
    from spark_chkpt.alignment.cut import RecordFilter, plan_topic

    topic = make_topic(partitions=2)
    w = _Writer(producer, topic, 2)

    def mixed(tag: str) -> Callable[[int], tuple[str | None, bytes]]:
        # every 7th record a failed attempt's (X), every 11th an ordinary producer's
        def make(i: int) -> tuple[str | None, bytes]:
            if i % 7 == 3:
                return "X", b"x.%d" % i
            if i % 11 == 5:
                return None, b"p.%d" % i
            return tag, b"%s.%d" % (tag.lower().encode(), i)

        return make

    w.records(mixed("A"), 60)
    w.barrier("up", 0, ["A"])
    w.records(mixed("B"), 40)
    w.barrier("up", 1, ["B"])
    w.records(mixed("C"), 30)
    w.barrier("up", 2, ["C"])
    since = w.entries[-1]
    w.records(mixed("R"), 30)
    w.barrier("up", 3, ["R"])
    w.records(lambda i: ("S", b"s.%d" % i), 10)  # in flight when the rewind ran
    w.revoke("up", 2, 3, ["R", "S"], since)
    w.barrier("up", 3, ["R"], index=False)  # a stale writer's, past the revoked offsets
    w.records(mixed("D"), 30)
    w.barrier("up", 3, ["D"])  # snapshot 3 again, by the new generation
    w.records(lambda i: ("E", b"e.%d" % i), 20)  # in flight: no barrier yet
    latest = {tp: o + 1 for tp, o in w.ends().items()}
    start = {tp: 0 for tp in latest}
    plans = []
    for mode in ("aligned", "unaligned", "at-least-once"):
        cut = plan_topic(
            topic=topic,
            mode=mode,  # type: ignore[arg-type]
            start=start,
            latest=latest,
            entries=w.entries,
            max_records=None,
            revocations=w.revocations,
        )
        plans.append(
            (
                mode,
                [
                    ReadSpec(
                        range=OffsetRange(tp, 0, cut.end[tp]), markers=True, filter=cut.filters[tp]
                    )
                    for tp in sorted(latest)
                ],
            )
        )
    (revoke,) = w.revocations
    lost = [  # the index knows attempt A only: barriers confirm B, C, D as they come
        ReadSpec(
            range=OffsetRange(tp, 0, latest[tp]),
            markers=True,
            filter=RecordFilter(
                confirmed=frozenset({"A"}),
                confirm_until=latest[tp],
                revoked=(revoke.revoked_range(tp.partition),),
                revoked_attempts=frozenset({"R", "S"}),
            ),
        )
        for tp in sorted(latest)
    ]
    read = _read_both_ways(bootstrap_servers, topic, [*plans, ("index lost", lost)])
    assert read["aligned"][0] == {"a", "b", "c", "d", "p"}
    assert read["at-least-once"][0] == {"a", "b", "c", "d", "e", "p", "end"}
    assert read["index lost"][0] == {"a", "b", "c", "d", "p", "end"}
    for name, (_, (barriers, dropped, revoked, attempts)) in read.items():
        # 4 barriers that count per partition, X dropped, snapshot 3's first run skipped
        assert barriers == 8 and revoked > 80 and dropped > 30, name
        # (index lost: a piece's B, C or D records before a barrier the next piece reads
        # are dropped at the piece's end, as the record path drops them)
        assert attempts >= {"X", "E"} if name == "index lost" else attempts == {"X"}, name


def test_columns_and_records_judge_a_fan_in_topic_the_same(
    bootstrap_servers: str, make_topic: Callable[..., str], producer: Any
) -> None:
    """The identity test on a topic two upstream queries write (fan-in): each record
    delivered, dropped (a failed attempt), revoked, skipped or left for a later batch by
    its app's pending offsets, the same on both paths."""
    from spark_chkpt.alignment.fanin import fan_in_filters, plan_fan_in

    topic = make_topic(partitions=2, suffix="fan-in")
    w = _Writer(producer, topic, 2)
    w.records(lambda i: ("P1", b"pa.%d" % i) if i % 2 else ("Q1", b"qa.%d" % i), 40)
    w.barrier("P", 0, ["P1"])
    since = w.entries[-1]
    w.records(lambda i: ("Q2", b"qx.%d" % i) if i % 3 == 0 else ("P2", b"pb.%d" % i), 30)
    w.barrier("P", 1, ["P2"])  # revoked below
    w.barrier("Q", 0, ["Q1"])
    w.revoke("P", 0, 1, ["P2"], since)
    w.records(lambda i: (None, b"u.%d" % i) if i % 4 == 0 else ("Q3", b"qc.%d" % i), 30)
    w.records(lambda i: ("P3", b"pc.%d" % i), 20)
    w.barrier("P", 1, ["P3"])  # P's snapshot 1 again; Q3 is still in flight
    latest = {tp: o + 1 for tp, o in w.ends().items()}
    start = {tp: 0 for tp in latest}
    cut = plan_fan_in(
        topic=topic,
        start=start,
        latest=latest,
        entries=w.entries,
        max_records=None,
        revocations=w.revocations,
    )
    filters = fan_in_filters(
        report={"apps": cut.report()},
        start=start,
        end=cut.end,
        entries=w.entries,
        revocations=w.revocations,
    )
    specs = [
        ReadSpec(
            range=OffsetRange(tp, cut.read_from[tp], cut.end[tp]), markers=True, fan_in=filters[tp]
        )
        for tp in sorted(latest)
    ]
    read = _read_both_ways(bootstrap_servers, topic, [("fan-in", specs)])
    kinds, (barriers, dropped, revoked, attempts) = read["fan-in"]
    assert kinds == {"pa", "qa", "pc", "u", "end"}
    assert (barriers, attempts) == (8, {"Q2"}) and dropped > 0 and revoked > 0
