"""Cold figures: the first query of a fresh Spark session, each in a new process.

The benchmark runs ``python -m bench.cold`` once per source (``chkpt-kafka``
and the synthetic ceiling), so neither inherits a warm JVM, JIT or Python worker from the
other or from the warm runs. It prints one JSON line: the query's wall time (without the
session's start, which :func:`measure` reports apart) and Spark's per-phase totals.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def measure(
    *, source_format: str, settings: dict[str, str], workdir: Path, name: str, partitions: int
) -> dict[str, Any]:
    """Run one cold query in a new Python process; its figures as a dict."""
    command = [
        sys.executable,
        "-m",
        "bench.cold",
        "--source-format",
        source_format,
        "--workdir",
        str(workdir),
        "--name",
        name,
        "--partitions",
        str(partitions),
        "--settings",
        json.dumps(settings),
    ]
    return json_result(command, what=f"cold run {name}")


def json_result(command: list[str], *, what: str) -> dict[str, Any]:
    """Run a measuring program in a new process; the JSON object of its last ``{`` line."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold")
    parser.add_argument("--source-format", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--settings", required=True, help="the query's settings as JSON")
    args = parser.parse_args(argv)
    from bench.query import bench_session, run_query

    started = time.monotonic()
    spark = bench_session(partitions=args.partitions)
    session_s = time.monotonic() - started
    seconds, phases, _ = run_query(
        spark=spark,
        settings=json.loads(args.settings),
        workdir=Path(args.workdir),
        name=args.name,
        source_format=args.source_format,
    )
    print(json.dumps({"seconds": seconds, "session_s": session_s, "phases": phases}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
