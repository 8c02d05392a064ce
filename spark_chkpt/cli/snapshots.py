"""``spark-chkpt snapshots``: a query's snapshot records."""

from __future__ import annotations

import argparse
from typing import Any

from spark_chkpt.cli.commands import add_json, command
from spark_chkpt.cli.paths import require_folder
from spark_chkpt.cli.state import or_dash


def run(args: argparse.Namespace) -> int:
    """list the snapshot records of a query"""
    import json

    from spark_chkpt.metrics.reporter import as_table, store_records, summarize
    from spark_chkpt.snapshot.store import SnapshotStore

    require_folder(args.checkpoint, what="checkpoint")
    records = store_records(checkpoint_location=args.checkpoint)
    failures = SnapshotStore(checkpoint_location=args.checkpoint).failures()
    if args.json:
        print(
            json.dumps(
                {
                    "summary": summarize(records, failures=failures),
                    "snapshots": [json.loads(r.to_json()) for r in records],
                },
                indent=2,
            )
        )
        return 0
    if not records:
        print(f"no snapshot records under {args.checkpoint}/chkpt/snapshots")
        return 1
    table = as_table(records)
    stateful = any(row["state_operators"] for row in table)
    state_header = f" {'operators':>9} {'keys':>10} {'state bytes':>12}" if stateful else ""
    print(
        f"{'batch':>6} {'outcome':<10} {'rows':>10} {'files':>6} {'commit ms':>10} "
        f"{'version':>8} {'dead':>6}{state_header}"
    )
    for row in table:
        state = (
            f" {row['state_operators']:>9} {or_dash(row['keys']):>10} {row['state_bytes']:>12}"
            if stateful
            else ""
        )
        print(
            f"{row['batch']:>6} {row['outcome']:<10} {row['rows']:>10} {row['files']:>6} "
            f"{row['commit_ms']:>10.1f} {row['version']!s:>8} {row['dead_letters']:>6}{state}"
        )
    summary = summarize(records, failures=failures)
    print(
        f"commit latency p50 {summary['commit_ms_p50']:.1f} ms, p99 "
        f"{summary['commit_ms_p99']:.1f} ms; last offsets {json.dumps(summary['last_offsets'])}"
    )
    if summary["timed_out"]:
        print(f"{summary['timed_out']} snapshot(s) failed on snapshotTimeout")
    return 0


def add_parser(sub: Any) -> None:
    snaps = command(sub, "snapshots", run=run)
    snaps.add_argument("checkpoint", help="the query's checkpointLocation")
    add_json(snaps, help="print JSON with a summary")
