"""The project's Delta writing (delta-rs) against delta-spark's, with the same guarantees,
on the same data: where could Spark's own Delta writer replace hand-written Delta code?

    python -m bench.delta_writers [--records N] [--per-trigger T]

More: docs/performance/benchmarks.md (bench/delta_writers.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def _write_input(folder: Path, *, records: int, per_trigger: int) -> str:
    """The page views as Parquet, ``per_trigger`` events a file; the Spark DDL schema."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, PageViews

    views = PageViews(seed=1)
    folder.mkdir(parents=True)
    for n, first in enumerate(range(0, records, per_trigger)):
        rows = [views.event(i) for i in range(first, min(records, first + per_trigger))]
        for row in rows:
            row["ts"] = dt.datetime.fromisoformat(str(row["ts"]))
        table = pa.Table.from_pylist(rows)
        table = table.set_column(
            table.schema.get_field_index("duration_ms"),
            "duration_ms",
            table["duration_ms"].cast(pa.int32()),
        )
        pq.write_table(table, folder / f"part-{n:05d}.parquet")
    return PAGE_VIEW_SCHEMA_DDL


def _stream(spark: Any, folder: Path, schema: str) -> Any:
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(folder))


def _run(writer: Any) -> tuple[float, int]:
    started = time.monotonic()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"{query.name} failed: {query.exception()}")
    return seconds, len(query.recentProgress)


def _txn_write(path: str) -> Callable[[Any, int], None]:
    def write(batch: Any, batch_id: int) -> None:
        app = batch.sparkSession.conf.get("spark.chkpt.bench.app")
        (
            batch.write.format("delta")
            .mode("append")
            .option("txnAppId", app)
            .option("txnVersion", batch_id)
            .save(path)
        )

    return write


