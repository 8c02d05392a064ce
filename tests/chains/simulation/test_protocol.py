"""A simulation of the snapshot protocol: hypothesis' stateful testing drives the real
``chkpt-delta`` phase 1 and phase 2 (:class:`DeltaWriter`, :class:`DeltaCoordinator`),
the snapshot store, savepoints (create, rewind, fork, a restore run twice) and
``recover`` on real delta-rs tables and real checkpoint folders in a temporary folder.

No Spark: :class:`SparkDriver` writes and reads Spark's checkpoint files (``metadata``,
``offsets/N``, ``commits/N``) the way Spark's micro-batch engine does: a restart re-runs
the planned batch after the newest ``commits/N`` with its own ``offsets/N``. The source is
a fake Kafka topic (a list of record ids per partition). A crash at a fail point raises
:class:`Crash` in the process (the registry's callable action) instead of SIGKILL.

After every step the invariant is checked against a plain-Python model: each table (and
its dead-letter table) holds exactly the records of the source offsets its current
generation committed, once each; those offsets tile the partitions without gap or
overlap from where the generation started; and the checkpoint resumes where that
generation's table ends.

Operations behind a known hole (issue 24) are switched off by :data:`UNFIXED`; the lead
removes a name when its fix merges.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from spark_chkpt import failpoints
from spark_chkpt.delta.sink import committer as delta_committer
from spark_chkpt.delta.sink.assembler import DeltaSink
from spark_chkpt.delta.sink.options import DEAD_LETTER_COLUMN, DeltaSinkConfig
from spark_chkpt.delta.upsert.front import DeltaUpsert
from spark_chkpt.errors import ChkptError, InjectedFailureError
from spark_chkpt.failpoints import FaultPoint
from spark_chkpt.recovery.rebuild import recover_checkpoint
from spark_chkpt.savepoint.manifest import create_savepoint
from spark_chkpt.savepoint.restore import restore_savepoint

# The holes of issue 24 the simulation found (each has a schedule in HOLES below). The
# operations that show a hole are off until its name is in FIXED.
# SPARK_CHKPT_SIM_ENABLE=<name>,<name> turns some on for one run (to see a fix work, or a
# hole's minimal schedule).
KNOWN_HOLES: frozenset[str] = frozenset(
    {
        "restore-twice",  # hole 1: a restore run again after the query moved on
        "wrong-timeline",  # hole 2: rewind to a savepoint of an earlier generation
        "dead-letters-before-refusal",  # hole 4: a refused start commits its dead letters
        "stale-writer",  # fencing: the old checkpoint runs on after a rewind
        "rewind-dead-letters",  # found here: a rewind leaves the dead-letter table as is
        "upsert-null-keys",  # hole 5: DeltaUpsert inserts a null key's row every batch
        "upsert-identity",  # hole 6: DeltaUpsert on a fresh checkpoint goes ahead
    }
)
# The holes whose fixes have merged: their operations run in every schedule, and their
# schedules below must pass (no longer xfail).
FIXED: frozenset[str] = frozenset(
    {
        "upsert-null-keys",  # KeyedMerge matches keys with IS NOT DISTINCT FROM
        "restore-twice",  # fencing: a restore run again starts a newer generation
        "wrong-timeline",  # a rewind checks the commit's offsets against the manifest's
        "dead-letters-before-refusal",  # the identity check runs before dead letters commit
        "stale-writer",  # fencing: an older generation's commit is refused
        "upsert-identity",  # DeltaUpsert applies chkpt-delta's identity rules
        "rewind-dead-letters",  # a rewind rolls the dead-letter table back to N too
    }
)
UNFIXED = (KNOWN_HOLES - FIXED) - set(os.environ.get("SPARK_CHKPT_SIM_ENABLE", "").split(","))

# Minutes of hypothesis examples: started with the kill chains, not left to the run's end.
pytestmark = pytest.mark.long

TOPIC = "events"
OTHER_IDS = 1_000_000_000  # ids of another writer's rows
INPUT = pa.schema(
    [
        ("id", pa.int64()),
        ("app", pa.string()),
        (DEAD_LETTER_COLUMN, pa.struct([("id", pa.int64()), ("raw", pa.string())])),
    ]
)
# Where the coordinator can crash (the driver dies there), and where it fails a commit.
CRASH_POINTS = [
    FaultPoint.IN_WRITE,
    FaultPoint.AFTER_STAGING,
    FaultPoint.AFTER_DEAD_LETTERS,
    FaultPoint.AFTER_OWN_COMMIT,  # an own-commit table's only (others: no crash)
    FaultPoint.AFTER_DELTA_COMMIT,
    FaultPoint.AFTER_SNAPSHOT,
    FaultPoint.IN_ABORT,
]
VISIBLE_AFTER = {
    FaultPoint.AFTER_OWN_COMMIT,
    FaultPoint.AFTER_DELTA_COMMIT,
    FaultPoint.AFTER_SNAPSHOT,
}
# The dead letters are committed (to their own table, before the batch's commit) there.
LETTERS_AFTER = VISIBLE_AFTER | {FaultPoint.AFTER_DEAD_LETTERS}


class Crash(BaseException):
    """The driver process dies at a fail point (raised through ``except Exception``)."""


def crash(point: FaultPoint, batch_id: int) -> None:
    raise Crash(point, batch_id)


# -- the fake Kafka topic ----------------------------------------------------------------


@dataclass
class FakeKafka:
    """One topic: partition -> record ids by offset; ``poison``: malformed records."""

    logs: dict[int, list[int]] = field(default_factory=lambda: {0: [], 1: []})
    poison: set[int] = field(default_factory=set)
    next_id: int = 0

    def produce(self, count: int, bad: int) -> None:
        for i in range(count):
            part = i % len(self.logs)
            self.logs[part].append(self.next_id)
            if i < bad:
                self.poison.add(self.next_id)
            self.next_id += 1

    def add_partition(self) -> None:
        self.logs[len(self.logs)] = []

    def ends(self) -> dict[int, int]:
        return {p: len(records) for p, records in self.logs.items()}

    def records(self, ranges: dict[int, tuple[int, int]]) -> list[int]:
        return [r for p, (a, b) in ranges.items() for r in self.logs[p][a:b]]


# -- Spark's checkpoint folder --------------------------------------------------------------


def kafka_offsets(ends: dict[int, int]) -> dict[str, Any]:
    return {TOPIC: {str(p): n for p, n in sorted(ends.items())}}


def ends_of(source: dict[str, Any] | None) -> dict[int, int]:
    return {int(p): int(n) for p, n in (source or {}).get(TOPIC, {}).items()}


class SparkDriver:
    """What Spark's micro-batch engine reads and writes in a checkpoint folder."""

    def __init__(self, location: Path) -> None:
        self.location = location

    def exists(self) -> bool:
        return (self.location / "metadata").is_file()

    def query_id(self) -> str:
        return str(json.loads((self.location / "metadata").read_text())["id"])

    def start(self, query_id: str) -> None:
        (self.location / "offsets").mkdir(parents=True, exist_ok=True)
        (self.location / "metadata").write_text(json.dumps({"id": query_id}))

    def _ids(self, log: str) -> list[int]:
        folder = self.location / log
        return (
            sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
            if folder.is_dir()
            else []
        )

    def last_commit(self) -> int | None:
        commits = self._ids("commits")
        return commits[-1] if commits else None

    def offsets(self, batch_id: int) -> dict[int, int] | None:
        path = self.location / "offsets" / str(batch_id)
        if not path.is_file():
            return None
        lines = path.read_text().splitlines()
        return ends_of(json.loads(lines[2]) if len(lines) > 2 and lines[2] != "-" else None)

    def next_batch(self) -> tuple[int, dict[int, int], dict[int, int] | None]:
        """The batch a (re)started query runs: its id, its start, and its planned end when
        ``offsets/<id>`` exists (a replay)."""
        last = self.last_commit()
        batch = 0 if last is None else last + 1
        start = {} if last is None else (self.offsets(last) or {})
        return batch, start, self.offsets(batch)

    def plan(self, batch_id: int, ends: dict[int, int]) -> None:
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1714564800000 + batch_id, "conf": {}}
        text = "\n".join(["v1", json.dumps(meta), json.dumps(kafka_offsets(ends))]) + "\n"
        (self.location / "offsets").mkdir(parents=True, exist_ok=True)
        (self.location / "offsets" / str(batch_id)).write_text(text)

    def commit_log(self, batch_id: int) -> None:
        (self.location / "commits").mkdir(parents=True, exist_ok=True)
        (self.location / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


# -- DeltaUpsert's batch without Spark ----------------------------------------------------


class FakeBatchFrame:
    """What :class:`DeltaUpsert` uses of ``foreachBatch``'s DataFrame: its schema,
    ``mapInArrow`` (the real staging task runs on each "partition" here), the ``noop``
    write of a replay, and the session's local properties (none: no query id check)."""

    def __init__(self, parts: list[pa.RecordBatch]) -> None:
        from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

        self.parts = parts
        self.schema = StructType(
            [
                StructField("key", StringType()),
                StructField("value", LongType()),
                StructField("_delete", BooleanType()),
            ]
        )
        context = SimpleNamespace(getLocalProperty=lambda name: None)
        # a session without delta-spark: DeltaUpsert's MERGE is delta-rs's
        conf = SimpleNamespace(get=lambda key, default=None: default)
        self.sparkSession = SimpleNamespace(sparkContext=context, conf=conf)
        noop = SimpleNamespace(save=lambda: None)
        self.write = SimpleNamespace(format=lambda name: SimpleNamespace(mode=lambda m: noop))

    def mapInArrow(self, task: Any, ddl: str) -> Any:
        rows = [row for part in self.parts for out in task(iter([part])) for row in out.to_pylist()]
        return SimpleNamespace(collect=lambda: rows)


UPSERT_INPUT = pa.schema([("key", pa.string()), ("value", pa.int64()), ("_delete", pa.bool_())])


def upsert_row(record: int, *, null_keys: bool) -> tuple[str | None, int, bool]:
    """The upsert query's row of a source record: its key, value and delete flag."""
    key = None if null_keys and record % 7 == 3 else f"k{record % 5}"
    return key, record, record % 6 == 5


def reduce_batch(rows: list[tuple[str | None, int, bool]]) -> dict[str | None, tuple[int, bool]]:
    """One row per key (the last), as an aggregate's output has."""
    return {key: (value, delete) for key, value, delete in rows}


# -- the model -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchEvent:
    batch_id: int
    ranges: dict[int, tuple[int, int]]


@dataclass(frozen=True)
class OtherEvent:
    ids: tuple[int, ...]


@dataclass(eq=False)
class Query:
    """One query writing one table (and its dead-letter table); the model of its current
    generation: what its table must hold, in commit order."""

    name: str
    table: Path
    dead: Path
    checkpoint: Path
    base: dict[int, int]  # where this generation's offsets start (a fork: the savepoint's)
    base_batch: int  # the batch the generation resumes after (-1: a new query)
    events: list[BatchEvent | OtherEvent] = field(default_factory=list)
    # The batches whose dead letters are committed: the table's, and a crashed batch's
    # whose letters went first (its replay, with the same offsets, finds them).
    letters: list[BatchEvent] = field(default_factory=list)
    generation: int = 0
    old_checkpoints: list[Path] = field(default_factory=list)
    restores: list[tuple[SavepointModel, Path]] = field(default_factory=list)
    vacuums: int = 0  # VACUUMs so far: a savepoint taken before one cannot rewind

    def batches(self) -> list[BatchEvent]:
        return [e for e in self.events if isinstance(e, BatchEvent)]

    def end(self) -> tuple[int, dict[int, int]]:
        batches = self.batches()
        ends = dict(self.base)
        for b in batches:
            ends.update({p: e for p, (_, e) in b.ranges.items()})
        return (batches[-1].batch_id if batches else self.base_batch), ends


@dataclass(frozen=True, eq=False)
class SavepointModel:
    location: str
    query: Query
    batch_id: int
    generation: int
    events: tuple[BatchEvent | OtherEvent, ...]
    letters: tuple[BatchEvent, ...]
    vacuums: int


# -- the machine -------------------------------------------------------------------------------


class ProtocolMachine(RuleBasedStateMachine):
    savepoints = Bundle("savepoints")

    def __init__(self) -> None:
        super().__init__()
        self.unfixed = UNFIXED  # the schedules of known holes below switch one on
        self.root = Path(tempfile.mkdtemp(prefix="chkpt-sim-"))
        self.kafka = FakeKafka()
        self.queries: list[Query] = []
        self.counter = 0

    def teardown(self) -> None:
        for point in FaultPoint:
            failpoints.disable(point)
        shutil.rmtree(self.root, ignore_errors=True)
        progress = os.environ.get("SPARK_CHKPT_SIM_PROGRESS")
        if progress:  # a long run counts its schedules in this file (one line each)
            with open(progress, "a") as out:
                out.write(f"{len(self.queries)} {len(self.main.events)}\n")

    def _folder(self, kind: str) -> Path:
        self.counter += 1
        return self.root / f"{kind}-{self.counter}"

    @initialize(poison=st.booleans(), own_commit=st.booleans())
    def start_query(self, poison: bool, own_commit: bool = False) -> None:
        # Schedules with malformed records (the dead-letter table is rewound with the
        # table: a rewind to N leaves the dead letters of batches 0..N of its timeline).
        # ``own_commit``: the main table exists before the query, with row tracking and
        # in-commit timestamps on (delta-rs refuses to commit to it: every append is the
        # project's own commit, :mod:`spark_chkpt.delta.log.commit`).
        self.poison = poison
        self.own_commit = own_commit
        query = Query(
            name="q",
            table=self._folder("table"),
            dead=self._folder("dead"),
            checkpoint=self._folder("checkpoint"),
            base={},
            base_batch=-1,
        )
        SparkDriver(query.checkpoint).start(str(uuid.uuid4()))
        self.queries.append(query)
        if own_commit:
            create_own_commit_table(query.table)
        self.upsert = Query(
            name="upsert",
            table=self._folder("counts"),
            dead=self._folder("unused"),
            checkpoint=self._folder("checkpoint"),
            base={},
            base_batch=-1,
        )
        SparkDriver(self.upsert.checkpoint).start(str(uuid.uuid4()))
        self.null_keys = "upsert-null-keys" not in self.unfixed

    @property
    def main(self) -> Query:
        return self.queries[0]

    # -- running a batch --------------------------------------------------------------------

    def _sink(self, query: Query, checkpoint: Path, table: Path | None = None) -> DeltaSink:
        config = DeltaSinkConfig.from_options(
            {
                "path": str(table or query.table),
                "checkpointLocation": str(checkpoint),
                "partitionBy": "app",
                "deadLetterPath": str(query.dead),
                "queryName": query.name,
            }
        )
        return DeltaSink.of(config=config, schema=INPUT)  # the app id: the checkpoint's query id

    def _rows(self, ranges: dict[int, tuple[int, int]], part: int) -> pa.RecordBatch:
        a, b = ranges[part]
        ids = self.kafka.logs[part][a:b]
        letters = [{"id": i, "raw": f"bad-{i}"} if i in self.kafka.poison else None for i in ids]
        return pa.record_batch(
            [
                pa.array(ids, pa.int64()),
                pa.array([f"a{part}" for _ in ids], pa.string()),
                pa.array(letters, INPUT.field(DEAD_LETTER_COLUMN).type),
            ],
            schema=INPUT,
        )

    def _run(
        self,
        query: Query,
        *,
        checkpoint: Path,
        limit: int,
        crash_at: FaultPoint | None = None,
        fail_commit: bool = False,
        retry_task: bool = False,
        speculative: int | None = None,
    ) -> tuple[int, dict[int, tuple[int, int]], bool]:
        """One micro-batch as Spark runs it (a restart first, if the last one crashed):
        plan, stage each task, commit, ``commits/N``. Returns the batch, its ranges and
        whether it became visible; raises :class:`Crash` where the driver dies."""
        spark = SparkDriver(checkpoint)
        batch, start, planned = spark.next_batch()
        if planned is None:
            logs = self.kafka.ends()
            planned = {p: min(n, start.get(p, 0) + limit) for p, n in logs.items()}
            spark.plan(batch, planned)
        ranges = {p: (start.get(p, 0), e) for p, e in planned.items() if e > start.get(p, 0)}
        sink = self._sink(query, checkpoint)
        writer, committer = sink.writer(), sink.committer()
        delta_committer._CLEANED.discard(str(committer.config.path))  # a new process
        visible = False
        if crash_at is not None:
            failpoints.enable(crash_at, crash, batch_id=batch)
        try:
            messages = []
            for task, part in enumerate(sorted(ranges)):
                if retry_task and task == 0 and crash_at is not FaultPoint.IN_WRITE:
                    # the task's first attempt fails half-way; Spark runs it again
                    with (
                        failpoints.enabled(FaultPoint.IN_WRITE, "fail", batch_id=batch),
                        contextlib.suppress(InjectedFailureError),
                    ):
                        writer.write(iter([self._rows(ranges, part)]), batch_id=batch, task=task)
                staged, letters = writer.write(
                    iter([self._rows(ranges, part)]), batch_id=batch, task=task
                )
                if speculative == task:  # a speculative copy; either attempt may win
                    copy, copy_letters = writer.write(
                        iter([self._rows(ranges, part)]), batch_id=batch, task=task
                    )
                    if batch % 2:
                        staged, letters = copy, copy_letters
                staged.dead_letter_files = letters  # type: ignore[attr-defined]
                messages.append(staged)
            try:
                if fail_commit:
                    with failpoints.enabled(FaultPoint.IN_COMMIT, "fail", batch_id=batch):
                        committer.commit(
                            messages=messages,
                            batch_id=batch,
                            schema=writer.arrow_schema,
                            dead_letter_schema=writer.dead_letter_schema,
                        )
                else:
                    committer.commit(
                        messages=messages,
                        batch_id=batch,
                        schema=writer.arrow_schema,
                        dead_letter_schema=writer.dead_letter_schema,
                    )
            except InjectedFailureError:
                committer.abort(messages=messages, batch_id=batch)  # Spark aborts the batch
                return batch, ranges, False
            except Crash as e:
                raise Crash(crash_at) from e
            visible = True
            spark.commit_log(batch)
        finally:
            if crash_at is not None:
                failpoints.disable(crash_at)
        return batch, ranges, visible

    def _record(
        self, query: Query, batch: int, ranges: dict[int, tuple[int, int]], *, visible: bool
    ) -> None:
        """The model: batch ``batch`` of the current generation became visible (or only
        its dead letters did), once."""
        if not any(b.batch_id == batch for b in query.letters):
            query.letters.append(BatchEvent(batch, ranges))
        if visible and not any(b.batch_id == batch for b in query.batches()):
            query.events.append(BatchEvent(batch, ranges))

    def _batch(self, query: Query, **how: Any) -> None:
        try:
            batch, ranges, visible = self._run(query, checkpoint=query.checkpoint, **how)
        except Crash as e:
            point = e.args[0] if e.args else None
            if point in LETTERS_AFTER:
                batch, start, planned = SparkDriver(query.checkpoint).next_batch()
                assert planned is not None
                ranges = {
                    p: (start.get(p, 0), n) for p, n in planned.items() if n > start.get(p, 0)
                }
                self._record(query, batch, ranges, visible=point in VISIBLE_AFTER)
            return
        if visible:
            self._record(query, batch, ranges, visible=True)

    def _upsert(self, checkpoint: Path, *, limit: int, crash_at: FaultPoint | None) -> None:
        """One micro-batch of a ``foreachBatch(DeltaUpsert(...))`` query."""
        query = self.upsert
        spark = SparkDriver(checkpoint)
        batch, start, planned = spark.next_batch()
        if planned is None:
            planned = {p: min(n, start.get(p, 0) + limit) for p, n in self.kafka.ends().items()}
            spark.plan(batch, planned)
        ranges = {p: (start.get(p, 0), e) for p, e in planned.items() if e > start.get(p, 0)}
        # One row per key (the last), in the "task" of the partition it came from last.
        last: dict[str | None, tuple[int, int, bool]] = {}
        for p, (a, b) in sorted(ranges.items()):
            for r in self.kafka.logs[p][a:b]:
                key, value, delete = upsert_row(r, null_keys=self.null_keys)
                last.pop(key, None)
                last[key] = (p, value, delete)
        parts = [{k: (v, d) for k, (q, v, d) in last.items() if q == p} for p in sorted(ranges)]
        batches = [
            pa.record_batch(
                [
                    pa.array(list(part), pa.string()),
                    pa.array([v for v, _ in part.values()], pa.int64()),
                    pa.array([d for _, d in part.values()], pa.bool_()),
                ],
                schema=UPSERT_INPUT,
            )
            for part in parts
        ]
        upsert = DeltaUpsert(
            path=str(query.table), keys=["key"], checkpoint_location=str(checkpoint)
        )
        if crash_at is not None:
            failpoints.enable(crash_at, crash, batch_id=batch)
        try:
            upsert(FakeBatchFrame(batches), batch)  # type: ignore[arg-type]
        except Crash:
            if crash_at in VISIBLE_AFTER and checkpoint == query.checkpoint:
                self._record(query, batch, ranges, visible=True)
            return
        finally:
            if crash_at is not None:
                failpoints.disable(crash_at)
        spark.commit_log(batch)
        if checkpoint == query.checkpoint:
            self._record(query, batch, ranges, visible=True)

    # -- the rules ------------------------------------------------------------------------------

    @precondition(lambda self: len(self.kafka.logs) < 4)
    @rule()
    def add_partition(self) -> None:
        self.kafka.add_partition()

    @rule(
        new=st.integers(0, 6),
        bad=st.integers(0, 2),
        which=st.integers(0, 3),
        limit=st.integers(1, 4),
        crash_at=st.none() | st.sampled_from(CRASH_POINTS),
        fail_commit=st.booleans(),
        retry_task=st.booleans(),
        speculative=st.none() | st.integers(0, 1),
    )
    def run_batch(
        self,
        new: int,
        bad: int,
        which: int,
        limit: int,
        crash_at: FaultPoint | None,
        fail_commit: bool,
        retry_task: bool,
        speculative: int | None,
    ) -> None:
        """Plan, stage and commit a batch (a restart first if the last run crashed);
        maybe crash at a fail point, fail the commit, retry a task or run a speculative
        copy of one. First ``new`` records reach the topic, ``bad`` of them malformed."""
        self.kafka.produce(new, min(bad, new) if self.poison else 0)
        query = self.queries[which % len(self.queries)]
        if crash_at is FaultPoint.IN_ABORT and not fail_commit:
            crash_at = None  # the abort runs only after a failed commit
        self._batch(
            query,
            limit=limit,
            crash_at=crash_at,
            fail_commit=fail_commit,
            retry_task=retry_task,
            speculative=speculative,
        )

    @rule(
        new=st.integers(0, 6),
        limit=st.integers(1, 4),
        crash_at=st.none()
        | st.sampled_from(
            [
                FaultPoint.IN_WRITE,
                FaultPoint.AFTER_STAGING,
                FaultPoint.AFTER_DELTA_COMMIT,
                FaultPoint.AFTER_SNAPSHOT,
            ]
        ),
    )
    def upsert_batch(self, new: int, limit: int, crash_at: FaultPoint | None) -> None:
        """A batch of the keyed upsert query (deletes, and null keys once hole 5 is
        fixed), maybe crashing at a fail point; first ``new`` records reach the topic."""
        self.kafka.produce(new, 0)
        self._upsert(self.upsert.checkpoint, limit=limit, crash_at=crash_at)

    @precondition(lambda self: "upsert-identity" not in self.unfixed)
    @rule(limit=st.integers(1, 4))
    def upsert_fresh_start(self, limit: int) -> None:
        """The upsert query's checkpoint is lost and it starts on a new one: refused."""
        if not self.upsert.batches():
            return
        fresh = self._folder("fresh")
        SparkDriver(fresh).start(str(uuid.uuid4()))
        with contextlib.suppress(ChkptError):  # refused: what the rule wants
            self._upsert(fresh, limit=limit, crash_at=None)

    @rule(rows=st.integers(1, 3))
    def other_writer(self, rows: int) -> None:
        """Another program appends rows (no txn) to the main table."""
        query = self.main
        if DeltaTable.is_deltatable(str(query.table)) is False:
            return
        ids = tuple(OTHER_IDS + self.counter * 10 + i for i in range(rows))
        self.counter += 1
        data = pa.table({"id": pa.array(ids, pa.int64()), "app": ["other"] * rows})
        if self.own_commit:  # delta-rs refuses to commit to it: delta-spark's append
            append_as_delta_spark(query.table, data)
        else:
            write_deltalake(str(query.table), data, mode="append", partition_by=["app"])
        query.events.append(OtherEvent(ids))

    @rule(vacuum=st.booleans())
    def optimize(self, vacuum: bool) -> None:
        """OPTIMIZE (compaction), then maybe VACUUM with zero retention."""
        query = self.main
        if not DeltaTable.is_deltatable(str(query.table)) or self.own_commit:
            return  # delta-rs refuses to OPTIMIZE a row-tracked table (so do we: issue 47)
        table = DeltaTable(str(query.table))
        table.optimize.compact()
        if vacuum:
            DeltaTable(str(query.table)).vacuum(
                retention_hours=0, enforce_retention_duration=False, dry_run=False
            )
            query.vacuums += 1  # older versions' files are gone: no rewind to before this

    @rule(target=savepoints, crash_in=st.booleans())
    def savepoint(self, crash_in: bool) -> SavepointModel | Any:
        """Savepoint the main query's newest completed snapshot (or crash half-way)."""
        from hypothesis.stateful import multiple

        query = self.main
        spark = SparkDriver(query.checkpoint)
        last = spark.last_commit() if spark.exists() else None
        if last is None or last <= query.base_batch:
            return multiple()
        if crash_in:
            failpoints.enable(FaultPoint.IN_SAVEPOINT, crash, batch_id=last)
        try:
            point = create_savepoint(
                checkpoint_location=str(query.checkpoint),
                savepoint_dir=str(self.root / "savepoints"),
                table=str(query.table),
            )
        except Crash:
            return multiple()
        finally:
            failpoints.disable(FaultPoint.IN_SAVEPOINT)
        upto = next(
            i
            for i, e in enumerate(query.events)
            if isinstance(e, BatchEvent) and e.batch_id == last
        )
        return SavepointModel(
            location=point.location,
            query=query,
            batch_id=last,
            generation=query.generation,
            events=tuple(query.events[: upto + 1]),
            letters=tuple(b for b in query.letters if b.batch_id <= last),
            vacuums=query.vacuums,
        )

    def _restorable(self, point: SavepointModel, *, same_generation: bool = True) -> bool:
        query = point.query
        if point.vacuums != query.vacuums:
            return False
        if "rewind-dead-letters" in self.unfixed and self.poison:
            return False
        wrong = same_generation and point.generation != query.generation
        return not (wrong and "wrong-timeline" in self.unfixed)

    @rule(point=savepoints)
    def rewind(self, point: SavepointModel) -> None:
        """Restore a savepoint as a rewind into a new folder; the query runs on there."""
        if not self._restorable(point):
            return
        query = point.query
        folder = self._folder("rewound")
        try:
            restore_savepoint(
                savepoint=point.location,
                checkpoint_location=str(folder),
                mode="rewind",
                table=str(query.table),
            )
        except ChkptError:
            shutil.rmtree(folder, ignore_errors=True)
            return  # refused before anything changed
        self._rewound(point, folder)
        query.restores.append((point, folder))

    def _rewound(self, point: SavepointModel, folder: Path) -> None:
        query = point.query
        # The folder restored into is the query's own again (a restore run again into
        # it): not an old one, whose runs a stale writer's would be.
        query.old_checkpoints = [c for c in query.old_checkpoints if c != folder]
        if query.checkpoint != folder:
            query.old_checkpoints.append(query.checkpoint)
        query.checkpoint = folder
        later = query.batches()[-1].batch_id > point.batch_id if query.batches() else False
        if later or point.generation != query.generation:
            # The table goes back to snapshot N's commit: what came after it, other
            # writers' rows too (with a warning today), is undone.
            query.events = list(point.events)
        # else: nothing of this query after N, so the table stays as it is (other
        # writers' rows after N stay)
        # The dead-letter table goes back to its version at snapshot N in any case: the
        # dead letters of batches 0..N of the savepoint's timeline (a crashed batch N + 1
        # whose letters went first loses them; its re-run commits them again).
        query.letters = list(point.letters)
        query.generation += 1

    @precondition(lambda self: "restore-twice" not in self.unfixed)
    @rule(index=st.integers(0, 3))
    def restore_again(self, index: int) -> None:
        """Run an earlier rewind's restore command again, as it was."""
        query = self.main
        if not query.restores:
            return
        point, folder = query.restores[index % len(query.restores)]
        if not self._restorable(point, same_generation=False):
            return
        try:
            restore_savepoint(
                savepoint=point.location,
                checkpoint_location=str(folder),
                mode="rewind",
                table=str(query.table),
            )
        except ChkptError:
            return
        self._rewound(point, folder)

    @precondition(lambda self: len(self.queries) < 3)
    @rule(point=savepoints)
    def fork(self, point: SavepointModel) -> None:
        """Restore a savepoint as a fork: a new query writing a new table."""
        folder = self._folder("fork")
        restore_savepoint(savepoint=point.location, checkpoint_location=str(folder), mode="fork")
        batch_end = dict(point.query.base)
        for e in point.events:
            if isinstance(e, BatchEvent):
                batch_end.update({p: b for p, (_, b) in e.ranges.items()})
        self.queries.append(
            Query(
                name=f"fork{len(self.queries)}",
                table=self._folder("table"),
                dead=self._folder("dead"),
                checkpoint=folder,
                base=batch_end,
                base_batch=point.batch_id,
            )
        )

    @rule()
    def recover(self) -> None:
        """The main query's checkpoint is deleted; ``recover`` rebuilds it from the table."""
        query = self.main
        if not query.batches():
            return
        app_id = SparkDriver(query.checkpoint).query_id()
        shutil.rmtree(query.checkpoint)
        recover_checkpoint(
            table_uri=str(query.table), checkpoint_location=str(query.checkpoint), app_id=app_id
        )

    @precondition(lambda self: "dead-letters-before-refusal" not in self.unfixed)
    @rule(limit=st.integers(1, 4))
    def fresh_start_refused(self, limit: int) -> None:
        """The checkpoint is lost and the query started on a new one: its first batch
        must be refused with nothing committed; then ``recover``."""
        query = self.main
        if not query.batches():
            return
        app_id = SparkDriver(query.checkpoint).query_id()
        fresh = self._folder("fresh")
        SparkDriver(fresh).start(str(uuid.uuid4()))
        with contextlib.suppress(ChkptError):  # refused: what the rule wants
            self._run(query, checkpoint=fresh, limit=limit)
        shutil.rmtree(query.checkpoint)
        recover_checkpoint(
            table_uri=str(query.table), checkpoint_location=str(query.checkpoint), app_id=app_id
        )

    @precondition(lambda self: "stale-writer" not in self.unfixed)
    @rule(limit=st.integers(1, 4))
    def stale_writer(self, limit: int) -> None:
        """The checkpoint from before a rewind runs on (a restart on the old folder, or
        the old query still running): its commit must be refused."""
        query = self.main
        if not query.old_checkpoints:
            return
        with contextlib.suppress(ChkptError):  # refused: what the rule wants
            self._run(query, checkpoint=query.old_checkpoints[-1], limit=limit)

    # -- the invariant -------------------------------------------------------------------------

    @invariant()
    def tables_hold_the_committed_offsets_once(self) -> None:
        for query in self.queries:
            self._check(query)
        self._check_upsert()

    def _check_upsert(self) -> None:
        query = self.upsert
        expected: dict[str | None, int] = {}
        for event in query.batches():
            rows = [
                upsert_row(r, null_keys=self.null_keys) for r in self.kafka.records(event.ranges)
            ]
            for key, (value, delete) in reduce_batch(rows).items():
                if delete:
                    expected.pop(key, None)
                else:
                    expected[key] = value
        rows = table_rows(query.table, ("key", "value"))
        held = sorted(((r["key"], r["value"]) for r in rows), key=repr)
        assert held == sorted(expected.items(), key=repr), "upsert: the table's rows"
        self._check_checkpoint(query)

    def _check(self, query: Query) -> None:
        good: Counter[int] = Counter()
        bad: Counter[int] = Counter()
        ends = dict(query.base)
        for event in query.events:
            if isinstance(event, OtherEvent):
                good.update(event.ids)
                continue
            for p, (a, b) in event.ranges.items():
                assert a == ends.get(p, 0), (
                    f"{query.name}: batch {event.batch_id} starts partition {p} at {a}, "
                    f"the previous batch ended at {ends.get(p, 0)} (lost or repeated records)"
                )
                ends[p] = b
            good.update(r for r in self.kafka.records(event.ranges) if r not in self.kafka.poison)
        for event in query.letters:
            bad.update(r for r in self.kafka.records(event.ranges) if r in self.kafka.poison)
        assert Counter(ids_of(query.table)) == good, f"{query.name}: the table's rows"
        assert Counter(ids_of(query.dead)) == bad, f"{query.name}: the dead letters"
        if self.own_commit and query is self.main:
            check_row_tracking(query.table)
        self._check_checkpoint(query)

    def _check_checkpoint(self, query: Query) -> None:
        """The checkpoint resumes where the table's generation ends (or re-runs the
        batch the table holds last, with the same offsets)."""
        spark = SparkDriver(query.checkpoint)
        if not spark.exists():
            return
        last = spark.last_commit()
        resumes = (-1, {}) if last is None else (last, nonzero(spark.offsets(last) or {}))
        batch, ends_at = query.end()
        end = (batch, nonzero(ends_at))
        pending = spark.offsets(resumes[0] + 1)
        replay = (resumes[0] + 1, nonzero(pending)) if pending is not None else None
        assert end in (resumes, replay), (
            f"{query.name}: the checkpoint resumes after {resumes} (pending {replay}), "
            f"the table ends at {end}"
        )


# -- tables with row tracking and in-commit timestamps (the project's own commit) ----------

OWN_COMMIT_FEATURES = [
    "appendOnly",
    "invariants",
    "domainMetadata",
    "rowTracking",
    "inCommitTimestamp",
]
OWN_COMMIT_CONF = {
    "delta.enableRowTracking": "true",
    "delta.enableInCommitTimestamps": "true",
    "delta.rowTracking.materializedRowIdColumnName": "_row-id-col-sim",
    "delta.rowTracking.materializedRowCommitVersionColumnName": "_row-commit-version-col-sim",
}
SIM_SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "app", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def _line(*actions: dict[str, Any]) -> str:
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)


