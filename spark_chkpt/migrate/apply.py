"""The writing half of a migration: what :func:`~spark_chkpt.migrate.plan.plan_migration`
planned, written in this order, each step atomic and safe to repeat:

1. ``commits/N`` for a batch the table already holds (the kill case, settled);
2. ``--to chkpt``: the snapshot record of the last batch done in the store
   (``chkpt/snapshots/N.json``: ``spark-chkpt snapshots``/``status`` show where the query
   resumes, a savepoint names its table) and the new generation (``chkpt/epoch.json``);
3. the generation in the table last (``txn(<appId>#generation, g)``, an empty commit):
   ``--to chkpt`` records the migration in the table's history; ``--to spark`` fences
   any ``chkpt-delta`` writer still started on this checkpoint (its epoch is older).

Spark's offset log is not rewritten: both sources read and write the same offset JSON
(:mod:`spark_chkpt.migrate`). A crash between the steps leaves a checkpoint the command
plans again: each step's check in the plan passes or is already done.
"""

from __future__ import annotations

import json

from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.fs import qualify, resolve
from spark_chkpt.migrate.plan import MigrationPlan
from spark_chkpt.snapshot.epoch import write_epoch
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.store import SnapshotStore


def apply_migration(plan: MigrationPlan) -> list[str]:
    """Write ``plan.writes`` (see the module docstring); returns one line per write."""
    options = plan.options
    location = qualify(options.checkpoint)
    root = resolve(location)
    done: list[str] = []
    for write in plan.writes:
        if write.kind == "commit-log":
            # Step 1
            root.child("commits", str(plan.planned)).write_atomic(write.what)
        elif write.kind == "snapshot-record":
            # Step 2
            SnapshotStore(checkpoint_location=location).put(
                SnapshotRecord(
                    batch_id=plan.done,
                    app_id=plan.app_id,
                    query_name=None,
                    sink="chkpt-delta",
                    source_offsets=list(plan.sources),
                    table_version=plan.table_version,
                    rows=0,
                    files=0,
                    bytes=0,
                    commit_ms=0.0,
                    outcome=CommitOutcome.COMMITTED.value,
                    target=qualify(options.table or ""),
                )
            )
        elif write.kind == "generation":
            write_epoch(
                root,
                generation=plan.generation or 0,
                started_by="migrate",
                source=f"spark-chkpt migrate --to {options.to}",
            )
        elif write.kind == "table-generation":
            # Step 3
            target = DeltaTarget(uri=qualify(options.table or ""))
            target.start_generation(
                target.require(),
                app_id=plan.app_id,
                generation=plan.generation or 0,
                metadata={
                    "chkpt.generation": json.dumps(
                        {"migrate": location, "to": options.to, "generation": plan.generation}
                    )
                },
            )
        shown = (
            f"batch {plan.planned} is in the table" if write.kind == "commit-log" else write.what
        )
        done.append(f"wrote {write.where}: {shown}")
    return done
