"""Paths are qualified on the driver, so executors in other folders read the same ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.fs import qualify
from spark_chkpt.kafka.sink.options import KafkaSinkConfig


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/data/t", "/data/t"),
        ("file:/data/t", "/data/t"),
        ("file:///data/t", "/data/t"),
        ("s3://bucket/t", "s3://bucket/t"),
        ("abfss://c@acct.dfs.core.windows.net/t", "abfss://c@acct.dfs.core.windows.net/t"),
    ],
)
def test_qualify_keeps_absolute_paths_and_uris(given: str, expected: str) -> None:
    assert qualify(given) == expected


def test_relative_sink_paths_become_absolute_on_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    delta = DeltaSinkConfig.from_options({"path": "out/t", "checkpointLocation": "chk"})
    assert delta.path == os.path.join(tmp_path, "out", "t")
    assert delta.checkpoint_location == os.path.join(tmp_path, "chk")
    kafka = KafkaSinkConfig.from_options(
        {"kafka.bootstrap.servers": "h:9092", "topic": "t", "checkpointLocation": "chk"}
    )
    assert kafka.checkpoint_location == os.path.join(tmp_path, "chk")
