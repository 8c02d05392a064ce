"""One measured query of the benchmark, and the session every measured query runs in."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

# Python workers are reused, the shuffle has one partition per Kafka partition.
SESSION_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",
}


def bench_session(
    *, partitions: int, connectors: bool = False, conf: dict[str, str] | None = None
) -> Any:
    """The benchmark's SparkSession (``local[*]``), with the synthetic source registered;
    ``connectors``: with Spark's Kafka connector and delta-spark (bench/native.py);
    ``conf``: more Spark settings (they win over the bench's)."""
    from bench.synthetic import SyntheticDataSource
    from spark_chkpt.session import build_session

    spark = build_session(
        app_name="spark-chkpt-bench",
        master="local[*]",
        connectors=connectors,
        conf={**SESSION_CONF, "spark.sql.shuffle.partitions": str(partitions), **(conf or {})},
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SyntheticDataSource)
    return spark


def run_query(
    *,
    spark: Any,
    settings: dict[str, str],
    workdir: Path,
    name: str,
    source_format: str = "chkpt-kafka",
    sink_format: str = "chkpt-delta",
) -> tuple[float, dict[str, int], list[dict[str, Any]]]:
    """Run the Kafka → Delta job's query once (``Trigger.AvailableNow``) on ``settings``
    (the ``source.*`` and ``job.*`` keys); its wall time, Spark's per-phase totals (ms)
    and each batch's ``durationMs``.

    The sink writes ``workdir/name`` with its checkpoint at ``workdir/chk-name``."""
    from spark_chkpt.jobs.kafka_to_delta import start
    from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL

    full = {
        "sink.path": str(workdir / name),
        "sink.checkpointLocation": str(workdir / f"chk-{name}"),
        "job.schema": PAGE_VIEW_SCHEMA_DDL,
        "job.trigger": "availableNow",
        "job.queryName": f"bench_{name}",
        **settings,
    }
    started = time.monotonic()
    query = start(spark, full, source_format=source_format, sink_format=sink_format)
    query.awaitTermination()
    elapsed = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"bench query {name} failed: {query.exception()}")
    per_batch = [dict(p["durationMs"] or {}) for p in query.recentProgress]
    return elapsed, phase_totals(query, elapsed), per_batch


def phase_totals(query: Any, elapsed: float) -> dict[str, int]:
    """Spark's ``durationMs`` summed over the query's batches, and the time outside them."""
    totals: dict[str, int] = {}
    for progress in query.recentProgress:
        for phase, ms in (progress["durationMs"] or {}).items():
            totals[phase] = totals.get(phase, 0) + int(ms)
    totals["outside_triggers"] = round(elapsed * 1000) - totals.get("triggerExecution", 0)
    totals["batches"] = len(query.recentProgress)
    return totals
