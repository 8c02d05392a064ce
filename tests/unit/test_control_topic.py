"""Control topics are created once per process, with retention that never expires the
index (a reader from ``earliest`` needs the entries of the oldest data)."""

from __future__ import annotations

from typing import Any

import pytest

from spark_chkpt.kafka.client import topics
from spark_chkpt.kafka.sink import control_topic


def test_control_topic_is_created_once_with_infinite_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []
    described: list[dict[str, Any]] = []
    monkeypatch.setattr(topics, "create_topic", lambda **kw: calls.append(kw))
    monkeypatch.setattr(topics, "topic_configs", lambda **kw: described.append(kw))  # None
    monkeypatch.setattr(control_topic, "_ENSURED", set())
    for _ in range(3):
        control_topic.ensure_control_topic(bootstrap_servers="b:9092", name="__chkpt.t")
    assert len(calls) == 1
    assert [d["names"] for d in described] == [["__chkpt.t", "t"]]  # settings checked once
    assert calls[0]["name"] == "__chkpt.t" and calls[0]["partitions"] == 1
    assert calls[0]["exist_ok"] is True
    assert calls[0]["config"] == {"retention.ms": "-1", "retention.bytes": "-1"}
