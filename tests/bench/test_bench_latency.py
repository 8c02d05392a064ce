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
    progress: Any = [] if measure is latency.measure else {}
    result = measure(
        spark=spark,
        servers=bootstrap_servers,
        workdir=tmp_path,
        rate=1_000 + len(measure.__name__),  # topics of their own on the shared broker
        seconds=3.0,
        partitions=2,
        client="kafka-python",
        progress=progress,
    )
    assert result.records == 3 * result.rate
    assert result.batches >= 1
    assert result.p50_ms is not None and result.p99_ms is not None and result.max_ms is not None
    # From a produce to a commit on the same host: never negative, and within the run.
    assert 0 < result.p50_ms <= result.p99_ms <= result.max_ms < 120_000
    if measure is latency.measure:
        # --latency-only's breakdown: every batch with rows is in it, and each record's
        # latency is its wait for the batch plus that batch's own time
        table = tmp_path / f"latency{result.rate}"
        figures = latency.breakdown(progress, table)
        assert figures["batches"] == result.batches
        p50, p99 = figures["p50_p99_ms"]["triggerExecution"]
        assert 0 < p50 <= p99
        assert figures["p50_p99_ms"]["sink_driver_commit"][0] > 0
        split = latency.latency_split(progress, table)
        assert split["records"] == result.records
        wait, own = split["wait_p50_p99_ms"][0], split["own_batch_p50_p99_ms"][0]
        assert 0 < own <= result.max_ms
        assert wait < result.p50_ms  # every record: latency = wait + own batch, own > 0