def create_own_commit_table(table: Path) -> None:
    """Version 0 of an empty table partitioned by ``app`` whose protocol has row
    tracking and in-commit timestamps (as delta-spark's CREATE TABLE writes it), read
    back by delta-rs."""
    log = table / "_delta_log"
    log.mkdir(parents=True)
    now = 1_714_564_800_000
    info = {"timestamp": now, "inCommitTimestamp": now, "operation": "CREATE TABLE"}
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": OWN_COMMIT_FEATURES}
    meta = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SIM_SCHEMA),
        "partitionColumns": ["app"],
        "configuration": OWN_COMMIT_CONF,
        "createdTime": now,
    }
    mark = {"domain": "delta.rowTracking", "configuration": '{"rowIdHighWaterMark":-1}'}
    text = _line(
        {"commitInfo": info},
        {"protocol": protocol},
        {"metaData": meta},
        {"domainMetadata": mark | {"removed": False}},
    )
    (log / f"{0:020d}.json").write_text(text)
    found = DeltaTable(str(table))
    assert found.version() == 0 and found.metadata().partition_columns == ["app"]
    assert {"rowTracking", "inCommitTimestamp"} <= set(found.protocol().writer_features or [])


def log_commits(table: Path) -> list[list[dict[str, Any]]]:
    """Every JSON commit of the table, by version (none is missing)."""
    log = table / "_delta_log"
    versions = sorted(int(p.stem) for p in log.glob("*.json") if p.stem.isdigit())
    assert versions == list(range(len(versions))), f"{table}: commits missing: {versions}"
    return [
        [json.loads(line) for line in (log / f"{v:020d}.json").read_text().splitlines() if line]
        for v in versions
    ]


