"""The planning half of a migration: read the checkpoint and the table, check that they
agree, and say what must be written. Nothing here writes to the checkpoint or the table.

More: docs/concepts/savepoints.md (spark_chkpt/migrate/plan.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import ChkptError, MigrationError
from spark_chkpt.fs import Location, qualify, resolve
from spark_chkpt.migrate.options import MigrateOptions
from spark_chkpt.offsets import META_KEY, from_json
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.snapshot.epoch import read_epoch

log = logging.getLogger(__name__)

Settled = Literal["committed", "done-in-table", "replay"]
NOTHING = "nothing was written"


@dataclass(frozen=True)
class Write:
    """One thing the migration writes: its kind, where, and what."""

    kind: Literal["commit-log", "snapshot-record", "generation", "table-generation"]
    where: str
    what: str


@dataclass(frozen=True)
class MigrationPlan:
    """What the checkpoint and the sink say, and what a migration writes."""

    options: MigrateOptions
    query_id: str
    app_id: str
    planned: int  # the newest batch in offsets/
    committed: int | None  # the newest batch in commits/
    settled: Settled
    resume_at: int  # the batch the next query runs first
    sources: tuple[Any, ...]  # offsets of the last batch done (the resume point)
    table_version: int | None  # the Delta version holding the last batch done
    generation: int | None  # the new generation (--to chkpt), or the fence (--to spark)
    operators: tuple[int, ...] = ()
    state_check: list[str] = field(default_factory=list)
    writes: tuple[Write, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def done(self) -> int:
        """The last batch whose output is complete in the sink."""
        return self.resume_at - 1

    def found(self) -> list[str]:
        """What the checkpoint and the sink say, one line each."""
        o = self.options
        lines = [
            f"checkpoint {o.checkpoint}: query {self.query_id}, newest planned batch "
            f"{self.planned} (offsets/{self.planned}), newest committed batch "
            f"{'none' if self.committed is None else self.committed}",
            f"sources of batch {self.done}: {describe_sources(self.sources)}",
        ]
        if o.sink == "delta":
            lines.append(
                f"table {o.table}: txn({self.app_id}) holds batch {self.done}"
                + (f" (Delta version {self.table_version})" if self.table_version else "")
            )
        lines.append(f"batch {self.planned}: {SETTLED[self.settled].format(n=self.planned)}")
        if self.operators:
            lines.append(f"keyed state of operators {', '.join(map(str, self.operators))}:")
            lines += [f"  {line}" for line in self.state_check]
        lines += list(self.notes)
        return lines


SETTLED = {
    "committed": "committed in Spark's log and in the sink",
    "done-in-table": "planned, not in Spark's commit log, but in the table: it is done "
    "(commits/{n} is written)",
    "replay": "planned, not in Spark's commit log nor in the table: the next query "
    "replays it from its planned offsets",
}


def describe_sources(sources: tuple[Any, ...]) -> str:
    parts = []
    for source in sources:
        offsets = from_json(source)
        parts.append(", ".join(f"{tp}: {offsets[tp]}" for tp in sorted(offsets)))
    return "; ".join(f"[{p}]" for p in parts)


def plan_migration(
    *,
    options: MigrateOptions,
    check_state: Callable[[str, int], list[str]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> MigrationPlan:
    """Steps 1 to 5 of the module docstring. ``check_state(checkpoint, batch)`` compares
    a stateful checkpoint's operators with the new job (the lines to print; it raises if
    the state cannot be kept); None when no job was given."""
    started = clock()
    location = qualify(options.checkpoint)
    root = resolve(location)
    before = _log_listing(root)
    spark = SparkCheckpoint(location=location)
    # Step 1: Spark's logs.
    try:
        query_id = spark.query_id()
    except ChkptError as e:
        raise MigrationError(f"{e}; {NOTHING}") from e
    planned, committed = _open_batch(location, before)
    _require_migrate(location)
    # Step 2: the sources.
    sources = _kafka_sources(spark, planned, options)
    # Step 3: the sink.
    app_id = options.txn_app_id or query_id
    sink = _settle_sink(options, location, planned=planned, committed=committed, app_id=app_id)
    if sink.done >= 0:
        sources = _kafka_sources(spark, sink.done, options)
    # Step 4: the state.
    operators, state_check = _keyed_state(location, committed, check_state)
    writes = _writes(
        options, root, sink.settled, planned, app_id, sources, sink.done, sink.generation
    )
    notes = sink.notes + _spark_side_notes(options, app_id=app_id, query_id=query_id)
    # Step 5: running? The logs must not change while we look.
    sleep(max(0.0, options.watch_s - (clock() - started)))
    _refuse_running(root, location, before, watch_s=options.watch_s)
    return MigrationPlan(
        options=options,
        query_id=query_id,
        app_id=app_id,
        planned=planned,
        committed=committed,
        settled=sink.settled,
        resume_at=sink.done + 1,
        sources=sources,
        table_version=sink.table_version,
        generation=sink.generation,
        operators=operators,
        state_check=state_check,
        writes=tuple(writes),
        notes=notes,
    )


def _require_migrate(location: str) -> None:
    """Step 1's end: a checkpoint a chkpt sink wrote names its kind in its newest
    snapshot record, and the kind must support a migration (the registry says)."""
    from spark_chkpt.sinks import require_tool
    from spark_chkpt.snapshot.store import SnapshotStore

    try:
        record = SnapshotStore(checkpoint_location=location).latest()
    except ChkptError:  # an unreadable record: the store is a copy, the logs decide
        return
    if record is not None:
        require_tool(record.sink or None, tool="migrate", command="migrate")


def _open_batch(
    location: str, listing: list[tuple[tuple[str, int], int]]
) -> tuple[int, int | None]:
    """Step 1: the newest planned and the newest committed batch of Spark's logs, which
    must leave at most one batch open (the one a stop or a kill leaves)."""
    planned_batches = sorted(n for n, _ in listing if n[0] == "offsets")
    if not planned_batches:
        raise MigrationError(
            f"{location} has no planned batch (no offsets/N): the query never ran a batch; "
            f"start the new query on a fresh checkpoint instead. {NOTHING}"
        )
    planned = planned_batches[-1][1]
    commits = sorted(n for n, _ in listing if n[0] == "commits")
    committed = commits[-1][1] if commits else None
    if committed is not None and committed > planned:
        raise MigrationError(
            f"{location}: commits/{committed} has no plan (the newest offsets entry is "
            f"offsets/{planned}): the logs disagree. {NOTHING}"
        )
    if committed != planned and committed != planned - 1 and planned != 0:
        raise MigrationError(
            f"{location}: batch {planned} is planned (offsets/{planned}) but the commit log "
            f"ends at {'nothing' if committed is None else f'commits/{committed}'}: batches "
            f"{(committed or -1) + 1}..{planned - 1} are neither committed nor the one "
            f"batch a stop or a kill leaves open. {NOTHING}"
        )
    return planned, committed


@dataclass(frozen=True)
class _SinkSettled:
    """Step 3's answer: how the open batch settles in the sink, the last batch done, and
    for a Delta table the version holding it and the new generation."""

    settled: Settled
    done: int
    table_version: int | None = None
    generation: int | None = None
    notes: tuple[str, ...] = ()


def _settle_sink(
    options: MigrateOptions, location: str, *, planned: int, committed: int | None, app_id: str
) -> _SinkSettled:
    """Step 3: a Delta table's ``txn(appId)`` settles the open batch; Kafka's sink cannot
    say whether it reached the topic, so it runs again."""
    if options.sink != "delta":
        settled: Settled = "committed" if committed == planned else "replay"
        barriers = " (downstream chkpt-kafka readers see no more barriers)" * (
            options.to == "spark"
        )
        note = (
            "sink: Kafka. Spark's kafka sink is at-least-once: a batch it wrote and did "
            f"not commit is written again by the next query{barriers}"
        )
        done = planned if settled == "committed" else planned - 1
        return _SinkSettled(settled=settled, done=done, notes=(note,))
    table_path = options.table or ""
    target = DeltaTarget(uri=qualify(table_path))
    table = target.open()
    if table is None:
        raise MigrationError(f"{table_path} is not a Delta table (--table). {NOTHING}")
    txn = table.transaction_version(app_id)
    settled = _settle(planned, committed, txn, app_id=app_id, table=table_path)
    done = planned if settled != "replay" else planned - 1
    table_version: int | None = None
    if done >= 0:
        commit = target.find_txn_commit(table, app_id=app_id, txn_version=done)
        table_version = commit.version if commit is not None else None
    theirs = target.generation(table, app_id=app_id) or 0
    mine = read_epoch(checkpoint_location=location).generation
    return _SinkSettled(
        settled=settled, done=done, table_version=table_version, generation=max(theirs, mine) + 1
    )


def _keyed_state(
    location: str, committed: int | None, check_state: Callable[[str, int], list[str]] | None
) -> tuple[tuple[int, ...], list[str]]:
    """Step 4: the checkpoint's stateful operators and what ``check_state`` says of them
    (refused without a job to compare them with, or without a committed batch)."""
    from spark_chkpt.state.operators import operator_ids

    try:
        operators = tuple(operator_ids(checkpoint_location=location))
    except FileNotFoundError:
        operators = ()
    if not operators:
        return operators, []
    if check_state is None:
        raise MigrationError(
            f"{location} holds keyed state (operators {', '.join(map(str, operators))}): "
            "give the job the query moves to with --job, so that savepoint check "
            f"compares its operators with the state before it is taken over. {NOTHING}"
        )
    if committed is None:
        raise MigrationError(f"{location}: keyed state but no committed batch. {NOTHING}")
    return operators, check_state(location, committed)


def _spark_side_notes(options: MigrateOptions, *, app_id: str, query_id: str) -> tuple[str, ...]:
    """What the job must change on Spark's side: options it no longer honours, the txn
    app id delta-spark's own sink does not keep."""
    notes = []
    if options.dropped:
        notes.append(
            f"options with no use on Spark's side, drop them from the job: "
            f"{', '.join(options.dropped)}"
        )
    if options.sink == "delta" and options.to == "spark" and app_id != query_id:
        notes.append(
            f"txnAppId {app_id}: delta-spark's streaming sink records txn(<query id>) "
            f"({query_id}); a foreachBatch writer keeps txnAppId={app_id}"
        )
    return tuple(notes)


