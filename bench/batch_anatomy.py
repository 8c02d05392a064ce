"""Where each millisecond of a 1,000-record batch goes, and whose it is: Spark's or ours.

More: docs/performance/benchmarks.md (bench/batch_anatomy.py).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPARK_PHASES = (
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "addBatch",
    "walCommit",
    "commitOffsets",
)


def medians(per_batch: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each ``durationMs`` key's median over the batches that read data (``addBatch`` set);
    a phase a batch lacks counts 0 in it."""
    with_data = [ms for ms in per_batch if ms.get("addBatch") is not None]
    keys = sorted({k for ms in with_data for k in ms})
    return {k: float(statistics.median(ms.get(k, 0) for ms in with_data)) for k in keys}


def anatomy(
    *, spark_ms: dict[str, float], ours: dict[str, float], cores: int
) -> list[tuple[float, str, str]]:
    """Rows ``(ms, what, whose)`` that add up to the batch's median ``triggerExecution``.

    ``spark_ms``: the batches' median ``durationMs``; ``ours``: median ms of
    ``plan`` (latestOffset), ``partitions``, ``read_task`` and ``write_task`` (one task
    each), ``tasks`` (a batch's read tasks), ``driver_commit`` and ``source_commit``."""
    waves = math.ceil(ours["tasks"] / max(1, cores)) if ours["tasks"] else 0
    rows: list[tuple[float, str, str]] = []

    def split(phase: str, mine: list[tuple[float, str]], theirs: str) -> None:
        total = spark_ms.get(phase, 0.0)
        replayed = sum(ms for ms, _ in mine)
        if replayed > total:
            # The replay in this process took longer than Spark's whole phase (a cold
            # client, another process's caches): never a negative Spark row. Scale ours
            # to the phase and say what the replay measured.
            scale = total / replayed if replayed else 0.0
            mine = [
                (ms * scale, f"{what} [replay {ms:g} ms > Spark's {total:g} ms phase]")
                for ms, what in mine
            ]
        rows.extend((ms, what, "ours") for ms, what in mine)
        rows.append((max(0.0, total - sum(ms for ms, _ in mine)), theirs, "Spark"))

    split(
        "latestOffset",
        [(ours["plan"], "latestOffset: the source's planning (offsets, limit, barriers)")],
        "latestOffset: Spark's call into the Python planner (worker round trip)",
    )
    for phase, what in (
        ("getBatch", "getBatch: the batch's DataFrame over the offset range"),
        ("queryPlanning", "queryPlanning: the incremental plan"),
    ):
        rows.append((spark_ms.get(phase, 0.0), what, "Spark"))
    split(
        "addBatch",
        [
            (ours["partitions"], "addBatch: the read tasks' plan (partitions)"),
            (
                waves * ours["read_task"],
                f"addBatch: read tasks fetch + decode ({waves} wave(s) of "
                f"{ours['read_task']:g} ms)",
            ),
            (
                waves * ours["write_task"],
                f"addBatch: write tasks stage Parquet ({waves} wave(s) of "
                f"{ours['write_task']:g} ms)",
            ),
            (ours["driver_commit"], "addBatch: the driver's Delta commit (commit_ms)"),
        ],
        "addBatch: Spark's job: scheduling, task launch, Python worker IPC, "
        "JSON parse in the JVM, Arrow conversion",
    )
    rows.append((spark_ms.get("walCommit", 0.0), "walCommit: the offset log (offsets/N)", "Spark"))
    split(
        "commitOffsets",
        [(ours["source_commit"], "commitOffsets: the source's commit (group offsets)")],
        "commitOffsets: the commit log (commits/N)",
    )
    named = sum(spark_ms.get(p, 0.0) for p in SPARK_PHASES)
    rows.append(
        (
            spark_ms.get("triggerExecution", 0.0) - named,
            "triggerExecution outside the phases: progress, listeners, the trigger loop",
            "Spark",
        )
    )
    return [(round(ms, 1), what, whose) for ms, what, whose in rows]


def table_lines(rows: Sequence[tuple[float, str, str]], *, total: float) -> list[str]:
    """The ``ms | what | whose`` table, with the sums of Spark's and ours."""
    lines = ["| ms | what | whose |", "|---:|---|---|"]
    lines += [f"| {ms:g} | {what} | {whose} |" for ms, what, whose in rows]
    for whose in ("Spark", "ours"):
        share = sum(ms for ms, _, w in rows if w == whose)
        part = f"{share / total:.0%}" if total else "–"
        lines.append(f"| **{share:.0f}** | **{whose}, in all ({part})** | |")
    lines.append(f"| **{total:g}** | **triggerExecution (median batch)** | |")
    return lines


def replay(
    *,
    servers: str,
    topic: str,
    table: Path,
    scratch: Path,
    per_batch: int,
    batches: int,
    client: str,
    task_slots: int,
) -> dict[str, float]:
    """Our code of a batch, in this process, on ``topic`` from its start, ``batches`` of
    ``per_batch`` records; the median ms of each step (see the module's docstring)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from spark_chkpt.connectors.delta import DeltaDataSource
    from spark_chkpt.connectors.kafka import KafkaDataSource

    options = {
        "kafka.bootstrap.servers": servers,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(per_batch),
        "kafka.client": client,
    }
    source = KafkaDataSource.for_session(task_slots=task_slots)(options)
    reader = source.streamReader(None)  # the reader ignores the schema
    rows = _written_rows(table, per_batch)
    writer = DeltaDataSource(
        {
            "path": str(scratch / "table"),
            "checkpointLocation": str(scratch / "chk"),
            "txnAppId": "bench-replay",
        }
    ).streamWriter(from_arrow_schema(rows.schema), False)
    steps: dict[str, list[float]] = {}

    def timed(step: str, call: Any) -> Any:
        started = time.perf_counter()
        out = call()
        steps.setdefault(step, []).append((time.perf_counter() - started) * 1000)
        return out

    start = reader.initialOffset()
    for _ in range(batches):
        end = timed("plan", lambda s=start: reader.latestOffset(s, ReadMaxRows(per_batch)))
        if end == start:
            break
        parts = timed("partitions", lambda s=start, e=end: reader.partitions(s, e))
        steps.setdefault("tasks", []).append(len(parts))
        share = max(1, rows.num_rows // max(1, len(parts)))
        for part in parts:
            timed("read_task", lambda p=part: sum(b.num_rows for b in reader.read(p)))
            task_rows = rows.slice(0, share).to_batches()
            timed("write_task", lambda r=task_rows: writer.write(iter(r)))
        timed("source_commit", lambda e=end: reader.commit(e))
        start = end
    reader.stop()
    return {step: float(statistics.median(values)) for step, values in steps.items()}


def _written_rows(table: Path, count: int) -> Any:
    """``count`` rows the job wrote to ``table``: what a write task receives."""
    from deltalake import DeltaTable

    return DeltaTable(str(table)).to_pyarrow_table().slice(0, count)