def row_tracking_state(table: Path) -> tuple[int, int]:
    """The table's row-id high-water mark and its newest in-commit timestamp, read from
    its log as delta-spark reads them."""
    mark, ict = -1, 0
    for actions in log_commits(table):
        for action in actions:
            dm = action.get("domainMetadata")
            if dm and dm["domain"] == "delta.rowTracking" and not dm.get("removed"):
                mark = int(json.loads(dm["configuration"])["rowIdHighWaterMark"])
            info = action.get("commitInfo")
            if info:
                ict = int(info["inCommitTimestamp"])
    return mark, ict


def append_as_delta_spark(table: Path, data: pa.Table) -> None:
    """Another program's append to a row-tracked table, as delta-spark commits it:
    row ids above the high-water mark (moved on), an in-commit timestamp above the last
    commit's, no txn. (delta-rs refuses to commit to such a table.)"""
    import pyarrow.parquet as pq

    version = len(log_commits(table))
    mark, ict = row_tracking_state(table)
    name = f"app=other/part-{uuid.uuid4()}.parquet"
    (table / "app=other").mkdir(exist_ok=True)
    pq.write_table(data.select(["id"]), table / name)
    rows = data.num_rows
    stamp = ict + 1
    text = _line(
        {"commitInfo": {"timestamp": stamp, "inCommitTimestamp": stamp, "operation": "WRITE"}},
        {
            "domainMetadata": {
                "domain": "delta.rowTracking",
                "configuration": json.dumps({"rowIdHighWaterMark": mark + rows}),
                "removed": False,
            }
        },
        {
            "add": {
                "path": name,
                "partitionValues": {"app": "other"},
                "size": (table / name).stat().st_size,
                "modificationTime": stamp,
                "dataChange": True,
                "stats": json.dumps({"numRecords": rows}),
                "baseRowId": mark + 1,
                "defaultRowCommitVersion": version,
            }
        },
    )
    with open(table / "_delta_log" / f"{version:020d}.json", "x") as out:  # put-if-absent
        out.write(text)


