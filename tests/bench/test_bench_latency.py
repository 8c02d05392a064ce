"""The benchmark's latency runs against the real broker and Spark, small: every record
produced is read back once with a latency, through Kafka → Delta and through
``chkpt-kafka`` → ``chkpt-kafka`` to the aligned downstream read's commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import latency

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "measure", [latency.measure, latency.measure_kafka_to_kafka], ids=["delta", "kafka"]
)
def test_a_latency_run_reads_back_every_record_once(
    spark: Any, bootstrap_servers: str, tmp_path: Path, measure: Any
) -> None:
    result = measure(
        spark=spark,
        servers=bootstrap_servers,
        workdir=tmp_path,
        rate=1_000 + len(measure.__name__),  # topics of their own on the shared broker
        seconds=3.0,
        partitions=2,
        client="kafka-python",
    )
    assert result.records == 3 * result.rate
    assert result.batches >= 1
    assert result.p50_ms is not None and result.p99_ms is not None and result.max_ms is not None
    # From a produce to a commit on the same host: never negative, and within the run.
    assert 0 < result.p50_ms <= result.p99_ms <= result.max_ms < 120_000
