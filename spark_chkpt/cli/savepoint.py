"""``spark-chkpt savepoint``: create, stop, list, show, check, restore."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from spark_chkpt.cli.commands import add_brokers, add_job
from spark_chkpt.cli.paths import require_folder, require_savepoint
from spark_chkpt.cli.pipeline import (
    add_create_arguments,
    add_restore_arguments,
    pipeline_create,
    pipeline_restore,
    pipeline_show,
    print_restore,
    sink_options,
)
from spark_chkpt.cli.state import or_dash, reader_session


def _savepoint_create(args: argparse.Namespace) -> int:
    from spark_chkpt.savepoint.manifest import create_savepoint

    if args.pipeline is not None or args.pipeline_file is not None:
        print(pipeline_create(args))
        return 0
    if args.checkpoint is None or args.job:
        raise SystemExit(
            "savepoint create: give one checkpoint, or --pipeline NAME --job ..., or "
            "--pipeline-file FILE"
        )
    if args.dir is None:
        raise SystemExit("savepoint create: give --dir, the folder that keeps savepoints")
    require_folder(args.checkpoint, what="checkpoint")

    point = create_savepoint(
        checkpoint_location=args.checkpoint,
        savepoint_dir=args.dir,
        batch_id=args.batch,
        table=args.table,
    )
    print(point.location)
    return 0


def _savepoint_stop(args: argparse.Namespace) -> int:
    from spark_chkpt.savepoint.stop import request_stop

    require_folder(args.checkpoint, what="checkpoint")
    point = request_stop(
        checkpoint_location=args.checkpoint, savepoint_dir=args.dir, timeout_s=args.timeout
    )
    print(point.location)
    return 0


def _savepoint_list(args: argparse.Namespace) -> int:
    import json

    from spark_chkpt.savepoint.manifest import describe, list_savepoints
    from spark_chkpt.savepoint.pipeline.manifest import list_pipelines

    require_folder(args.dir, what="savepoint folder")
    rows = [describe(p.manifest) for p in list_savepoints(savepoint_dir=args.dir)]
    pipelines = list_pipelines(savepoint_dir=args.dir)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for p in pipelines:
        jobs = ", ".join(f"{j.name} at {j.batch_id}" for j in p.manifest.jobs)
        print(f"pipeline {p.manifest.pipeline_id}: {jobs}")
    if not rows and pipelines:
        return 0
    if not rows:
        print(f"no complete savepoint under {args.dir}")
        return 1
    header = (
        f"{'savepoint':<44} {'batch':>6} {'sink':<12} {'version':>7} {'ops':>3} {'keys':>8} "
        f"{'files':>5} {'bytes':>10} {'reason':<6} created (UTC)"
    )
    print(header)
    for r in rows:
        print(
            f"{r['savepoint']:<44} {r['batch']:>6} {or_dash(r['sink']):<12} "
            f"{or_dash(r['table_version']):>7} {r['operators']:>3} {or_dash(r['keys']):>8} "
            f"{r['files']:>5} {r['bytes']:>10} {r['reason']:<6} {r['created']}"
        )
    return 0


def _savepoint_show(args: argparse.Namespace) -> int:
    import json

    from spark_chkpt.savepoint.manifest import load_savepoint, verify_files

    if args.pipeline is not None:
        return pipeline_show(args)
    if args.savepoint is None:
        raise SystemExit("savepoint show: give a savepoint folder, or --pipeline PIPELINE")
    require_savepoint(args.savepoint)
    point = load_savepoint(location=args.savepoint)
    verify_files(point)
    m = point.manifest
    states = _savepoint_states(point.checkpoint, m.operators, args.limit) if args.state else []
    if args.json:
        doc = json.loads(m.to_json())
        if args.state:
            doc["state"] = [
                {"operator": s.operator_id, "keys": s.keys, "rows": s.rows} for s in states
            ]
        print(json.dumps(doc, indent=2, default=str))
        return 0
    sink = m.sink
    print(f"savepoint   {point.location} ({m.reason}, {len(m.files)} files, {m.total_bytes} bytes)")
    print(f"snapshot    {m.batch_id} of query {m.query_id} ({m.query_name or 'unnamed'})")
    print(f"taken from  {m.checkpoint}")
    print(f"offsets     {json.dumps(m.source_offsets)}")
    if sink is not None:
        from spark_chkpt.sinks import sink_kind

        where = sink_kind(sink.kind).describe(
            target=sink.target, app_id=sink.app_id, batch_id=m.batch_id, version=sink.table_version
        )
        print(f"sink        {sink.kind} {or_dash(sink.target)} ({sink.mode}): {where}")
        if sink.dead_letters:
            print(
                f"dead letters {sink.dead_letters}: Delta version "
                f"{or_dash(sink.dead_letter_version)}"
            )
    print(f"state       {m.provider or '-'}, version {or_dash(m.state_version)}")
    for op in m.operators:
        print(
            f"  operator {op.operator_id} ({op.name or '?'}): {op.partitions} partitions, "
            f"stores {', '.join(op.stores)}, keys {or_dash(op.keys)}, {op.files} files, "
            f"{op.bytes} bytes"
        )
    print("versions    " + ", ".join(f"{k} {v}" for k, v in sorted(m.versions.items())))
    for snap in states:
        print(f"# operator {snap.operator_id}: {snap.keys} keys")
        for row in snap.rows:
            print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    return 0


def _savepoint_states(checkpoint: str, operators: Sequence[Any], limit: int | None) -> list[Any]:
    """The keyed state of each operator, read from the savepoint's own copy (a valid
    checkpoint: reading it also proves the copied state files load)."""
    from spark_chkpt.state.reader import read_state

    if not operators:
        return []
    spark = reader_session("spark-chkpt-savepoint-show")
    try:
        return [
            read_state(
                spark,
                checkpoint_location=checkpoint,
                operator_id=op.operator_id,
                limit=limit,
            )
            for op in operators
        ]
    finally:
        spark.stop()


def job_plan(job: str, job_args: Sequence[str]) -> Any:
    """The new job's plan (nothing run); a ``module:function`` job gets a small local
    session, a script makes its own."""
    from spark_chkpt.savepoint.plan import load_job

    arguments = list(job_args)
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    return load_job(
        job=job, args=arguments, session=lambda: reader_session("spark-chkpt-savepoint-check")
    )


def _savepoint_check(args: argparse.Namespace) -> int:
    import json

    from spark_chkpt.savepoint.check import check_savepoint
    from spark_chkpt.savepoint.manifest import load_savepoint, verify_files

    # After JOB: our --json, then the script job's arguments (argparse drops a "--"
    # that directly follows JOB, so both spellings arrive here).
    rest = list(args.job_args)
    if "--" in rest:
        ours, job_args = rest[: rest.index("--")], rest[rest.index("--") + 1 :]
    else:
        lead = next((i for i, a in enumerate(rest) if a != "--json"), len(rest))
        ours, job_args = rest[:lead], rest[lead:]
    unknown = [a for a in ours if a != "--json"]
    if unknown or (job_args and ":" in args.job):
        print(
            f"spark-chkpt savepoint check: {' '.join(unknown or job_args)}: unknown option "
            "(only a script job takes arguments, after --)",
            file=sys.stderr,
        )
        return 2
    json_output = args.json or "--json" in ours
    require_savepoint(args.savepoint)
    point = load_savepoint(location=args.savepoint)
    verify_files(point)
    report = check_savepoint(savepoint=point, plan=job_plan(args.job, job_args))
    if json_output:
        print(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    else:
        print("\n".join(report.lines()))
    return int(report.status)


def _savepoint_restore(args: argparse.Namespace) -> int:
    import shlex

    from spark_chkpt.savepoint.restore import restore_savepoint

    if args.pipeline is not None:
        return pipeline_restore(args)
    if args.savepoint is None or args.checkpoint is None:
        raise SystemExit("savepoint restore: give the savepoint and --checkpoint")
    if args.shadow and args.mode != "fork":
        print("spark-chkpt savepoint restore: --shadow needs --mode fork", file=sys.stderr)
        return 2
    require_savepoint(args.savepoint)
    job = job_plan(args.job, shlex.split(args.job_args)) if args.job else None
    result = restore_savepoint(
        savepoint=args.savepoint,
        checkpoint_location=args.checkpoint,
        mode=args.mode,
        table=args.table,
        discard_other_writers=[w.strip() for w in args.discard_other_writers.split(",") if w],
        dead_letter_table=args.dead_letter_table,
        job=job,
        allow_non_restored_state=args.allow_non_restored_state,
        shadow=args.shadow,
        kafka_bootstrap_servers=args.bootstrap_servers,
        control_topic=args.control_topic,
        sink_options=sink_options(args.sink_option),
    )
    if result.shadow:
        print("shadow fork: production's checkpoint and table are left alone")
    if result.dropped_operators:
        print(
            "state of operator(s) "
            + ", ".join(str(o) for o in result.dropped_operators)
            + " left out (--allow-non-restored-state)"
        )
    print_restore(result)
    return 0


def add_parser(sub: Any) -> None:
    sp = sub.add_parser(
        "savepoint",
        help="savepoints: create, stop with one, list, show, check a new job, restore "
        "(rewind or fork)",
    ).add_subparsers(dest="action", required=True)
    _add_create(sp)
    _add_stop(sp)
    _add_list(sp)
    _add_show(sp)
    _add_check(sp)
    _add_restore(sp)


def _add_create(sp: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``savepoint create``: one query's snapshot, or a pipeline's."""
    create = sp.add_parser("create", help="savepoint a query's newest completed snapshot")
    create.add_argument("checkpoint", nargs="?", help="the query's checkpointLocation")
    create.add_argument(
        "--dir",
        default=None,
        help="the folder that keeps savepoints (with --pipeline-file: its savepoint_dir if "
        "not given)",
    )
    create.add_argument("--batch", type=int, default=None, help="snapshot N (default: newest)")
    create.add_argument("--table", default=None, help="the sink's table, if records lack it")
    add_create_arguments(create)
    create.set_defaults(run=_savepoint_create)