def _txn_merge(path: str) -> Callable[[Any, int], None]:
    def upsert(batch: Any, batch_id: int) -> None:
        session = batch.sparkSession
        app = session.conf.get("spark.chkpt.bench.app")
        if not (Path(path) / "_delta_log").exists():
            batch.write.format("delta").option("txnAppId", app).option("txnVersion", batch_id).save(
                path
            )
            return
        view = f"updates_{batch_id}"
        batch.createOrReplaceTempView(view)
        session.conf.set("spark.databricks.delta.write.txnAppId", app)
        session.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            session.sql(
                f"MERGE INTO delta.`{path}` t USING {view} s ON t.user_id = s.user_id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )
        finally:
            session.conf.unset("spark.databricks.delta.write.txnAppId")
            session.conf.unset("spark.databricks.delta.write.txnVersion")

    return upsert


def run(*, records: int, per_trigger: int, repeat: int, workdir: Path) -> dict[str, Any]:
    from deltalake import DeltaTable

    from bench.query import bench_session
    from spark_chkpt import DeltaUpsert
    from spark_chkpt.testing.generator import PageViews

    partitions = 2
    folder = workdir / "input"
    schema = _write_input(folder, records=records, per_trigger=per_trigger)
    spark = bench_session(partitions=partitions, connectors=True)
    views = PageViews(seed=1)
    per_user = Counter(str(views.event(i)["user_id"]) for i in range(records))

    def chk(name: str) -> str:
        return str(workdir / f"chk-{name}")

    def append_a(name: str) -> tuple[float, int]:
        path = str(workdir / name)
        return _run(
            _stream(spark, folder, schema)
            .writeStream.format("chkpt-delta")
            .option("path", path)
            .option("checkpointLocation", chk(name))
        )

    def append_b(name: str) -> tuple[float, int]:
        spark.conf.set("spark.chkpt.bench.app", f"bench-{name}")
        return _run(
            _stream(spark, folder, schema)
            .writeStream.foreachBatch(_txn_write(str(workdir / name)))
            .option("checkpointLocation", chk(name))
        )

    def append_c(name: str) -> tuple[float, int]:
        return _run(
            _stream(spark, folder, schema)
            .writeStream.format("delta")
            .option("path", str(workdir / name))
            .option("checkpointLocation", chk(name))
        )

    def counts() -> Any:
        return _stream(spark, folder, schema).groupBy("user_id").count()

    def merge_d(name: str) -> tuple[float, int]:
        upsert = DeltaUpsert(
            path=str(workdir / name), keys=["user_id"], checkpoint_location=chk(name)
        )
        return _run(
            counts()
            .writeStream.outputMode("update")
            .foreachBatch(upsert)
            .option("checkpointLocation", chk(name))
        )

    def merge_e(name: str) -> tuple[float, int]:
        spark.conf.set("spark.chkpt.bench.app", f"bench-{name}")
        return _run(
            counts()
            .writeStream.outputMode("update")
            .foreachBatch(_txn_merge(str(workdir / name)))
            .option("checkpointLocation", chk(name))
        )

    variants: dict[str, Callable[[str], tuple[float, int]]] = {
        "A_chkpt_delta": append_a,
        "B_delta_spark_txn_write": append_b,
        "C_delta_spark_sink": append_c,
        "D_delta_upsert": merge_d,
        "E_delta_spark_merge": merge_e,
    }
    seconds: dict[str, float] = {}
    batches: dict[str, int] = {}
    keys = list(variants)
    for round_no in range(repeat + 1):  # round 0 warms up (and counts when repeat=0)
        shift = round_no % len(keys)
        for key in keys[shift:] + keys[:shift]:
            name = f"{key[0]}{round_no}"
            print(f"[delta-writers] round {round_no}/{repeat}: {key}", flush=True)
            took, n = variants[key](name)
            _check(spark, key, workdir / name, records=records, per_user=per_user)
            print(f"[delta-writers] {key}: {took:.2f} s, {n} batches, checked", flush=True)
            if (round_no or not repeat) and (key not in seconds or took < seconds[key]):
                seconds[key], batches[key] = took, n
    # A replayed batch is skipped by the delta-spark writers, as by the project's.
    spark.conf.set("spark.chkpt.bench.app", "bench-B1")
    replay = spark.read.format("delta").load(str(workdir / "B1")).limit(5)
    before = DeltaTable(str(workdir / "B1")).version()
    _txn_write(str(workdir / "B1"))(replay, 0)
    if DeltaTable(str(workdir / "B1")).version() != before:
        raise RuntimeError("delta-spark committed a replayed batch (txnVersion 0) again")
    spark.conf.set("spark.chkpt.bench.app", "bench-E1")
    before = DeltaTable(str(workdir / "E1")).version()
    _txn_merge(str(workdir / "E1"))(spark.read.format("delta").load(str(workdir / "E1")), 1)
    if DeltaTable(str(workdir / "E1")).version() != before:
        raise RuntimeError("delta-spark MERGE committed a replayed batch (txnVersion 1) again")
    spark.stop()
    rates = {k: round(records / s) for k, s in seconds.items()}
    return {
        "records": records,
        "per_trigger": per_trigger,
        "seconds": {k: round(s, 2) for k, s in seconds.items()},
        "records_per_s": rates,
        "batches": batches,
        "ratios": {
            "A/B": round(seconds["B_delta_spark_txn_write"] / seconds["A_chkpt_delta"], 3),
            "A/C": round(seconds["C_delta_spark_sink"] / seconds["A_chkpt_delta"], 3),
            "D/E": round(seconds["E_delta_spark_merge"] / seconds["D_delta_upsert"], 3),
        },
    }


def _check(spark: Any, key: str, path: Path, *, records: int, per_user: Counter[str]) -> None:
    """Every record once (append), the exact counts (merge), read by delta-spark."""
    df = spark.read.format("delta").load(str(path))
    if key[0] in "ABC":
        rows, distinct = df.count(), df.select("event_id").distinct().count()
        if rows != records or distinct != records:
            raise RuntimeError(f"{key}: {rows} rows, {distinct} distinct of {records}")
        return
    got = {r.user_id: r["count"] for r in df.collect()}
    if got != dict(per_user):
        raise RuntimeError(f"{key}: the counts differ from plain Python's")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.delta_writers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-trigger", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spark-chkpt-delta-writers-"))
    result = run(
        records=args.records, per_trigger=args.per_trigger, repeat=args.repeat, workdir=workdir
    )
    print(json.dumps(result, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
