"""The EndTxn client on the real Apache Kafka broker (no Spark): what the driver of
``delivery=exactly-once-transactions`` relies on, as the broker answers it; the write
tasks' transactional producers of both clients handing their open transactions to the
driver (librdkafka's: its producer id and epoch asked of the coordinator, its producer
let go without the ``close()`` that aborts); and, in the tests' SparkSession, the mode
refused at the start of a query when ``spark.speculation`` is on."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_chkpt.kafka.client.transactions import EndResult, TransactionClient
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.sink.transactional import (
    ConfluentTransactionalProducer,
    KafkaPythonTransactionalProducer,
    TaskAttempt,
    transactional_id,
    transactional_producer,
)

pytestmark = pytest.mark.integration


def open_transaction(servers: str, topic: str, txn_id: str, values: list[bytes]) -> tuple[int, int]:
    """Produce ``values`` in a transaction left open, like a write task; (pid, epoch)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=servers, transactional_id=txn_id)
    producer.init_transactions()
    producer.begin_transaction()
    for value in values:
        producer.send(topic, value=value)
    producer.flush()
    ids = producer._transaction_manager.producer_id_and_epoch
    producer.close()  # does not abort the transaction
    return int(ids.producer_id), int(ids.epoch)


def committed_values(servers: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        consumer_timeout_ms=2000,
    )
    consumer.assign([TopicPartition(topic, 0)])
    try:
        return [r.value for r in consumer]
    finally:
        consumer.close()


@pytest.fixture
def client(bootstrap_servers: str):  # type: ignore[no-untyped-def]
    c = TransactionClient(bootstrap_servers=bootstrap_servers, settings={})
    yield c
    c.close()


def test_a_repeated_commit_is_done_and_a_fenced_one_is_reported(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    topic_name: str,
    client: TransactionClient,
) -> None:
    topic = make_topic()
    txn = f"{topic_name}-t"
    pid, epoch = open_transaction(bootstrap_servers, topic, txn, [b"a", b"b"])
    assert committed_values(bootstrap_servers, topic) == []
    commit = {"transactional_id": txn, "producer_id": pid, "epoch": epoch}
    assert client.end(**commit, commit=True) is EndResult.DONE
    # a restarted driver commits the recorded transaction again: done, nothing twice
    assert client.end(**commit, commit=True) is EndResult.DONE
    assert client.end(**commit, commit=False) is EndResult.INVALID_STATE
    assert committed_values(bootstrap_servers, topic) == [b"a", b"b"]

    # an open transaction whose id a later holder initialises is aborted: fenced
    pid, epoch = open_transaction(bootstrap_servers, topic, txn, [b"lost"])
    new_pid, new_epoch = client.fence(transactional_id=txn, transaction_timeout_ms=60_000)
    # the abort of the open transaction bumps the epoch, and so does the new holder's init
    assert new_pid == pid and new_epoch == epoch + 2
    assert (
        client.end(transactional_id=txn, producer_id=pid, epoch=epoch, commit=True)
        is EndResult.FENCED
    )
    assert committed_values(bootstrap_servers, topic) == [b"a", b"b"]


def test_aborting_twice_is_done(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    topic_name: str,
    client: TransactionClient,
) -> None:
    topic = make_topic()
    txn = f"{topic_name}-t"
    pid, epoch = open_transaction(bootstrap_servers, topic, txn, [b"x"])
    ids = {"transactional_id": txn, "producer_id": pid, "epoch": epoch}
    assert client.end(**ids, commit=False) is EndResult.DONE
    assert client.end(**ids, commit=False) is EndResult.DONE
    assert client.end(**ids, commit=True) is EndResult.INVALID_STATE
    assert committed_values(bootstrap_servers, topic) == []


def _task_config(servers: str, topic: str, tmp_path: Path, client: str) -> KafkaSinkConfig:
    return KafkaSinkConfig.from_options(
        {
            "kafka.bootstrap.servers": servers,
            "topic": topic,
            "checkpointLocation": str(tmp_path / "chk"),
            "delivery": "exactly-once-transactions",
            "kafka.client": client,
        }
    )


def _values(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"value": pa.array([f"v{i}".encode() for i in range(start, start + n)])})


def _state_after(client: TransactionClient, txn_id: str, wait_s: float) -> str:
    """The transaction's state once it has stayed the same for ``wait_s`` (an abort by
    the producer's own destroy would have shown within 2 s)."""
    time.sleep(wait_s)
    return client.describe(transactional_id=txn_id)[0]