def _add_stop(sp: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``savepoint stop``: Flink's stop with savepoint."""
    stop = sp.add_parser(
        "stop", help="stop a running job with a savepoint of its last snapshot (Flink's stop)"
    )
    stop.add_argument("checkpoint", help="the running query's checkpointLocation")
    stop.add_argument("--dir", required=True, help="the folder that keeps savepoints")
    stop.add_argument("--timeout", type=float, default=600.0, help="seconds to wait (600)")
    stop.set_defaults(run=_savepoint_stop)


def _add_list(sp: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``savepoint list``: the complete savepoints of a folder."""
    listing = sp.add_parser("list", help="the complete savepoints in a folder, oldest first")
    listing.add_argument("dir", help="the folder that keeps savepoints")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(run=_savepoint_list)


def _add_show(sp: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``savepoint show``: a manifest, a pipeline's, or the keyed state."""
    show = sp.add_parser("show", help="a savepoint's manifest (and its keyed state)")
    show.add_argument("savepoint", nargs="?", help="the savepoint's folder")
    show.add_argument(
        "--pipeline",
        default=None,
        metavar="PIPELINE",
        help="a pipeline savepoint (its folder or pipeline.json): jobs, snapshots, joins",
    )
    show.add_argument("--state", action="store_true", help="print the keyed state (starts Spark)")
    show.add_argument("--limit", type=int, default=None, help="print at most L keys")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(run=_savepoint_show)


def _add_check(sp: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``savepoint check``: a new job against a savepoint, not run."""
    check = sp.add_parser(
        "check",
        help="dry run: will the savepoint restore into a new version of the job? (exit 0: "
        "yes, 1: some state would be dropped, 2: incompatible)",
        description="Plan the new job without running it and compare it with the "
        "savepoint: sources, sink, output mode, and each stateful operator's key and value "
        "schemas. JOB is path/to/job.py:function or module:function (a function of the "
        "SparkSession returning the query's DataStreamWriter, without start()), or "
        "path/to/job.py or a module: the script you run, run here with the arguments "
        "after JOB, whose start() only plans.",
    )
    check.add_argument("--json", action="store_true", help="print JSON")
    check.add_argument("savepoint", help="the savepoint's folder")
    check.add_argument("job", help="the new job: path/to/job.py[:function] or module[:function]")
    check.add_argument(
        "job_args",
        nargs=argparse.REMAINDER,
        metavar="-- ARGS",
        help="a script job's command line (after --)",
    )
    check.set_defaults(run=_savepoint_check)


def _add_restore(sp: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``savepoint restore``: rewind or fork, its options in the order ``--help`` shows."""
    restore = sp.add_parser(
        "restore",
        help="write a new checkpoint from a savepoint: rewind (same query, table "
        "rolled back) or fork (new query id, new table)",
    )
    restore.add_argument("savepoint", nargs="?", help="the savepoint's folder")
    restore.add_argument("--checkpoint", default=None, help="an empty folder to write")
    add_restore_arguments(restore)
    _add_restore_target(restore)
    _add_restore_job(restore)
    restore.add_argument(
        "--shadow",
        action="store_true",
        help="fork only: a shadow beside production, refused unless it writes nothing "
        "production owns (its table, topic, checkpoint, consumer group)",
    )
    _add_restore_kafka(restore)
    restore.set_defaults(run=_savepoint_restore)


def _add_restore_target(restore: argparse.ArgumentParser) -> None:
    """What a restore writes to: the mode, the table, the writers it may undo."""
    restore.add_argument(
        "--mode",
        required=True,
        choices=("rewind", "fork"),
        help="rewind: the same query goes back to the savepoint (its table rolled back, a "
        "chkpt-kafka sink's later snapshots revoked); fork: a new query (new id) starts "
        "from the savepoint into a new table, the original left alone",
    )
    restore.add_argument(
        "--table",
        default=None,
        help="rewind: the table (default: the manifest's); fork: the new table, checked to differ",
    )
    restore.add_argument(
        "--discard-other-writers",
        default="",
        metavar="APP_ID,...",
        help="rewind: the other writers (app ids; no-app-id for commits without one) whose "
        "commits after the snapshot the rewind may undo (default: none, refused)",
    )
    restore.add_argument(
        "--dead-letter-table",
        default=None,
        help="the sink's dead-letter table (deadLetterPath), only for a savepoint of an "
        "earlier release that does not name it: a rewind rolls it back too",
    )
    restore.add_argument(
        "--sink-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an input of a sink plugin's own rewind or fork, by the name its docs give "
        "(repeat for several); with --pipeline, JOB:NAME=VALUE gives it to that job's sink",
    )


def _add_restore_job(restore: argparse.ArgumentParser) -> None:
    """The job a restore checks before it writes anything."""
    add_job(
        restore,
        help="the job to start on the new checkpoint (as for savepoint check): the "
        "restore checks it first and refuses an incompatible one before writing anything",
    )
    restore.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="with --job: leave out the state of operators the job no longer has "
        "(default: refused)",
    )


def _add_restore_kafka(restore: argparse.ArgumentParser) -> None:
    """A chkpt-kafka sink's rewind (or a pipeline fork): its brokers and control topic."""
    add_brokers(
        restore,
        help="rewind of a query writing chkpt-kafka (or of a pipeline holding one): the "
        "brokers of its topic (the rewind revokes the snapshots after N in the topic's "
        "control topic); a pipeline fork: the brokers that get the new topics",
    )
    restore.add_argument(
        "--control-topic",
        default=None,
        help="rewind of a query writing chkpt-kafka: its control topic, if the sink set "
        "controlTopic (default __chkpt.<topic>)",
    )