def _refuse_running(
    root: Location, location: str, before: list[tuple[tuple[str, int], int]], *, watch_s: float
) -> None:
    """Step 5: Spark's logs changed while the plan was read: the query is running."""
    after = _log_listing(root)
    if after != before:
        changed = sorted(set(after) ^ set(before))
        name = "/".join(map(str, changed[-1][0])) if changed else "the logs"
        raise MigrationError(
            f"{location}: the query is running: {name} changed in the last "
            f"{watch_s:g} s. Stop it first (query.stop(), or spark-chkpt savepoint "
            f"stop for a chkpt query). {NOTHING}"
        )


def _log_listing(root: Location) -> list[tuple[tuple[str, int], int]]:
    """``((log, batch), mtime_ns)`` of every entry of Spark's offset and commit logs."""
    found = []
    for name in ("offsets", "commits"):
        try:
            infos = root.child(name).list()
        except FileNotFoundError:
            continue
        for info in infos:
            if info.base_name.isdigit():
                found.append(((name, int(info.base_name)), int(info.mtime_ns or 0)))
    return sorted(found)


def _kafka_sources(spark: SparkCheckpoint, batch: int, options: MigrateOptions) -> tuple[Any, ...]:
    try:
        plan = spark.plan(batch)
    except ChkptError as e:
        raise MigrationError(f"{e}; {NOTHING}") from e
    for index, source in enumerate(plan.sources):
        line = json.dumps(source)
        try:
            if not isinstance(source, dict) or not from_json(source):
                raise ChkptError("no topic")
        except ChkptError as e:
            raise MigrationError(
                f"offsets/{batch}: source {index} is not a Kafka source (its offset is "
                f"{line[:120]}; {e}): only Kafka sources move between Spark's kafka "
                f"format and chkpt-kafka. {NOTHING}"
            ) from e
        if options.to == "spark" and META_KEY in source:
            mode = source[META_KEY].get("mode", "?") if isinstance(source[META_KEY], dict) else "?"
            raise MigrationError(
                f"offsets/{batch}: source {index} reads at barriers (alignment {mode}, the "
                f"{META_KEY} report in its offsets): Spark's kafka source would read the "
                f"barrier records as data and keep records of failed attempts. {NOTHING}"
            )
    return plan.sources


