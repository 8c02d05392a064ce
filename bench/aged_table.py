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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

CHECKPOINT_EVERY = 100


# Above this many versions, only the last FULL_CHECKPOINTS_TAIL versions get their
# checkpoints (each earlier one is a delta-rs load and a growing Parquet file: 100,000
# versions checkpointed every 100 would take most of an hour). The log still holds
# every JSON commit, which is what a listing reads.
FULL_CHECKPOINTS_UP_TO = 20_000
FULL_CHECKPOINTS_TAIL = 1_000


def age(*, template: Path, table: Path, versions: int) -> float:
    """Write ``table``: ``template``'s protocol and metadata (version 0), then
    ``versions`` appends of one file each (hard links to a data file of ``template``:
    distinct paths, one content), checkpointed every 100 versions (above
    :data:`FULL_CHECKPOINTS_UP_TO` versions, in the last :data:`FULL_CHECKPOINTS_TAIL`
    only); returns the seconds it took."""
    import os

    from deltalake import DeltaTable

    started = time.monotonic()
    log_dir = table / "_delta_log"
    log_dir.mkdir(parents=True)
    first = (template / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    head = [
        line for line in first if line and next(iter(json.loads(line))) in ("protocol", "metaData")
    ]
    add = next(json.loads(line)["add"] for line in first if line.startswith('{"add"'))
    source = template / unquote(str(add["path"]))
    data = source.read_bytes()
    stats = add.get("stats")
    now = int(time.time() * 1000)
    (log_dir / f"{0:020d}.json").write_text(
        _line({"commitInfo": {"timestamp": now, "operation": "CREATE TABLE"}})
        + "".join(line + "\n" for line in head)
    )
    for version in range(1, versions + 1):
        name = f"part-aged-{version:07d}-{uuid.uuid4().hex[:8]}.parquet"
        try:
            os.link(source, table / name)
        except OSError:  # the file system's limit of links to one file: a new source
            (table / name).write_bytes(data)
            source = table / name
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
        tail = versions <= FULL_CHECKPOINTS_UP_TO or version > versions - FULL_CHECKPOINTS_TAIL
        if version % CHECKPOINT_EVERY == 0 and tail:
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
    rewritten: int | None = None,
) -> dict[str, Any]:
    """Per N of ``versions``, ``rounds`` pairs of runs (a fresh table, then one of N
    versions): the medians of each side and their ratio, in one session. ``rewritten``:
    one more row, a table of that many versions that another job OPTIMIZEs and VACUUMs
    while the query runs (:func:`rewriting`)."""
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
    sizes = [(n, False) for n in versions] + ([(rewritten, True)] if rewritten else [])
    for n, rewrite in sizes:
        pairs = []
        for r in range(rounds):  # a fresh run, then an aged one: the machine's drift
            fresh = median_batch(f"aged-fresh-{n}-{r}")
            name = f"aged-{n}-{r}{'-rewritten' if rewrite else ''}"
            prepared = age(template=workdir / "aged-warm-up", table=workdir / name, versions=n)
            before = int(DeltaTable(str(workdir / name)).version())
            pair: dict[str, Any] = {"fresh_ms": fresh, "prepare_s": round(prepared, 1)}
            if rewrite:
                with rewriting(workdir / name) as done:
                    pair["aged_ms"] = median_batch(name)
                pair["rewrites"] = done[0]
            else:
                pair["aged_ms"] = median_batch(name)
            pairs.append(pair)
            fresh_all.append(fresh)
            shutil.rmtree(workdir / name, ignore_errors=True)
        fresh_median = statistics.median(p["fresh_ms"] for p in pairs)
        aged_median = statistics.median(p["aged_ms"] for p in pairs)
        rows[f"{n}-rewritten" if rewrite else str(n)] = {
            "versions": before,
            "rewritten": rewrite,
            "pairs": pairs,
            "fresh_ms": fresh_median,
            "median_ms": aged_median,
            "ratio": round(aged_median / fresh_median, 2),
        }
    rows["fresh_ms"] = statistics.median(fresh_all)
    return rows


@contextmanager
def rewriting(table: Path, *, every_s: float = 1.0) -> Iterator[list[int]]:
    """Another job on ``table`` while the block runs: every ``every_s`` a delta-rs
    OPTIMIZE (compaction: one commit removing many files, adding few) and a VACUUM
    (its commits; 1 hour retention: the files staged by the query's batches in flight
    are never vacuumed, as Delta requires). Yields ``[rewrites done]``."""
    import threading

    from deltalake import DeltaTable

    done = [0]
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every_s):
            try:
                other = DeltaTable(str(table))
                other.optimize.compact()
                other.vacuum(retention_hours=1, enforce_retention_duration=False, dry_run=False)
                done[0] += 1
            except Exception as e:  # a lost race with the query's commit: next round
                print(f"aged table rewrite: {e}", flush=True)

    thread = threading.Thread(target=run, name="aged-rewrite", daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join()


def report_lines(rows: dict[str, Any]) -> list[str]:
    lines = [
        f"aged table: chkpt-kafka -> chkpt-delta, availableNow, {rows['per_batch']}-record "
        f"batches, median batch (triggerExecution, first batch left out), "
        f"{rows['rounds']} pairs of runs (fresh, aged) per size",
    ]
    for row in rows.values():
        if isinstance(row, dict):
            each = ", ".join(f"{p['fresh_ms']:.0f}/{p['aged_ms']:.0f}" for p in row["pairs"])
            what = "versions/files"
            if row.get("rewritten"):
                rewrites = sum(p.get("rewrites", 0) for p in row["pairs"])
                what += f", OPTIMIZE+VACUUM by another job meanwhile ({rewrites} rounds)"
            lines.append(
                f"  {row['versions']:>7,} {what}: fresh {row['fresh_ms']:.0f} ms, aged "
                f"{row['median_ms']:.0f} ms, {row['ratio']:.2f}x fresh  (pairs: {each})"
            )
    return lines
