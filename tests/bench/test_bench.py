"""The benchmark's own parts that decide its figures: the ceiling's synthetic source yields
exactly the records the benchmark produces into Kafka, and latency is read back per row."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from bench.latency import commit_latencies
from bench.synthetic import SyntheticStreamReader, write_partitions
from spark_chkpt.testing.generator import PageViews


def test_the_synthetic_source_yields_the_produced_records_once_in_offset_order(
    tmp_path: Path,
) -> None:
    write_partitions(folder=tmp_path, topic="bench", records=1_003, partitions=4)
    reader = SyntheticStreamReader(folder=str(tmp_path), max_rows=300, rows_per_batch=64)
    start = reader.initialOffset()
    seen: dict[int, list[tuple[int, bytes]]] = {}
    batches = 0
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        assert sum(end[p] - start[p] for p in end) <= 300
        for part in reader.partitions(start, end):
            for batch in reader.read(part):
                assert batch.num_rows <= 64
                rows = batch.to_pydict()
                for p, o, v in zip(rows["partition"], rows["offset"], rows["value"], strict=True):
                    seen.setdefault(p, []).append((o, v))
        start = end
        batches += 1
    assert batches == 4  # 1,003 records at 300 per trigger
    views = PageViews()
    for p, rows in seen.items():
        assert [o for o, _ in rows] == list(range(len(rows)))
        assert [v for _, v in rows] == [views.encoded(i)[1] for i in range(p, 1_003, 4)]
    assert sum(len(rows) for rows in seen.values()) == 1_003
    everything = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert everything == {"0": 251, "1": 251, "2": 251, "3": 250}
    assert reader.latestOffset(everything, ReadMaxRows(10)) == everything


def test_latency_is_each_rows_commit_file_time_minus_its_kafka_timestamp(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    now_us = int(time.time() * 1_000_000)
    schema = pa.schema([("kafka_timestamp", pa.timestamp("us", tz="UTC"))])
    for ages_ms in ([1_000, 250], [40]):
        stamps = [now_us - age * 1_000 for age in ages_ms]
        write_deltalake(
            str(tmp_path),
            pa.table([pa.array(stamps, schema[0].type)], schema=schema),
            mode="append",
        )
    log = sorted((tmp_path / "_delta_log").glob("*.json"))
    # Pin each commit's visibility time so the expected latencies are exact.
    visible_ms = [now_us / 1000 + 500, now_us / 1000 + 900]
    for entry, at_ms in zip(log, visible_ms, strict=True):
        os.utime(entry, ns=(int(at_ms * 1e6), int(at_ms * 1e6)))
        assert any("add" in json.loads(line) for line in entry.read_text().splitlines())
    latencies, commits = commit_latencies(tmp_path)
    assert commits == 2
    assert sorted(round(ms) for ms in latencies) == [750, 940, 1_500]


def test_latency_variants_are_named_settings_in_the_order_given() -> None:
    """--latency-only alternates its variants in the order given; a variant may have no
    settings (the defaults), and a malformed one is refused naming the flag."""
    from bench.pipeline import _variants

    assert _variants([]) == {"default": {}}
    variants = _variants(
        [
            "default:",
            "one-task:source.partitionsPerTask=4",
            "sql:spark.sql.streaming.minBatchesToRetain=10, job.trigger=processingTime=0 seconds",
        ]
    )
    assert list(variants) == ["default", "one-task", "sql"]
    assert variants["one-task"] == {"source.partitionsPerTask": "4"}
    assert variants["sql"] == {
        "spark.sql.streaming.minBatchesToRetain": "10",
        "job.trigger": "processingTime=0 seconds",
    }
    for bad in ("no-colon", ":source.x=1", "v:source.x"):
        with pytest.raises(SystemExit, match="spark-chkpt: --latency-variant"):
            _variants([bad])