def check_row_tracking(table: Path) -> None:
    """The table's row ids are unique (each live file's ``baseRowId`` range apart from
    every other's and under the high-water mark, which never goes down) and its in-commit
    timestamps strictly increase, commit by commit."""
    live: dict[str, tuple[int, int]] = {}
    mark, last_ict = -1, None
    for version, actions in enumerate(log_commits(table)):
        info = [a["commitInfo"] for a in actions if "commitInfo" in a]
        assert len(info) == 1 and "commitInfo" in actions[0], f"{table} v{version}: commitInfo"
        ict = info[0].get("inCommitTimestamp")
        assert ict is not None, f"{table} v{version}: no in-commit timestamp"
        assert last_ict is None or ict > last_ict, f"{table} v{version}: ICT {ict} <= {last_ict}"
        last_ict = ict
        for action in actions:
            dm = action.get("domainMetadata")
            if dm and dm["domain"] == "delta.rowTracking":
                new = int(json.loads(dm["configuration"])["rowIdHighWaterMark"])
                assert new >= mark, f"{table} v{version}: the high-water mark went down"
                mark = new
            if "remove" in action:
                live.pop(action["remove"]["path"], None)
            if "add" in action:
                add = action["add"]
                assert "baseRowId" in add, f"{table} v{version}: {add['path']} has no row ids"
                rows = int(json.loads(add["stats"])["numRecords"])
                live[add["path"]] = (int(add["baseRowId"]), rows)
    spans = sorted(live.values())
    for (a, n), (b, _) in itertools.pairwise(spans):
        assert a + n <= b, f"{table}: row ids {a}..{a + n - 1} and {b}.. overlap"
    assert not spans or spans[-1][0] + spans[-1][1] - 1 <= mark, f"{table}: above the mark"


