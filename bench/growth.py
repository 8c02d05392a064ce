"""How cost grows with a query's age, its partitions and its records' shape: the rows
that follow the main rows of ``make bench`` (``--core`` leaves them out,
``--growth-only`` runs them alone), each beside its target.

    make bench                                  # the main rows, then these
    python -m bench --growth-only [--quix-python PYTHON] [--json FILE]

Each row is the command that measures it alone, run as a process of its own with a
real Kafka broker of its own (a row fills topics another row's names would meet), in
this order: a table's age, the Kafka side's age, partitions, Spark's own ``kafka``
source on the same rows (a process of its own: beside ours, it slowed ours), 1,000
partitions planned, Kafka → Kafka by shape, the Quix Streams row split (with ours'
steady rate), the scheduled ``availableNow`` job end to end (bench/scheduled.py). Each
prints its own table as it ends; then :func:`summary_lines` sets
each target beside its figure. A failing row is named with its exit code, the others
still run, and the run then exits non-zero.

More: docs/performance/benchmarks.md (bench/growth.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.quix_row import spread

CHECKOUT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Row:
    """One row: its name (the key of its figures in the JSON) and its command's
    arguments after ``python``; ``--json FILE`` is added to them."""

    name: str
    argv: tuple[str, ...]


def plan(*, client: str, quix_python: str | None, repeat: int) -> list[Row]:
    """The rows of a run, in order. ``repeat``: the counted rounds of the Kafka → Kafka
    shapes (each after a warm-up round) and the runs of the Quix row."""
    quix = ("--quix-python", quix_python) if quix_python else ()
    return [
        Row(
            "aged_table",
            (
                "-m",
                "bench",
                "--aged-table-only",
                "--aged-versions",
                "1000,10000,100000",
                "--aged-rewritten",
                "10000",
                "--client",
                client,
            ),
        ),
        Row("kafka_age", ("-m", "bench.kafka_age", "--snapshots", "1000,100000")),
        Row(
            "partitions",
            ("-m", "bench.scaling", "partitions", "--counts", "4,64", "--client", client),
        ),
        Row(
            "partitions_spark",
            ("-m", "bench.scaling", "partitions", "--counts", "4,64", "--native-only"),
        ),
        Row("planning", ("-m", "bench.planning", "--partitions", "1000")),
        Row("k2k_shapes", ("-m", "bench", "--k2k-shapes-only", "--repeat", str(repeat))),
        Row(
            "quix",
            ("-m", "bench.quix_row", "--ours", "--runs", str(max(3, repeat)), *quix),
        ),
        Row("scheduled", ("-m", "bench.scheduled", "--records", "100000", "1000000")),
    ]


def run(*, rows: Sequence[Row], workdir: Path, python: str = sys.executable) -> dict[str, Any]:
    """Each row's command in turn; its figures (its JSON) by name, and under ``failed``
    the rows whose command exited non-zero, with the exit code."""
    workdir.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"failed": {}, "seconds": {}}
    for row in rows:
        out = workdir / f"growth-{row.name}.json"
        argv = [python, *row.argv, "--json", str(out)]
        print(f"[bench] growth row {row.name}: {' '.join(row.argv)}", flush=True)
        started = time.monotonic()
        code = subprocess.run(argv, cwd=CHECKOUT, check=False).returncode
        figures["seconds"][row.name] = round(time.monotonic() - started, 1)
        if code != 0 or not out.exists():
            print(f"spark-chkpt: bench growth row {row.name} exited {code}", flush=True)
            figures["failed"][row.name] = code
            continue
        figures[row.name] = json.loads(out.read_text())
    return figures


def _range(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    low, high = min(values), max(values)
    return fmt.format(low) if low == high else f"{fmt.format(low)}-{fmt.format(high)}"


def summary_lines(figures: dict[str, Any]) -> list[str]:
    """The targets beside this run's figures (a row that failed or did not run
    says so)."""
    lines = ["How cost grows, against its targets, this run:"]

    def missing(name: str) -> str | None:
        if name in figures.get("failed", {}):
            return f"failed (exit {figures['failed'][name]})"
        return None if name in figures else "not run"

    aged = figures.get("aged_table", {})
    for row in aged.values():
        if isinstance(row, dict) and "ratio" in row:
            rewritten = bool(row.get("rewritten"))
            what = "rewritten meanwhile" if rewritten else "versions"
            targets = {10_000: " (target <= 1.1)", 100_000: " (target <= 1.25)"}
            target = "" if rewritten else targets.get(row["versions"], "")
            lines.append(
                f"  table of {row['versions']:,} {what}: {row['ratio']:.2f}x a fresh "
                f"table's batch{target}"
            )
    if missing("aged_table"):
        lines.append(f"  a table's age: {missing('aged_table')}")
    age = figures.get("kafka_age", [])
    if age:
        oldest = max(age, key=lambda r: r["snapshots"])
        lines.append(
            f"  restart after {oldest['snapshots']:,} snapshots: {oldest['ratio']:.2f}x a "
            f"young query's (target <= 1.2)"
        )
    elif missing("kafka_age"):
        lines.append(f"  the Kafka side's age: {missing('kafka_age')}")
    parts = {
        r["label"]: r
        for r in [*figures.get("partitions", []), *figures.get("partitions_spark", [])]
    }
    if "4 partitions" in parts and "64 partitions" in parts:
        ours = parts["64 partitions"]["records_per_s"] / parts["4 partitions"]["records_per_s"]
        line = f"  64 partitions: {ours:.2f}x of 4 partitions' rate (target >= 0.9)"
        four = parts.get("4 partitions, Spark kafka → delta")
        sixty_four = parts.get("64 partitions, Spark kafka → delta")
        if four and sixty_four:
            spark = sixty_four["records_per_s"] / four["records_per_s"]
            line += f"; Spark's kafka -> delta {spark:.2f}x"
        elif missing("partitions_spark"):
            line += f"; Spark's kafka -> delta: {missing('partitions_spark')}"
        lines.append(line)
    elif missing("partitions"):
        lines.append(f"  partitions: {missing('partitions')}")
    planning = [r for r in figures.get("planning", []) if r["label"].startswith("1000 ")]
    if planning:
        each = ", ".join(
            f"{r['label'].split(', ')[-1]} p50 {r['batch_ms_p50']} / max {r['batch_ms_max']} ms"
            for r in planning
        )
        lines.append(f"  1,000 partitions planned per batch: {each} (target <= 100 ms)")
    elif missing("planning"):
        lines.append(f"  planning: {missing('planning')}")
    shapes = figures.get("k2k_shapes", [])
    if shapes:
        lines.append(
            f"  Kafka -> Kafka / Spark's, {len(shapes)} shapes: whole query "
            f"{_range([r['ratio'] for r in shapes])} (target >= 1.0); after the first batch "
            f"{_range([r.get('after_first_ratio', 0) for r in shapes])}"
        )
    elif missing("k2k_shapes"):
        lines.append(f"  Kafka -> Kafka by shape: {missing('k2k_shapes')}")
    quix = figures.get("quix", {})
    steady = [r["steady_rps"] for r in quix.get("quix", []) if r.get("steady_rps")]
    ours = [r["steady_rps"] for r in quix.get("ours", [])]
    if steady:
        line = (
            f"  Quix Streams steady exactly once: {_range(steady, '{:,.0f}')} records/s, "
            f"spread {spread(steady):.0%} (target <= 15%)"
        )
        if ours:
            line += (
                f"; ours {_range(ours, '{:,.0f}')}, "
                f"{min(ours) / max(steady):.2f}-{max(ours) / min(steady):.2f}x (target >= 1.5)"
            )
        lines.append(line)
    elif ours:
        lines.append(f"  ours' steady exactly once: {_range(ours, '{:,.0f}')} records/s (no Quix)")
    elif missing("quix"):
        lines.append(f"  Quix Streams: {missing('quix')}")
    scheduled = figures.get("scheduled", [])
    for row in scheduled:
        lines.append(
            f"  scheduled availableNow job, Kafka -> {row['path'].title()} "
            f"{row['records']:,} records, process start to exit: ours {row['ours_s']:.1f} s, "
            f"Spark's {row['spark_s']:.1f} s, {row['ratio']:.2f}x (target >= 1.2)"
        )
    if not scheduled and missing("scheduled"):
        lines.append(f"  the scheduled job: {missing('scheduled')}")
    if figures.get("seconds"):
        took = ", ".join(f"{k} {v:.0f} s" for k, v in figures["seconds"].items())
        lines.append(f"  each row's time: {took}")
    return lines