def _settle(
    planned: int, committed: int | None, txn: int | None, *, app_id: str, table: str
) -> Settled:
    """Step 3: the batch the logs leave open, settled by the table's txn(appId)."""
    shown = "none" if txn is None else str(txn)
    if committed == planned:
        if txn == planned:
            return "committed"
        if txn is not None and txn > planned:
            raise MigrationError(
                f"the table {table} has txn({app_id}) = {txn}, ahead of the checkpoint's "
                f"last batch {planned}: another checkpoint of this app id wrote it. {NOTHING}"
            )
        raise MigrationError(
            f"batch {planned} is committed in Spark's log but the table {table} has "
            f"txn({app_id}) = {shown}: the last batch is not committed in the table (another "
            "table, another app id: give txnAppId with --option, or a table rolled back). "
            f"{NOTHING}"
        )
    if txn == planned:
        return "done-in-table"
    if (txn is None and planned == 0) or txn == planned - 1:
        return "replay"
    raise MigrationError(
        f"batch {planned} is planned and not committed in Spark's log, and the table "
        f"{table} has txn({app_id}) = {shown}, neither {planned} (done) nor "
        f"{planned - 1} (to replay): the table and the checkpoint do not belong together. "
        f"{NOTHING}"
    )


def _writes(
    options: MigrateOptions,
    root: Location,
    settled: Settled,
    planned: int,
    app_id: str,
    sources: tuple[Any, ...],
    done: int,
    generation: int | None,
) -> list[Write]:
    writes = []
    if settled == "done-in-table":
        writes.append(
            Write(
                "commit-log", str(root.child("commits", str(planned))), commit_text(root, planned)
            )
        )
    if options.sink != "delta" or generation is None:
        return writes
    if options.to == "chkpt":
        if done >= 0:
            writes.append(
                Write(
                    "snapshot-record",
                    str(root.child("chkpt", "snapshots", f"{done}.json")),
                    f"batch {done} of {app_id}: {describe_sources(sources)}",
                )
            )
        writes.append(
            Write(
                "generation",
                str(root.child("chkpt", "epoch.json")),
                f"generation {generation}, started by migrate",
            )
        )
    writes.append(
        Write(
            "table-generation",
            str(options.table),
            f"txn({app_id}#generation, {generation})"
            + (
                ": a chkpt-delta writer still on this checkpoint is fenced"
                if options.to == "spark"
                else ""
            ),
        )
    )
    return writes