def nonzero(ends: dict[int, int]) -> dict[int, int]:
    return {p: n for p, n in ends.items() if n}


def ids_of(path: Path) -> list[int]:
    return [int(row["id"]) for row in table_rows(path, ("id",))]


# The invariant reads every table after every step, though most steps change one table or
# none: a read is kept while no file under the table's folder changed (name, size, mtime),
# so a table whose log or data files changed in any way, or lost one, is read again.
_READS: dict[tuple[str, tuple[str, ...]], tuple[frozenset[tuple[str, int, int]], list[Any]]] = {}


def _files(path: Path) -> frozenset[tuple[str, int, int]]:
    found = []
    for root, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                st_ = os.stat(os.path.join(root, name))
                found.append((os.path.join(root, name), st_.st_size, st_.st_mtime_ns))
    return frozenset(found)


def table_rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of the Delta table at ``path`` (none where there is no table yet), read
    by delta-rs, or kept from the last read while the folder's files are the same."""
    key, files = (str(path), columns), _files(path)
    kept = _READS.get(key)
    if kept is not None and kept[0] == files:
        return kept[1]
    rows: list[Any] = []
    if DeltaTable.is_deltatable(str(path)):
        rows = DeltaTable(str(path)).to_pyarrow_table(columns=list(columns)).to_pylist()
    if len(_READS) > 256:
        _READS.clear()
    _READS[key] = (files, rows)
    return rows


