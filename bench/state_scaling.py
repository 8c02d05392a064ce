"""How cost grows with keyed state: a per-user count with 10k, 1M and 10M distinct keys on
RocksDB (changelog checkpointing, the project's default), its batch commit time and the
time of ``spark-chkpt savepoint create`` at each size.

More: docs/performance/benchmarks.md (bench/state_scaling.py).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT = "chkpt-bench-keys"
SIZES = (10_000, 1_000_000, 10_000_000)
APPS = 20
_ROWS_PER_ARROW_BATCH = 200_000


def next_end(*, position: int, keys: int, load_per_batch: int, per_batch: int, tail: int) -> int:
    """The end offset of the batch that starts at ``position``: load batches up to ``keys``,
    then ``tail`` batches of ``per_batch``; ``position`` itself when nothing is left."""
    if position < keys:
        return min(keys, position + load_per_batch)
    return min(position + per_batch, keys + tail * per_batch)


def split(start: int, end: int, tasks: int) -> list[tuple[int, int]]:
    """``[start, end)`` in at most ``tasks`` contiguous, non-empty ranges."""
    size = end - start
    if size <= 0:
        return []
    count = min(tasks, size)
    bounds = [start + size * i // count for i in range(count + 1)]
    return list(itertools.pairwise(bounds))


def rows(start: int, end: int, keys: int) -> Iterator[pa.RecordBatch]:
    """Rows ``start .. end`` as Arrow batches: user ``i % keys``, app ``app-{i % 20}``."""
    import numpy as np
    import pyarrow as pa

    names = pa.array([f"app-{a}" for a in range(APPS)], pa.string())
    for lo in range(start, end, _ROWS_PER_ARROW_BATCH):
        i = np.arange(lo, min(end, lo + _ROWS_PER_ARROW_BATCH), dtype=np.int64)
        app = pa.DictionaryArray.from_arrays(pa.array(i % APPS, pa.int32()), names)
        yield pa.record_batch(
            {"app": app.cast(pa.string()), "user": pa.array(i % keys, pa.int64())}
        )


class _Range(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        super().__init__(None)
        self.start, self.end = start, end


class KeysStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self, *, keys: int, load_per_batch: int, per_batch: int, tail: int, tasks: int
    ) -> None:
        self.keys, self.load_per_batch = keys, load_per_batch
        self.per_batch, self.tail, self.tasks = per_batch, tail, tasks

    def initialOffset(self) -> dict:
        return {"n": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        """The rows are fixed by the options: all of them are available now."""

    def latestOffset(self, start: dict, limit: Any) -> dict:
        end = next_end(
            position=int(start["n"]),
            keys=self.keys,
            load_per_batch=self.load_per_batch,
            per_batch=self.per_batch,
            tail=self.tail,
        )
        return {"n": end}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [_Range(a, b) for a, b in split(int(start["n"]), int(end["n"]), self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        return rows(partition.start, partition.end, self.keys)

    def commit(self, end: dict) -> None:
        pass


class KeysDataSource(DataSource):
    """``format("chkpt-bench-keys")``: see the module's docstring."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return "app string, user bigint"

    def reader(self, schema: StructType) -> DataSourceReader:
        raise NotImplementedError(f"{FORMAT} is a stream source only")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        o = self.options
        return KeysStreamReader(
            keys=int(o["keys"]),
            load_per_batch=int(o.get("loadPerBatch", "2000000")),
            per_batch=int(o.get("perBatch", "1000")),
            tail=int(o.get("tailBatches", "10")),
            tasks=int(o.get("partitions", "4")),
        )


def tail_figures(progress: Sequence[dict[str, Any]], *, load_batches: int) -> dict[str, Any]:
    """Medians over the batches after the ``load_batches`` that filled the state: Spark's
    phases and the state operator's commit time; the state's size after the last one."""
    tail = [p for p in progress if p["batchId"] >= load_batches and p.get("numInputRows")]
    figures: dict[str, Any] = {"tail_batches": len(tail)}
    for phase in ("triggerExecution", "addBatch", "walCommit", "commitOffsets"):
        values = [p["durationMs"].get(phase, 0) for p in tail]
        figures[phase] = statistics.median(values) if values else None
    commits = [p["stateOperators"][0]["commitTimeMs"] for p in tail if p.get("stateOperators")]
    figures["state_commit_ms"] = statistics.median(commits) if commits else None
    last = progress[-1]["stateOperators"][0] if progress and progress[-1]["stateOperators"] else {}
    figures["state_rows"] = last.get("numRowsTotal")
    figures["state_memory_mb"] = round(last.get("memoryUsedBytes", 0) / 2**20, 1)
    return figures


