"""``spark-chkpt diff``: two Delta tables at equal source offsets (a shadow against
production)."""

from __future__ import annotations

import argparse
from typing import Any

from spark_chkpt.cli.commands import add_json, command


def run(args: argparse.Namespace) -> int:
    """compare two chkpt-delta tables at equal source offsets (exit 0: equal, 1: they
    differ, 2: no such versions)"""
    import json

    from spark_chkpt.diff.tables import diff_tables

    key = [k.strip() for k in (args.key or "").split(",") if k.strip()]
    result = diff_tables(table_a=args.table_a, table_b=args.table_b, key=key)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str, ensure_ascii=False))
    else:
        print("\n".join(result.lines(limit=args.limit)))
    return 0 if result.equal else 1


def add_parser(sub: Any) -> None:
    diff = command(
        sub,
        "diff",
        description="Pair a version of each table whose snapshot records have equal "
        "source offsets (the newest such pair), read both there and print the rows only "
        "in A, only in B and changed (by --key), with counts: production against a "
        "shadow fork of a new version of its job.",
        run=run,
    )
    diff.add_argument("table_a", help="table A (production)")
    diff.add_argument("table_b", help="table B (the shadow)")
    diff.add_argument(
        "--key",
        default=None,
        metavar="COL[,COL...]",
        help="the columns that identify a row (default: whole rows are compared)",
    )
    diff.add_argument("--limit", type=int, default=20, help="rows printed per kind (20)")
    add_json(diff, help="print JSON (every row)")