TestProtocol = ProtocolMachine.TestCase


# -- the known holes' schedules ------------------------------------------------------------
# Each hole's schedule (what the machine finds once the hole's operation is switched on),
# run as it is: strict xfail while the hole is in UNFIXED, so the test turns red the day
# the fix merges and the name is still listed (add it to FIXED then).

BATCH = {"fail_commit": False, "retry_task": False, "speculative": None, "crash_at": None}


def hole_restore_twice(m: ProtocolMachine) -> None:
    m.start_query(poison=False)
    m.run_batch(new=4, bad=0, which=0, limit=1, **BATCH)
    point = m.savepoint(crash_in=False)
    m.rewind(point)
    m.run_batch(new=0, bad=0, which=0, limit=1, **BATCH)
    m.tables_hold_the_committed_offsets_once()
    m.restore_again(index=0)


def hole_wrong_timeline(m: ProtocolMachine) -> None:
    m.start_query(poison=False)
    m.run_batch(new=8, bad=0, which=0, limit=1, **BATCH)
    b = m.savepoint(crash_in=False)
    m.run_batch(new=0, bad=0, which=0, limit=1, **BATCH)
    a = m.savepoint(crash_in=False)
    m.rewind(b)
    m.run_batch(new=0, bad=0, which=0, limit=3, **BATCH)  # batch 1' ends elsewhere
    m.tables_hold_the_committed_offsets_once()
    m.rewind(a)


