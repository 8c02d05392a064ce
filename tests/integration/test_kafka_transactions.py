"""The EndTxn client on the real Apache Kafka broker (no Spark): what the driver of
``delivery=exactly-once-transactions`` relies on, as the broker answers it; and, in the
tests' SparkSession, the mode refused at the start of a query when ``spark.speculation``
is on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.kafka.client.transactions import EndResult, TransactionClient


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
