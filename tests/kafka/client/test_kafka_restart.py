"""The real Kafka broker crashes in the middle of a running Kafka -> Delta query (SIGKILL,
its logs recovered at start) and comes back on the same port with its data (Kafka's
storage is on disk; Tansu's is in memory, so this needs the Kafka broker). The query
waits it out and every event ends in the Delta table exactly once.

A clean stop (SIGTERM, controlled shutdown) of a broker under a running query is the
rolling restart of tests/chains/test_kafka_cluster.py, on three brokers as production
runs them; its single-broker copy here was retired (CI time, issue 60)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spark_chkpt.kafka.client.topics import create_topic
from spark_chkpt.testing.generator import produce_page_views
from spark_chkpt.testing.kafka_broker import EmbeddedKafka
from tests.kafka.client.test_broker_outage import FIRST, SECOND, exactly_once, job, wait_for_rows

pytestmark = pytest.mark.fault


def test_a_broker_crash_with_its_data_kept_is_waited_out(tmp_path: Path) -> None:
    with EmbeddedKafka(data_dir=tmp_path / "kafka") as broker:
        servers = broker.bootstrap_servers
        create_topic(bootstrap_servers=servers, name="views", partitions=3)
        produce_page_views(bootstrap_servers=servers, topic="views", first=0, count=FIRST)
        process = job(tmp_path, broker, "views", trigger="processingTime=1 second")
        try:
            wait_for_rows(tmp_path, 500, process=process, timeout=240)
            broker.kill()
            broker.start()
            produce_page_views(bootstrap_servers=servers, topic="views", first=FIRST, count=SECOND)
            wait_for_rows(tmp_path, FIRST + SECOND, process=process, timeout=240)
            time.sleep(2)  # a duplicate would land in the next batch
            assert process.poll() is None, "the query failed instead of waiting"
        finally:
            process.terminate()
            process.wait(timeout=60)
    exactly_once(tmp_path, FIRST + SECOND)


def test_a_leader_lookup_waits_out_a_restart_that_refuses_connections(tmp_path: Path) -> None:
    """A read task's leader lookup (``know_leaders``: a metadata request) made while the
    broker restarts is refused at once by kafka-python, where the Java client retries:
    the query above failed with ``ECONNREFUSED`` about one run in three. The lookup is
    retried while refused, within ``kafka.request.timeout.ms``, and answers once the
    broker is back."""
    import threading

    from kafka import TopicPartition as KafkaTopicPartition

    from spark_chkpt.kafka.client.factory import kafka_consumer
    from spark_chkpt.kafka.client.metadata import know_leaders

    with EmbeddedKafka(data_dir=tmp_path / "kafka") as broker:
        servers = broker.bootstrap_servers
        create_topic(bootstrap_servers=servers, name="views", partitions=2)
        consumer = kafka_consumer(bootstrap_servers=servers, settings={"request_timeout_ms": 30000})
        consumer.topics()
        broker.kill()
        answer: list[object] = []

        def lookup() -> None:
            try:
                know_leaders(
                    consumer, [KafkaTopicPartition("views", p) for p in (0, 1)], refresh=True
                )
                answer.append("known")
            except Exception as e:  # the answer under test
                answer.append(e)

        thread = threading.Thread(target=lookup)
        thread.start()
        time.sleep(1)
        broker.start()
        thread.join(timeout=60)
        consumer.close()
    assert answer == ["known"], answer
