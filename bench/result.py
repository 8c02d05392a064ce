"""What one benchmark run measured (``spark-chkpt bench --json`` writes it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    records: int
    partitions: int
    per_trigger: int
    client: str = "kafka-python"
    seconds: dict[str, float] = field(default_factory=dict)
    rate: dict[str, float] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    commit_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    worker_peak_rss_mb: float | None = None
    breakdown_ms: dict[str, dict[str, int]] = field(default_factory=dict)
    cold: dict[str, dict[str, Any]] = field(default_factory=dict)
    kafka_to_kafka: list[dict[str, Any]] = field(default_factory=list)
    latency: list[dict[str, Any]] = field(default_factory=list)
    quix: dict[str, Any] = field(default_factory=dict)
    batch_cost: dict[str, Any] = field(default_factory=dict)
    native: dict[str, Any] = field(default_factory=dict)  # bench/native.py's NativeRuns
    min_pause: list[dict[str, Any]] = field(default_factory=list)  # bench/min_pause.py
    decode: dict[str, Any] = field(default_factory=dict)  # bench/decode.py
    aligned_read: dict[str, Any] = field(default_factory=dict)  # bench/aligned_read.py
