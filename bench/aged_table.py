"""The "aged table" row: a batch's cost into a fresh Delta table and into an aged one.

The target: the per-batch cost of the ``chkpt-kafka`` → ``chkpt-delta`` query
(availableNow, ``per_batch``-record batches) into a table of N versions and N files is
at most 1.1× (N = 10,000) and 1.25× (N = 100,000) a fresh table's. :func:`age` prepares
the aged table cheaply but for real: version 0 is the protocol and metadata of a table
the sink itself created (so the query's schema fits), then N appends, each adding a copy
of one of that table's Parquet files, written as Delta JSON commits, with a delta-rs
checkpoint every 100 versions (as Delta does by default). delta-rs and delta-spark read
it as any table. :func:`measure` then runs the same query (same topic, its own
checkpoint), after a warm-up run, in pairs: a fresh table, then the aged one; it reports
each one's median batch (Spark's ``triggerExecution``, the first batch left out) and the ratio.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

CHECKPOINT_EVERY = 100


def age(*, template: Path, table: Path, versions: int) -> float:
    """Write ``table``: ``template``'s protocol and metadata (version 0), then
    ``versions`` appends of one file each (copies of a data file of ``template``),
    checkpointed every 100 versions; returns the seconds it took."""
    from deltalake import DeltaTable

    started = time.monotonic()
    log_dir = table / "_delta_log"
    log_dir.mkdir(parents=True)
    first = (template / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    head = [
        line for line in first if line and next(iter(json.loads(line))) in ("protocol", "metaData")
    ]
    add = next(json.loads(line)["add"] for line in first if line.startswith('{"add"'))
    data = (template / unquote(str(add["path"]))).read_bytes()
    stats = add.get("stats")
    now = int(time.time() * 1000)
    (log_dir / f"{0:020d}.json").write_text(
        _line({"commitInfo": {"timestamp": now, "operation": "CREATE TABLE"}})
        + "".join(line + "\n" for line in head)
    )
    for version in range(1, versions + 1):
        name = f"part-aged-{version:07d}-{uuid.uuid4().hex[:8]}.parquet"
        (table / name).write_bytes(data)
        action = {
            "path": name,
            "partitionValues": {},
            "size": len(data),
            "modificationTime": now,
            "dataChange": True,
            **({"stats": stats} if stats else {}),
        }
        info = {
            "timestamp": now,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append"},
            "readVersion": version - 1,
            "isBlindAppend": True,
            "engineInfo": "spark-chkpt bench (aged table)",
        }
        (log_dir / f"{version:020d}.json").write_text(
            _line({"commitInfo": info}) + _line({"add": action})
        )
        if version % CHECKPOINT_EVERY == 0:
            DeltaTable(str(table), version=version).create_checkpoint()
    return time.monotonic() - started


def _line(action: dict[str, Any]) -> str:
    return json.dumps(action, separators=(",", ":")) + "\n"


def measure(
    *,
    spark: Any,
    servers: str,
    workdir: Path,
    partitions: int,
    client: str,
    versions: list[int],
    batches: int = 20,
    per_batch: int = 500,
    rounds: int = 2,
) -> dict[str, Any]:
    """Per N of ``versions``, ``rounds`` pairs of runs (a fresh table, then one of N
    versions): the medians of each side and their ratio, in one session."""
    from deltalake import DeltaTable

    from bench.batch_cost import fill
    from bench.query import run_query

    topic = "bench-aged"
    fill(servers=servers, topic=topic, records=batches * per_batch, partitions=partitions)
    settings = {
        "source.kafka.bootstrap.servers": servers,
        "source.subscribe": topic,
        "source.startingOffsets": "earliest",
        "source.maxOffsetsPerTrigger": str(per_batch),
        "source.kafka.client": client,
    }

    def median_batch(name: str) -> float:
        _, _, per = run_query(spark=spark, settings=settings, workdir=workdir, name=name)
        ms = [p["triggerExecution"] for p in per if p.get("addBatch") is not None][1:]
        return float(statistics.median(ms))

    median_batch("aged-warm-up")  # the session's first query pays its warm-up
    rows: dict[str, Any] = {"per_batch": per_batch, "batches": batches, "rounds": rounds}
    fresh_all: list[float] = []
    for n in versions:
        pairs = []
        for r in range(rounds):  # a fresh run, then an aged one: the machine's drift
            fresh = median_batch(f"aged-fresh-{n}-{r}")
            name = f"aged-{n}-{r}"
            prepared = age(template=workdir / "aged-warm-up", table=workdir / name, versions=n)
            before = int(DeltaTable(str(workdir / name)).version())
            aged = median_batch(name)
            pairs.append({"fresh_ms": fresh, "aged_ms": aged, "prepare_s": round(prepared, 1)})
            fresh_all.append(fresh)
            shutil.rmtree(workdir / name, ignore_errors=True)
        fresh_median = statistics.median(p["fresh_ms"] for p in pairs)
        aged_median = statistics.median(p["aged_ms"] for p in pairs)
        rows[str(n)] = {
            "versions": before,
            "pairs": pairs,
            "fresh_ms": fresh_median,
            "median_ms": aged_median,
            "ratio": round(aged_median / fresh_median, 2),
        }
    rows["fresh_ms"] = statistics.median(fresh_all)
    return rows


def report_lines(rows: dict[str, Any]) -> list[str]:
    lines = [
        f"aged table: chkpt-kafka -> chkpt-delta, availableNow, {rows['per_batch']}-record "
        f"batches, median batch (triggerExecution, first batch left out), "
        f"{rows['rounds']} pairs of runs (fresh, aged) per size",
    ]
    for key, row in rows.items():
        if isinstance(row, dict):
            each = ", ".join(f"{p['fresh_ms']:.0f}/{p['aged_ms']:.0f}" for p in row["pairs"])
            lines.append(
                f"  {int(key):>7,} versions/files: fresh {row['fresh_ms']:.0f} ms, aged "
                f"{row['median_ms']:.0f} ms, {row['ratio']:.2f}x fresh  (pairs: {each})"
            )
    return lines