def commit_text(root: Location, batch: int) -> str:
    """Spark's ``commits/N`` for a batch done in the table: the previous entry's text
    (its watermark: a query without event-time watermark has 0), or Spark's first."""
    previous = root.child("commits", str(batch - 1))
    if batch > 0 and previous.exists():
        text = previous.read_text()
        doc = json.loads(text.splitlines()[1]) if len(text.splitlines()) > 1 else {}
        if set(doc) - {"nextBatchWatermarkMs"}:
            raise MigrationError(
                f"batch {batch} is done in the table but commits/{batch - 1} holds more than "
                f"a watermark ({', '.join(sorted(set(doc) - {'nextBatchWatermarkMs'}))}: "
                "state checkpoint format 2's ids), which only Spark can write for batch "
                f"{batch}; start the query once on its own side so that Spark commits it "
                f"(the sink skips it), then migrate. {NOTHING}"
            )
        if doc.get("nextBatchWatermarkMs", 0) not in (0, None):
            raise MigrationError(
                f"batch {batch} is done in the table but the query keeps an event-time "
                f"watermark (commits/{batch - 1}: {text.splitlines()[1]}): its commit-log "
                "entry cannot be written for it; start the query once on its own side so "
                f"that Spark commits batch {batch} (the sink skips it), then migrate. {NOTHING}"
            )
        return text
    return 'v1\n{"nextBatchWatermarkMs":0}'
