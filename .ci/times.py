"""Where a CI run's minutes went, as the Markdown tables of docs/contributing.md.

    python3 .ci/times.py /var/tmp/spark-chkpt-ci/<start>-<commit> [--top N]

Reads what `.ci/run` kept: `steps.txt` (each step's wall time) and `test-times/*.json`
(each test's seconds, setup to teardown, with its kind; tests/conftest.py writes them).
Summed seconds are over both xdist workers: about twice a pass's wall time.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

# What a test of each kind pays for, mostly (docs/contributing.md, "CI time").
PAYS = {
    "fault": "a job's JVM started again after each kill, and the broker or Spark work between",
    "integration": "the worker's SparkSession and broker (started once), the work itself",
    "unit": "the work itself (the protocol simulation: 2,000 schedules)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    steps = args.run / "steps.txt"
    if steps.exists():
        print("| step | wall |\n|---|---|")
        for line in steps.read_text().splitlines():
            name, _, seconds = line.rpartition(": ")
            print(f"| `{name}` | {seconds} |")
        print()
    for times in sorted((args.run / "test-times").glob("*.json")):
        record = json.loads(times.read_text())
        tests = record["tests"]
        kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for nodeid, entry in tests.items():
            for table, key in ((kinds, entry["kind"]), (modules, nodeid.split("::")[0])):
                table[key][0] += entry["seconds"]
                table[key][1] += 1
        total = sum(s for s, _ in kinds.values())
        busy = record.get("cpu_busy")
        cpu = f"; the machine's cores {100 * busy:.0f}% busy" if busy is not None else ""
        summed = f"{total:,.0f} s summed over the workers{cpu}"
        print(f"**{times.stem}**: {len(tests):,} tests, {summed}\n")
        print("| kind | tests | seconds | share | pays for |\n|---|---:|---:|---:|---|")
        for kind, (seconds, count) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
            share = 100 * seconds / total if total else 0
            print(f"| {kind} | {count:,} | {seconds:,.0f} | {share:.0f}% | {PAYS.get(kind, '')} |")
        print(f"\n| module (the {args.top} longest) | tests | seconds |\n|---|---:|---:|")
        longest = sorted(modules.items(), key=lambda kv: -kv[1][0])[: args.top]
        for module, (seconds, count) in longest:
            print(f"| `{module}` | {count} | {seconds:,.0f} |")
        print()


if __name__ == "__main__":
    main()
