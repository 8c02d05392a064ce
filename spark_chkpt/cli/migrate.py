"""``spark-chkpt migrate``: a stopped query moved onto the chkpt formats or back onto
Spark's own ``kafka`` and ``delta`` (:mod:`spark_chkpt.migrate`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from spark_chkpt.cli.commands import add_job, command

if TYPE_CHECKING:
    from spark_chkpt.migrate.options import MigrateOptions
    from spark_chkpt.migrate.plan import MigrationPlan


def run(args: argparse.Namespace) -> int:
    """move a stopped query between Spark's own kafka/delta formats and the chkpt ones on
    its checkpoint, with no record lost or repeated"""
    import shlex

    from spark_chkpt.cli.paths import require_folder
    from spark_chkpt.migrate.options import MigrateOptions
    from spark_chkpt.migrate.plan import plan_migration
    from spark_chkpt.migrate.state import state_checker

    require_folder(args.checkpoint, what="checkpoint")
    if args.table:
        require_folder(args.table, what="table")
    options = MigrateOptions.from_values(
        checkpoint=args.checkpoint,
        to=args.to,
        sink=args.sink,
        table=args.table,
        dry_run=args.dry_run,
        options=args.option,
        watch_s=args.watch,
    )
    check = None
    if args.job:
        from spark_chkpt.cli.savepoint import job_plan

        check = state_checker(
            table=args.table, job_plan=job_plan(args.job, shlex.split(args.job_args))
        )
    plan = plan_migration(options=options, check_state=check)
    if args.job:
        stop_planning_session()
    return _report(plan, options)


def _report(plan: MigrationPlan, options: MigrateOptions) -> int:
    """Print what ``plan`` found and, unless a dry run, write it (``apply_migration``)
    and say how the query starts on the checkpoint; exit status 0."""
    from spark_chkpt.migrate.apply import apply_migration

    print("found:")
    for line in plan.found():
        print(f"  {line}")
    side = (
        "chkpt-kafka / chkpt-delta"
        if options.to == "chkpt"
        else "Spark's kafka / delta-spark's delta"
    )
    if options.dry_run:
        print("dry run, nothing written; would write:")
        for write in plan.writes:
            print(f"  {write.where}: {write.what.splitlines()[0]}")
        if not plan.writes:
            print("  nothing: the checkpoint is taken over as it is")
        return 0
    written = apply_migration(plan)
    for line in written or ["nothing to write: the checkpoint is taken over as it is"]:
        print(line)
    print(
        f"migrated: start the query with {side} on {options.checkpoint}; it runs batch "
        f"{plan.resume_at} first"
        + (
            " (at-least-once: Spark's kafka sink)"
            if options.sink == "kafka" and options.to == "spark"
            else ""
        )
    )
    return 0


def stop_planning_session() -> None:
    """Stop the session the ``--job`` script started to plan its query, its log at ERROR
    first: left to the interpreter's exit, Spark's log4j warnings of the shutdown came
    after the command's last line (``migrated: ...``)."""
    import contextlib

    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return
    with contextlib.suppress(Exception):  # a context half gone: nothing to quiet
        context.setLogLevel("ERROR")
    context.stop()


def add_parser(sub: Any) -> None:
    migrate = command(sub, "migrate", run=run)
    migrate.add_argument("checkpoint", help="the stopped query's checkpointLocation")
    migrate.add_argument("--to", required=True, choices=("chkpt", "spark"))
    migrate.add_argument(
        "--sink", default="delta", choices=("delta", "kafka"), help="the query's sink (delta)"
    )
    migrate.add_argument("--table", default=None, help="the Delta sink's table (sink delta)")
    migrate.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option the job gives its source or sink (txnAppId, ...): one the other "
        "side cannot honour is refused, named",
    )
    add_job(
        migrate,
        help="a stateful query: the job it moves to (as for savepoint check), compared "
        "with the state's operators before anything is written",
    )
    migrate.add_argument(
        "--watch",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long the checkpoint's logs must stay unchanged (a running query writes them): 5",
    )
    migrate.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
