"""kafka-python's poll sleeps 100 ms when its fetcher says idle; an answer that arrived
while the fetcher was sending must be handed out instead (fetcher_hook.drain_before_sleeping)."""

from __future__ import annotations

from collections import deque
from typing import Any

from spark_chkpt.kafka.client.fetcher_hook import drain_before_sleeping


class FakeFetcher:
    """kafka-python 3.0's Fetcher as poll sees it: ``fetch_records`` judged idle while a
    completed answer waits in ``_completed_fetches``."""

    def __init__(self, *, waiting: list[str]) -> None:
        self._completed_fetches: deque[str] = deque(waiting)
        self.slept = 0

    def fetch_records(
        self, max_records: Any = None, update_offsets: bool = True, timeout_ms: Any = None
    ) -> tuple[dict[str, list[str]], bool]:
        return {}, True  # nothing drained, no future left to wait on

    def fetched_records(
        self, max_records: Any = None, update_offsets: bool = True
    ) -> tuple[dict[str, list[str]], bool]:
        drained = {"t-0": list(self._completed_fetches)} if self._completed_fetches else {}
        self._completed_fetches.clear()
        return drained, False


def test_an_answer_that_arrived_while_sending_is_handed_out_not_slept_on() -> None:
    fetcher = FakeFetcher(waiting=["r1", "r2"])
    assert drain_before_sleeping(fetcher)
    assert fetcher.fetch_records(10) == ({"t-0": ["r1", "r2"]}, False)


def test_nothing_waiting_is_still_idle_so_poll_sleeps_rather_than_spins() -> None:
    fetcher = FakeFetcher(waiting=[])
    assert drain_before_sleeping(fetcher)
    assert fetcher.fetch_records(10) == ({}, True)


def test_wrapped_once_and_only_a_fetcher_that_has_the_parts() -> None:
    fetcher = FakeFetcher(waiting=[])
    assert drain_before_sleeping(fetcher)
    assert not drain_before_sleeping(fetcher)  # a pooled consumer's fetcher stays as it is
    assert not drain_before_sleeping(object())


def test_a_real_kafka_python_fetcher_is_wrapped() -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(3, 0))
    try:
        assert getattr(consumer._fetcher.fetch_records, "_chkpt_drains", False) is False
        assert drain_before_sleeping(consumer._fetcher)
    finally:
        consumer.close()


def test_driver_side_readers_refresh_metadata_without_the_100_ms_spacing() -> None:
    """The control topic's reader asks for metadata on every refresh (once per downstream
    batch): kafka-python spaced those 100 ms apart (measured: refresh 101.6 -> 10.1 ms
    median against a real broker); the user's kafka.retry.backoff.ms still wins."""
    from spark_chkpt.kafka.client.metadata import PROBE_RETRY_BACKOFF_MS
    from spark_chkpt.kafka.control.topic import ControlTopic

    for settings, expected in (
        ({"api_version": (3, 0)}, PROBE_RETRY_BACKOFF_MS),
        ({"api_version": (3, 0), "retry_backoff_ms": 250}, 250),
    ):
        index = ControlTopic(
            bootstrap_servers="127.0.0.1:1",
            control_topic="__chkpt.t",
            data_topic="t",
            client_settings=settings,
        )
        try:
            consumer = index._client()
            assert consumer._cluster.config["retry_backoff_ms"] == expected
            assert getattr(consumer._fetcher.fetch_records, "_chkpt_drains", False)
        finally:
            index.close()
