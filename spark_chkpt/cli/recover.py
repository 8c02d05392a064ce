"""``spark-chkpt recover``: a lost checkpoint rebuilt from the Delta table."""

from __future__ import annotations

import argparse
from typing import Any

from spark_chkpt.cli.commands import command


def run(args: argparse.Namespace) -> int:
    """the checkpoint folder is lost: write a new one from the Delta table's last snapshot,
    so the query resumes exactly where the table ends (stateless queries)"""
    import json

    from spark_chkpt.cli.paths import require_folder
    from spark_chkpt.recovery.rebuild import recover_checkpoint
    from spark_chkpt.snapshot.epoch import read_epoch

    require_folder(args.table, what="table")
    snapshot = recover_checkpoint(
        table_uri=args.table, checkpoint_location=args.checkpoint, app_id=args.app_id
    )
    print(
        f"checkpoint {args.checkpoint} written: query {snapshot.app_id} resumes at batch "
        f"{snapshot.batch_id + 1}, after Delta version {snapshot.table_version}, from "
        f"{json.dumps(snapshot.record.source_offsets)}; generation "
        f"{read_epoch(checkpoint_location=args.checkpoint).generation} (a query still "
        "running on the lost checkpoint is fenced)"
    )
    return 0


def add_parser(sub: Any) -> None:
    recover = command(sub, "recover", run=run)
    recover.add_argument("--table", required=True, help="the chkpt-delta table's path")
    recover.add_argument("--checkpoint", required=True, help="an empty folder to write")
    recover.add_argument(
        "--app-id", default=None, help="the query id to recover, if the table holds several"
    )
