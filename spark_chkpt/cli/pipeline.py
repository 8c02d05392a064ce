"""``spark-chkpt savepoint`` of a pipeline (``--pipeline``): create, show, restore; and the
report of a restore, one job's or each job's of a pipeline."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark_chkpt.cli.commands import add_brokers
from spark_chkpt.cli.state import or_dash

if TYPE_CHECKING:
    from spark_chkpt.savepoint.restore import RestoreResult


def pipeline_create(args: argparse.Namespace) -> str:
    """A pipeline savepoint of ``--pipeline-file`` or of ``--pipeline`` and its jobs: its
    folder."""
    from spark_chkpt.savepoint.pipeline.create import (
        create_pipeline_savepoint,
        create_pipeline_savepoint_from_file,
    )

    if args.pipeline_file is not None:
        if args.pipeline is not None or args.job or args.checkpoint is not None:
            raise SystemExit(
                "savepoint create --pipeline-file FILE: the file lists the pipeline's name "
                "and jobs; give no --pipeline, --job or checkpoint with it"
            )
        return create_pipeline_savepoint_from_file(
            path=args.pipeline_file,
            savepoint_dir=args.dir,
            bootstrap_servers=args.bootstrap_servers,
            timeout_s=args.timeout,
        ).location
    if args.checkpoint is not None or len(args.job) < 2 or not args.bootstrap_servers:
        raise SystemExit(
            "savepoint create --pipeline NAME: give every job with --job CHECKPOINT (two or "
            "more, no positional checkpoint) and --bootstrap-servers"
        )
    if args.dir is None:
        raise SystemExit("savepoint create --pipeline NAME: give --dir")
    return create_pipeline_savepoint(
        name=args.pipeline,
        checkpoints=args.job,
        savepoint_dir=args.dir,
        bootstrap_servers=args.bootstrap_servers,
        timeout_s=args.timeout or 0.0,
    ).location


def pipeline_show(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from spark_chkpt.savepoint.pipeline.manifest import load_pipeline

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


def sink_options(given: Sequence[str]) -> dict[str, str]:
    """``--sink-option name=value``, each once, as a plugin sink's kind takes them."""
    options: dict[str, str] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"savepoint restore: --sink-option {item!r}: give name=value")
        options[name.strip()] = value
    return options


def job_sink_options(given: Sequence[str]) -> dict[str, dict[str, str]]:
    """A pipeline's ``--sink-option JOB:NAME=VALUE``: each job's sink plugin inputs."""
    by_job: dict[str, list[str]] = {}
    for item in given:
        job, sep, option = item.partition(":")
        if not sep or not job.strip() or "=" in job:
            raise SystemExit(
                f"savepoint restore --pipeline: --sink-option {item!r}: --sink-option gives "
                "one job's sink its inputs: give JOB:NAME=VALUE"
            )
        by_job.setdefault(job.strip(), []).append(option)
    return {job: sink_options(options) for job, options in by_job.items()}


def pipeline_restore(args: argparse.Namespace) -> int:
    from spark_chkpt.savepoint.pipeline.restore import restore_pipeline

    if args.savepoint is not None or args.checkpoint is not None or not args.checkpoint_dir:
        raise SystemExit(
            "savepoint restore --pipeline PIPELINE: give --checkpoint-dir (each job is "
            "restored into <dir>/<job>), no savepoint or --checkpoint"
        )
    sink_options = job_sink_options(args.sink_option)
    from spark_chkpt.savepoint.pipeline.fork import load_fork, pairs

    for result in restore_pipeline(
        pipeline=args.pipeline,
        checkpoint_dir=args.checkpoint_dir,
        mode=args.mode,
        kafka_bootstrap_servers=args.bootstrap_servers,
        rename_topics=pairs(args.rename_topic, option="--rename-topic"),
        table_paths=args.table_path,
        sink_options=sink_options,
    ):
        print_restore(result)
    fork = load_fork(checkpoint_dir=args.checkpoint_dir) if args.mode == "fork" else None
    if fork is not None:
        for old, new in sorted(fork.topics.items()):
            starts = sorted(fork.starts[new].items(), key=lambda x: int(x[0]))
            print(
                f"topic {old} forked into {new} ({len(starts)} partitions): its readers "
                f"start at {', '.join(f'{p}:{o}' for p, o in starts)}"
            )
        for job, table in sorted(fork.tables.items()):
            print(f"job {job} writes the new table {table}")
    return 0


def add_create_arguments(create: argparse.ArgumentParser) -> None:
    """``savepoint create``'s options of a pipeline."""
    create.add_argument(
        "--pipeline",
        default=None,
        metavar="NAME",
        help="savepoint every --job of a pipeline joined by chkpt-kafka topics at cuts that "
        "match (the upstream's snapshot N, each downstream's batch that ends at barrier N)",
    )
    create.add_argument(
        "--pipeline-file",
        default=None,
        metavar="FILE",
        help="savepoint the pipeline a file lists (TOML, or JSON by its .json ending): its "
        "name, bootstrap_servers, jobs with their checkpoints and, optionally, the topics "
        "each reads and writes, checked against the checkpoints first",
    )
    create.add_argument(
        "--job",
        action="append",
        default=[],
        metavar="CHECKPOINT",
        help="--pipeline: a job's checkpointLocation (give each job once)",
    )
    add_brokers(create, help="--pipeline: the brokers of the topics that join the jobs")
    create.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="--pipeline: seconds to wait for the downstream jobs to reach a matching cut "
        "(0, or the pipeline file's timeout)",
    )


def add_restore_arguments(restore: argparse.ArgumentParser) -> None:
    """``savepoint restore``'s options of a pipeline."""
    restore.add_argument(
        "--pipeline",
        default=None,
        metavar="PIPELINE",
        help="restore every job of a pipeline savepoint (each job checked first, nothing "
        "changed if one cannot be restored) into --checkpoint-dir/<job>",
    )
    restore.add_argument(
        "--rename-topic",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="--pipeline --mode fork: the new topic of each topic a job writes with "
        "chkpt-kafka (created with the same partitions; its readers start at its first "
        "offsets); every such topic is renamed",
    )
    restore.add_argument(
        "--table-path",
        action="append",
        default=[],
        metavar="[JOB=]PATH",
        help="--pipeline --mode fork: the new table of each job that writes one (PATH alone "
        "when one job does)",
    )
    restore.add_argument(
        "--checkpoint-dir",
        default=None,
        help="--pipeline: the folder under which each job's new checkpoint is written",
    )


def print_restore(result: RestoreResult) -> None:
    print("\n".join(result.lines()))