def hole_dead_letters_before_refusal(m: ProtocolMachine) -> None:
    m.start_query(poison=True)
    m.run_batch(new=2, bad=1, which=0, limit=1, **BATCH)
    m.tables_hold_the_committed_offsets_once()
    m.fresh_start_refused(limit=1)


def hole_stale_writer(m: ProtocolMachine) -> None:
    m.start_query(poison=False)
    m.run_batch(new=6, bad=0, which=0, limit=1, **BATCH)
    point = m.savepoint(crash_in=False)
    m.run_batch(new=0, bad=0, which=0, limit=1, **BATCH)
    m.rewind(point)
    m.tables_hold_the_committed_offsets_once()
    m.stale_writer(limit=1)


def hole_rewind_dead_letters(m: ProtocolMachine) -> None:
    m.start_query(poison=True)
    m.run_batch(new=2, bad=0, which=0, limit=1, **BATCH)
    point = m.savepoint(crash_in=False)
    m.run_batch(new=2, bad=2, which=0, limit=1, **BATCH)
    m.tables_hold_the_committed_offsets_once()
    m.rewind(point)


def test_a_restore_run_again_into_the_querys_own_folder_leaves_it_the_querys() -> None:
    """A schedule CI's draw found (2026-12-07): a rewind, the same restore run again into
    the same folder, then a stale writer. The model took the query's own folder for an
    old one, ran the query there as a "stale writer" and did not count its batch; the
    engine was right to commit it (the second restore's generation is that folder's)."""
    machine = ProtocolMachine()
    try:
        machine.start_query(poison=False, own_commit=False)
        machine.run_batch(new=0, bad=0, which=0, limit=1, **BATCH)
        point = machine.savepoint(crash_in=False)
        machine.rewind(point)
        machine.restore_again(index=0)
        machine.tables_hold_the_committed_offsets_once()
        assert machine.main.checkpoint not in machine.main.old_checkpoints
        machine.stale_writer(limit=1)
        machine.tables_hold_the_committed_offsets_once()
    finally:
        machine.teardown()


