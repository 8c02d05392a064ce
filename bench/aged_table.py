"""The "aged table" row: a batch's cost into a fresh Delta table and into an aged one.

The target: the per-batch cost of the ``chkpt-kafka`` → ``chkpt-delta`` query
(availableNow, ``per_batch``-record batches) into a table of N versions and N files is
at most 1.1× (N = 10,000) and 1.25× (N = 100,000) a fresh table's. :func:`age` prepares
the aged table cheaply but for real: version 0 is the protocol and metadata of a table
the sink itself created (so the query's schema fits), then N appends, each adding a link
to one of that table's Parquet files, written as Delta JSON commits, with a Parquet
checkpoint every 100 versions (delta-rs's default) written in delta-rs's own checkpoint
schema. delta-rs and the sink read it as any table. :func:`measure` then runs the same
query (same topic, a checkpoint and table per run), after a warm-up run, in pairs: a
fresh table, then the aged one; it reports each one's median batch (Spark's
``triggerExecution``, the first batch left out), the aged batches' p90 and maximum, and
the ratio."""

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


def age(*, template: Path, table: Path, versions: int) -> float:
    """Write ``table``: ``template``'s protocol and metadata (version 0), then
    ``versions`` appends of one file each (hard links to a data file of ``template``:
    distinct paths, one content) as JSON commits, and a Parquet checkpoint every
    :data:`CHECKPOINT_EVERY` versions with its ``_last_checkpoint``; returns the seconds
    it took. The first checkpoint is delta-rs's own; each later one is that file's
    protocol and metadata rows and one add row per version so far (its path changed),
    in that file's schema, so a 100,000-version table builds in seconds."""
    import os

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
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
    names = [f"part-aged-{v:07d}-{uuid.uuid4().hex[:8]}.parquet" for v in range(1, versions + 1)]
    header: pa.Table | None = None
    adds: pa.Table | None = None
    for version, name in enumerate(names, start=1):
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
        if version % CHECKPOINT_EVERY:
            continue
        if header is None or adds is None:  # delta-rs writes the first one
            DeltaTable(str(table), version=version).create_checkpoint()
            written = pq.read_table(log_dir / f"{version:020d}.checkpoint.parquet")
            header = written.filter(pc.is_null(written.column("add")))
            adds = _adds(written, names)
            continue
        checkpoint = pa.concat_tables([header, adds.slice(0, version)])
        _write_checkpoint(log_dir, version=version, table=checkpoint, files=version)
    return time.monotonic() - started