@pytest.mark.parametrize("kind", ["confluent", "kafka-python"])
def test_a_write_task_leaves_its_transaction_open_for_the_driver_on_either_client(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    client: TransactionClient,
    kind: str,
) -> None:
    """A task attempt produces, finishes and is gone; its transaction stays open (a
    read_committed reader sees nothing), with the producer id and epoch the task
    returned, until the driver's EndTxn commits it. The next batch's task reuses the id.
    On librdkafka ``close()`` aborts an open transaction (seen on this broker:
    Ongoing, then CompleteAbort 2 s later): the task must destroy the producer instead,
    and it asks the coordinator for the id and epoch librdkafka does not tell."""
    topic = make_topic(partitions=1)
    config = _task_config(bootstrap_servers, topic, tmp_path, kind)
    expected = (
        ConfluentTransactionalProducer if kind == "confluent" else KafkaPythonTransactionalProducer
    )
    committed: list[bytes] = []
    for batch_id, (start, n) in enumerate([(0, 50), (50, 30)]):
        producer = transactional_producer(
            TaskAttempt(config=config, app_id="app", batch_id=batch_id, task=0, attempt_number=0)
        )
        assert type(producer) is expected
        producer.send(_values(start, n))
        output = producer.finish()
        del producer
        assert output.rows == n and output.transaction is not None
        txn_id, producer_id, epoch = output.transaction
        assert txn_id == transactional_id(app_id="app", topic=topic, partition=0, attempt=0)
        assert _state_after(client, txn_id, 3.0) == "Ongoing"
        assert client.describe(transactional_id=txn_id)[1:] == (producer_id, epoch)
        assert committed_values(bootstrap_servers, topic) == committed
        assert client.end(**_ids(output.transaction), commit=True) is EndResult.DONE
        committed += [f"v{i}".encode() for i in range(start, start + n)]
        assert committed_values(bootstrap_servers, topic) == committed


def _ids(transaction: tuple[str, int, int]) -> dict[str, Any]:
    txn_id, producer_id, epoch = transaction
    return {"transactional_id": txn_id, "producer_id": producer_id, "epoch": epoch}


def test_a_failed_librdkafka_attempt_is_aborted_and_a_retry_fences_the_one_before(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    client: TransactionClient,
) -> None:
    """A failed attempt's producer is closed: its transaction is aborted at once (one
    whose records never left the client has none on the broker: ``Empty``). A
    retry (attempt 1) fences attempt 0's id, whose transaction a lost task left open;
    only the retry's records are committed. A task with no rows hands over nothing."""
    topic = make_topic(partitions=1)
    config = _task_config(bootstrap_servers, topic, tmp_path, "confluent")

    def attempt(number: int, batch_id: int = 0) -> Any:
        return transactional_producer(
            TaskAttempt(
                config=config, app_id="app", batch_id=batch_id, task=0, attempt_number=number
            )
        )

    failed = attempt(0)
    failed.send(_values(0, 10))
    failed._flush_and_count()  # its records are in the broker, in its transaction
    failed.close()  # what produce_all does when the task fails
    slot_0 = failed.transactional_id
    deadline = time.monotonic() + 30
    while client.describe(transactional_id=slot_0)[0] != "CompleteAbort":
        assert time.monotonic() < deadline
        time.sleep(0.2)

    lost = attempt(0)  # an attempt lost with its executor: its transaction stays open
    lost.send(_values(100, 10))
    lost._flush_and_count()
    state, producer_id, epoch = client.describe(transactional_id=slot_0)
    assert state == "Ongoing"
    retry = attempt(1)  # InitProducerId on slot 0's id: its transaction aborted, epoch bumped
    state, fenced_id, fenced_epoch = client.describe(transactional_id=slot_0)
    assert state != "Ongoing" and (fenced_id, fenced_epoch) > (producer_id, epoch)
    retry.send(_values(200, 5))
    output = retry.finish()
    assert output.transaction is not None and output.transaction[0] != slot_0
    assert client.end(**_ids(output.transaction), commit=True) is EndResult.DONE
    assert committed_values(bootstrap_servers, topic) == [f"v{i}".encode() for i in range(200, 205)]

    empty = attempt(0, batch_id=1)
    empty.send(_values(0, 0))
    nothing = empty.finish()
    assert (nothing.rows, nothing.transaction) == (0, None)


def test_speculation_is_refused_at_start_naming_the_setting(
    spark: Any, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """``spark.speculation=true`` on the session's SparkContext (set on its live conf,
    which ``register`` reads; the scheduler of the running context is not changed): a
    query with ``delivery=exactly-once-transactions`` fails before any task produces,
    with one error naming the setting (on the old code it ran, and wrote)."""
    from pyspark.errors import StreamingQueryException

    import spark_chkpt

    out = make_topic(partitions=1)
    conf = spark.sparkContext._conf  # the live SparkContext's conf (getConf() copies it)
    conf.set("spark.speculation", "true")
    try:
        spark_chkpt.register(spark)
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 10)
            .load()
            .selectExpr("CAST(value AS STRING) AS value")
            .writeStream.format("chkpt-kafka")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("topic", out)
            .option("delivery", "exactly-once-transactions")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .start()
        )
        try:
            with pytest.raises(StreamingQueryException) as raised:
                query.awaitTermination(90)
        finally:
            query.stop()
        message = str(raised.value)
        assert "option 'spark.speculation' = 'true'" in message, message
        assert "delivery=exactly-once-transactions" in message
        assert committed_values(bootstrap_servers, out) == []
    finally:
        conf.set("spark.speculation", "false")
        spark_chkpt.register(spark)
