"""``spark-chkpt savepoint`` of a pipeline (``--pipeline``): create, show, restore; and the
report of a restore, one job's or each job's of a pipeline."""

from __future__ import annotations

import argparse
from typing import Any

from spark_chkpt.cli.state import or_dash


def pipeline_create(args: argparse.Namespace) -> int:
    from spark_chkpt.savepoint.pipeline import create_pipeline_savepoint

    if args.checkpoint is not None or len(args.job) < 2 or not args.bootstrap_servers:
        raise SystemExit(
            "savepoint create --pipeline NAME: give every job with --job CHECKPOINT (two or "
            "more, no positional checkpoint) and --bootstrap-servers"
        )
    point = create_pipeline_savepoint(
        name=args.pipeline,
        checkpoints=args.job,
        savepoint_dir=args.dir,
        bootstrap_servers=args.bootstrap_servers,
        timeout_s=args.timeout,
    )
    print(point.location)
    return 0


def pipeline_show(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from spark_chkpt.savepoint.pipeline import load_pipeline

    point = load_pipeline(location=args.pipeline)
    m = point.manifest
    if args.json:
        print(json.dumps(asdict(m), indent=2))
        return 0
    print(f"pipeline    {m.name} at {point.location} ({len(m.jobs)} jobs)")
    for job in m.jobs:
        print(
            f"job         {job.name}: snapshot {job.batch_id} of query {job.query_id}, sink "
            f"{or_dash(job.sink)} {or_dash(job.target)}; savepoint {job.savepoint} (from "
            f"{job.checkpoint})"
        )
    for j in m.joins:
        offsets = ", ".join(
            f"{p}:{o}" for p, o in sorted(j.offsets.items(), key=lambda x: int(x[0]))
        )
        print(
            f"join        {j.topic}: {j.upstream} snapshot {j.snapshot} (barrier of app "
            f"{j.app_id}) -> {j.downstream} batch {j.downstream_batch} at offsets {offsets}"
        )
    return 0


def pipeline_restore(args: argparse.Namespace) -> int:
    from spark_chkpt.savepoint.pipeline import restore_pipeline

    if args.savepoint is not None or args.checkpoint is not None or not args.checkpoint_dir:
        raise SystemExit(
            "savepoint restore --pipeline PIPELINE: give --checkpoint-dir (each job is "
            "restored into <dir>/<job>), no savepoint or --checkpoint"
        )
    for result in restore_pipeline(
        pipeline=args.pipeline,
        checkpoint_dir=args.checkpoint_dir,
        mode=args.mode,
        kafka_bootstrap_servers=args.bootstrap_servers,
    ):
        print_restore(result)
    return 0


def print_restore(result: Any) -> None:
    print(
        f"checkpoint {result.checkpoint_location} written ({result.mode}): query "
        f"{result.query_id} resumes at batch {result.resumes_at}, generation "
        f"{result.generation} (writers of older generations are fenced)"
    )
    for topic, snapshots in (result.revoked or {}).items():
        print(
            f"topic {topic}: snapshots {', '.join(map(str, snapshots)) or 'none'} after "
            f"{result.resumes_at - 1} revoked at generation {result.generation} (readers "
            "skip their records)"
        )
    if result.restore_version is not None:
        print(
            f"table {result.table} rolled back from version {result.rolled_back_from} in "
            f"version {result.restore_version}"
            + (
                f" ({result.others_rolled_back} commit(s) without app id undone)"
                if result.others_rolled_back
                else ""
            )
        )
    elif result.table is not None:
        print(f"table {result.table} already ends at that snapshot: left as it is")
    if result.dead_letters_restore_version is not None:
        print(
            f"dead-letter table {result.dead_letter_table} rolled back from version "
            f"{result.dead_letters_rolled_back_from} in version "
            f"{result.dead_letters_restore_version}"
        )
    elif result.dead_letter_table is not None:
        print(
            f"dead-letter table {result.dead_letter_table} already ends at that snapshot: "
            "left as it is"
        )