def copied_kinds(folder: Path) -> dict[str, dict[str, int]]:
    """Files and bytes under ``folder`` by kind: zip, sst, changelog, other."""
    kinds: dict[str, dict[str, int]] = {}
    for root, _, names in os.walk(folder):
        for name in names:
            ext = name.rsplit(".", 1)[-1] if "." in name else ""
            kind = ext if ext in ("zip", "sst", "changelog") else "other"
            entry = kinds.setdefault(kind, {"files": 0, "bytes": 0})
            entry["files"] += 1
            entry["bytes"] += (Path(root) / name).stat().st_size
    return kinds


def _cli(*args: str) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "spark_chkpt.cli", *args], capture_output=True, text=True
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"spark-chkpt {' '.join(args)} failed: {done.stderr[-2000:]}")
    return seconds


def measure_size(
    *, spark: Any, workdir: Path, keys: int, load_per_batch: int = 2_000_000, tail: int = 10
) -> dict[str, Any]:
    """One state size: fill, update, savepoint. Figures as a dict."""
    checkpoint = workdir / f"state-{keys}" / "chk"
    query = (
        spark.readStream.format(FORMAT)
        .option("keys", str(keys))
        .option("loadPerBatch", str(load_per_batch))
        .option("tailBatches", str(tail))
        .load()
        .groupBy("user")
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .queryName(f"bench_state_{keys}")
        .trigger(availableNow=True)
        .start()
    )
    started = time.monotonic()
    query.awaitTermination()
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"state bench at {keys} keys failed: {query.exception()}")
    progress = [dict(p) for p in query.recentProgress]
    load_batches = -(-keys // load_per_batch)
    figures = tail_figures(progress, load_batches=load_batches)
    savepoints = workdir / f"state-{keys}" / "savepoints"
    create = ("savepoint", "create", str(checkpoint), "--dir", str(savepoints))
    figures["savepoint_s"] = round(_cli(*create), 2)
    (made,) = [p for p in savepoints.iterdir() if not p.name.startswith(".")]
    figures["savepoint_copied"] = copied_kinds(made)
    figures["checkpoint_state"] = copied_kinds(checkpoint / "state")
    return {"keys": keys, "seconds": round(seconds, 1), "load_batches": load_batches, **figures}


def measure(
    *, spark: Any, workdir: Path, sizes: Sequence[int] = SIZES, budget_s: float = 1_800
) -> dict[str, Any]:
    """Every size in turn, smallest first; a size is skipped when the ones before it used
    ``budget_s`` (its figures say so)."""
    spark.dataSource.register(KeysDataSource)
    cli_floor_s = round(_cli("--help"), 2)
    started = time.monotonic()
    measured, skipped = [], []
    for keys in sizes:
        if time.monotonic() - started > budget_s:
            skipped.append(keys)
            continue
        print(f"[bench] state: {keys:,} keys", flush=True)
        measured.append(measure_size(spark=spark, workdir=workdir, keys=keys))
        print(json.dumps(measured[-1]), flush=True)
    return {"cli_floor_s": cli_floor_s, "sizes": measured, "skipped": skipped}


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def table_lines(state: dict[str, Any]) -> list[str]:
    """The state rows as a Markdown table: per size, the tail batches' medians and the
    savepoint's time and copied bytes."""
    lines = [
        "**State size (per-user count, RocksDB, changelog checkpointing; "
        "tail batches of 1,000 rows, medians)**",
        "",
        "| keys | state rows | batch ms | addBatch ms | state commit ms | walCommit ms | "
        "commitOffsets ms | savepoint s | copied MB (zip / sst / changelog) | "
        "state on disk MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for s in state["sizes"]:
        copied = s["savepoint_copied"]
        on_disk = sum(k["bytes"] for k in s["checkpoint_state"].values())
        kinds = ("zip", "sst", "changelog")
        parts = " / ".join(_mb(copied.get(k, {}).get("bytes", 0)) for k in kinds)
        lines.append(
            f"| {s['keys']:,} | {s['state_rows'] or 0:,} | {s['triggerExecution']:g} | "
            f"{s['addBatch']:g} | {s['state_commit_ms']:g} | {s['walCommit']:g} | "
            f"{s['commitOffsets']:g} | {s['savepoint_s']:.2f} | {parts} | {_mb(on_disk)} |"
        )
    lines.append("")
    lines.append(
        f"`spark-chkpt --help` alone (the CLI's interpreter start): {state['cli_floor_s']:.2f} s"
    )
    if state["skipped"]:
        lines.append(f"not measured (time budget): {', '.join(f'{k:,}' for k in state['skipped'])}")
    return lines