def hole_upsert_null_keys(m: ProtocolMachine) -> None:
    m.start_query(poison=False)
    m.upsert_batch(new=6, limit=3, crash_at=None)
    m.upsert_batch(new=6, limit=3, crash_at=None)


def hole_upsert_identity(m: ProtocolMachine) -> None:
    m.start_query(poison=False)
    m.upsert_batch(new=6, limit=3, crash_at=None)
    m.tables_hold_the_committed_offsets_once()
    m.upsert_fresh_start(limit=1)


HOLES = {
    "restore-twice": hole_restore_twice,
    "wrong-timeline": hole_wrong_timeline,
    "dead-letters-before-refusal": hole_dead_letters_before_refusal,
    "stale-writer": hole_stale_writer,
    "rewind-dead-letters": hole_rewind_dead_letters,
    "upsert-null-keys": hole_upsert_null_keys,
    "upsert-identity": hole_upsert_identity,
}


@pytest.mark.parametrize(
    "hole",
    [
        pytest.param(
            name,
            marks=pytest.mark.xfail(
                name in UNFIXED, reason=f"known hole {name} (issue 24)", strict=True
            ),
        )
        for name in sorted(HOLES)
    ],
)
def test_known_hole_schedule(hole: str) -> None:
    """The hole's schedule with its operation on: the invariant holds after every step."""
    assert set(HOLES) == set(KNOWN_HOLES)
    machine = ProtocolMachine()
    machine.unfixed = UNFIXED - {hole}
    try:
        HOLES[hole](machine)
        machine.tables_hold_the_committed_offsets_once()
    finally:
        machine.teardown()


def test_the_row_tracking_check_finds_reused_row_ids_and_a_timestamp_not_moving_on(
    tmp_path: Path,
) -> None:
    """The own-commit invariant can fail: another writer's append reusing row ids, or
    one whose in-commit timestamp repeats the last, is found."""
    table = tmp_path / "t"
    create_own_commit_table(table)
    append_as_delta_spark(table, pa.table({"id": [1, 2], "app": ["other"] * 2}))
    append_as_delta_spark(table, pa.table({"id": [3], "app": ["other"]}))
    check_row_tracking(table)
    assert row_tracking_state(table)[0] == 2
    last = table / "_delta_log" / f"{2:020d}.json"
    good = last.read_text()
    last.write_text(good.replace('"baseRowId":2', '"baseRowId":1'))
    with pytest.raises(AssertionError, match="overlap"):
        check_row_tracking(table)
    stamp = json.loads(good.splitlines()[0])["commitInfo"]["inCommitTimestamp"]
    last.write_text(
        good.replace(f'"inCommitTimestamp":{stamp}', f'"inCommitTimestamp":{stamp - 1}')
    )
    with pytest.raises(AssertionError, match="ICT"):
        check_row_tracking(table)
