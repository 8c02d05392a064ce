"""``minPauseBetweenSnapshots``: what the pause costs and what it buys, with and without it.

Two short runs of the Kafka → Delta job per setting (``--min-pause``), in the warm
session:

* **backlog**: ``records`` already in a topic, drained with ``Trigger.AvailableNow`` and
  ``maxOffsetsPerTrigger=per_trigger``: the batch count is fixed by the cap, so each
  batch pays the pause and the throughput drops by about pause × batches;
* **steady**: ``rate`` records/s for ``seconds`` with ``processingTime=0`` (a batch as
  soon as the last one is done; bench/latency.py): the pause makes fewer, larger
  snapshots, and a record waits up to the pause longer for its commit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class PauseRun:
    run: str  # "backlog" or "steady <rate>/s"
    min_pause: str  # "none" or the option's value
    records: int
    seconds: float | None  # backlog: the drain's wall time
    rate: float  # backlog: records/s drained; steady: records/s produced
    batches: int  # Delta commits that added rows
    p50_ms: float | None = None  # steady: produce-to-commit latency
    p99_ms: float | None = None
    # backlog: the shortest time from a batch's Delta commit to Spark's plan of the next
    # batch (offsets/N+1), what minPauseBetweenSnapshots guarantees
    min_gap_s: float | None = None


def commit_to_next_plan_s(*, table: Path, checkpoint: Path) -> list[float]:
    """Per batch N whose next batch was planned: seconds from its Delta commit (the log
    file's modification time) to ``offsets/N+1``'s."""
    import json

    gaps = []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            info = json.loads(line).get("commitInfo") if line.strip() else None
            if info is None or "chkpt.batchId" not in info:
                continue
            following = checkpoint / "offsets" / str(int(info["chkpt.batchId"]) + 1)
            if following.exists():
                gaps.append(following.stat().st_mtime - entry.stat().st_mtime)
    return gaps


def measure(
    *,
    spark: Any,
    servers: str,
    workdir: Path,
    partitions: int,
    client: str,
    pause: str,
    records: int = 20_000,
    per_trigger: int = 2_000,
    rate: int = 5_000,
    seconds: float = 10.0,
) -> list[dict[str, Any]]:
    """Both runs without and with ``pause``; one dict per run (:class:`PauseRun`)."""
    from bench.latency import measure as steady
    from bench.query import run_query
    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.testing.generator import produce_page_views

    topic = "bench-pause"
    create_topic(bootstrap_servers=servers, name=topic, partitions=partitions)
    produce_page_views(
        bootstrap_servers=servers, topic=topic, first=0, count=records, spread_over=partitions
    )
    rows: list[dict[str, Any]] = []
    for setting in ("warmup", None, pause):  # the first run only warms the session up
        extra = (
            {"sink.minPauseBetweenSnapshots": setting} if setting not in (None, "warmup") else {}
        )
        name = f"pause-{setting or 'none'}"
        took, phases, _ = run_query(
            spark=spark,
            settings={
                "source.kafka.bootstrap.servers": servers,
                "source.subscribe": topic,
                "source.startingOffsets": "earliest",
                "source.maxOffsetsPerTrigger": str(per_trigger),
                "source.kafka.client": client,
                **extra,
            },
            workdir=workdir,
            name=name,
        )
        if setting == "warmup":
            continue
        gaps = commit_to_next_plan_s(table=workdir / name, checkpoint=workdir / f"chk-{name}")
        rows.append(
            asdict(
                PauseRun(
                    run="backlog",
                    min_pause=setting or "none",
                    records=records,
                    seconds=round(took, 2),
                    rate=round(records / took),
                    batches=phases["batches"],
                    min_gap_s=round(min(gaps), 2) if gaps else None,
                )
            )
        )
    for setting in (None, pause):
        latency = steady(
            spark=spark,
            servers=servers,
            workdir=workdir,
            rate=rate,
            seconds=seconds,
            partitions=partitions,
            client=client,
            min_pause=setting,
        )
        rows.append(
            asdict(
                PauseRun(
                    run=f"steady {rate}/s",
                    min_pause=setting or "none",
                    records=latency.records,
                    seconds=None,
                    rate=latency.produced_rate,
                    batches=latency.batches,
                    p50_ms=latency.p50_ms,
                    p99_ms=latency.p99_ms,
                )
            )
        )
    return rows


def report_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per run, for bench/report.py."""
    lines = ["minPauseBetweenSnapshots (Kafka -> Delta):"]
    for row in rows:
        figures = f"{row['rate']:,.0f} records/s, {row['batches']} batches"
        if row["seconds"] is not None:
            figures += f", {row['seconds']} s for {row['records']:,} records"
        if row.get("min_gap_s") is not None:
            figures += f", commit to next plan >= {row['min_gap_s']} s"
        if row["p50_ms"] is not None:
            figures += f", latency p50 {row['p50_ms']:.0f} ms p99 {row['p99_ms']:.0f} ms"
        lines.append(f"  {row['run']:<14} pause {row['min_pause']:<6} {figures}")
    return lines