def _adds(written: Any, names: list[str]) -> Any:
    """One row per name of ``names`` in the schema of ``written`` (a checkpoint):
    its first add action's row, the path changed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    first = pc.index(pc.invert(pc.is_null(written.column("add"))), True).as_py()
    rows = written.take(pa.array([first] * len(names), pa.int64())).combine_chunks()
    column = rows.column("add").chunk(0)
    kind = column.type
    children = [column.field(i) for i in range(kind.num_fields)]
    children[kind.get_field_index("path")] = pa.array(names, pa.string())
    fields = [kind.field(i) for i in range(kind.num_fields)]
    add = pa.StructArray.from_arrays(children, fields=fields)
    return rows.set_column(rows.schema.get_field_index("add"), rows.schema.field("add"), add)


def _write_checkpoint(log_dir: Path, *, version: int, table: Any, files: int) -> None:
    """``table`` as the checkpoint of ``version`` and ``_last_checkpoint`` naming it, in
    the form delta-rs writes them."""
    import pyarrow.parquet as pq

    path = log_dir / f"{version:020d}.checkpoint.parquet"
    pq.write_table(table, path, write_statistics=False)  # readers read it whole
    last = {
        "version": version,
        "size": table.num_rows,
        "sizeInBytes": path.stat().st_size,
        "numOfAddFiles": files,
    }
    (log_dir / "_last_checkpoint").write_text(json.dumps(last, separators=(",", ":")))


def plan(*, versions: list[int], rewritten: int | None) -> list[tuple[str, int, bool]]:
    """The rows of one :func:`measure` call: (key, versions, rewritten). The key names
    the row and each of its runs' tables and checkpoints, so no two runs share one."""
    keys = [(str(n), n, False) for n in dict.fromkeys(versions)]
    return keys + ([(f"{rewritten}-rewritten", rewritten, True)] if rewritten else [])


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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

    def batch_ms(name: str) -> list[float]:
        """Each batch's ``triggerExecution`` of a run into ``workdir/name``, the first
        batch left out."""
        _, _, per = run_query(spark=spark, settings=settings, workdir=workdir, name=name)
        ms = [float(p["triggerExecution"]) for p in per if p.get("addBatch") is not None]
        if len(ms) < 3:
            raise RuntimeError(
                f"spark-chkpt: bench aged table: run {name} reported {len(ms)} batches "
                f"with data of {batches} (its checkpoint chk-{name} or topic {topic} "
                "already read?)"
            )
        return ms[1:]

    batch_ms("aged-warm-up")  # the session's first query pays its warm-up
    rows: dict[str, Any] = {"per_batch": per_batch, "batches": batches, "rounds": rounds}
    fresh_all: list[float] = []
    for key, n, rewrite in plan(versions=versions, rewritten=rewritten):
        pairs = []
        aged_all: list[float] = []
        for r in range(rounds):  # a fresh run, then an aged one: the machine's drift
            fresh_name, name = f"aged-fresh-{key}-{r}", f"aged-{key}-{r}"
            fresh = statistics.median(batch_ms(fresh_name))
            prepared = age(template=workdir / "aged-warm-up", table=workdir / name, versions=n)
            before = int(DeltaTable(str(workdir / name)).version())
            pair: dict[str, Any] = {"fresh_ms": fresh, "prepare_s": round(prepared, 1)}
            if rewrite:
                with rewriting(workdir / name) as done:
                    aged = batch_ms(name)
                pair["rewrites"] = done[0]
            else:
                aged = batch_ms(name)
            pair["aged_ms"] = statistics.median(aged)
            pair["aged_batches_ms"] = aged  # the checkpoint batches show here
            pairs.append(pair)
            aged_all += aged
            fresh_all.append(fresh)
            for folder in (fresh_name, name, f"chk-{fresh_name}", f"chk-{name}"):
                shutil.rmtree(workdir / folder, ignore_errors=True)
        fresh_median = statistics.median(p["fresh_ms"] for p in pairs)
        aged_median = statistics.median(p["aged_ms"] for p in pairs)
        rows[key] = {
            "versions": before,
            "rewritten": rewrite,
            "pairs": pairs,
            "fresh_ms": fresh_median,
            "median_ms": aged_median,
            "p90_ms": _quantile(aged_all, 0.9),
            "max_ms": max(aged_all),
            "ratio": round(aged_median / fresh_median, 2),
        }
    rows["fresh_ms"] = statistics.median(fresh_all)
    return rows


@contextmanager
def rewriting(table: Path, *, every_s: float = 1.0) -> Iterator[list[int]]:
    """Another job on ``table`` while the block runs: every ``every_s`` a delta-rs
    OPTIMIZE (compaction: one commit removing many files, adding few) and a VACUUM in
    delta-rs's lite mode with no retention: it deletes the files OPTIMIZE removed and
    never a file the query staged and has not committed (not a tombstone).
    Yields ``[rewrites done]``."""
    import threading

    from deltalake import DeltaTable

    done = [0]
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every_s):
            try:
                other = DeltaTable(str(table))
                other.optimize.compact()
                # lite mode: only the files OPTIMIZE removed (tombstones), at once; never
                # a file the query staged and has not committed yet
                other.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
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
                f"{row['median_ms']:.0f} ms (p90 {row['p90_ms']:.0f}, max {row['max_ms']:.0f}), "
                f"{row['ratio']:.2f}x fresh  (pairs: {each})"
            )
    return lines
