"""A Delta sink's rewind to snapshot N: its table and its dead-letter table.

:class:`DeltaRewind` is the :class:`~spark_chkpt.snapshot.rewind.SinkRewind` of both
Delta writers (``chkpt-delta``, ``DeltaUpsert``, whose kind is :class:`DeltaTableKind`):
:meth:`DeltaRewind.plan` makes every check before anything changes, :meth:`apply` rolls
the table back with delta-rs ``restore`` (through :mod:`spark_chkpt.delta.table.target`) in a
commit carrying ``txn(appId, N)``, snapshot N's record and the new generation, then the
dead-letter table the same way. The protocol and its refusals:
docs/concepts/delta-internals.md (spark_chkpt/delta/rewind.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from spark_chkpt.delta.dead_letter_rollback import (
    DeadLetterTable,
    dead_letter_table_of,
    plan_dead_letter_rewind,
    rewind_dead_letters,
)
from spark_chkpt.delta.rollback import DeltaRewound, check_table, rewind_table
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import SavepointError
from spark_chkpt.fs import qualify, resolve, same_table
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest, check_fork_tables
from spark_chkpt.snapshot.tools import Tool

TABLE, DEAD_LETTER_TABLE = "table", "dead-letter-table"  # the kinds' own sink options


@dataclass(frozen=True)
class DeltaRewindRequest:
    """A Delta sink's own inputs of a rewind or fork, parsed from the request's sink
    options (``--table``, ``--dead-letter-table`` on the command line): the ``table``
    (a rewind's must be the savepoint's; a fork's a new one), the ``dead_letter_table``
    of a savepoint of an earlier release, the store's ``storage_options`` and the
    ``discard_other_writers``."""

    table: str | None = None
    dead_letter_table: str | None = None
    storage_options: Mapping[str, str] | None = None
    discard_other_writers: Sequence[str] = ()

    @classmethod
    def of(cls, request: RewindRequest) -> DeltaRewindRequest:
        return cls(
            table=request.sink_options.get(TABLE),
            dead_letter_table=request.sink_options.get(DEAD_LETTER_TABLE),
            storage_options=request.storage_options,
            discard_other_writers=tuple(request.discard_other_writers),
        )


class DeltaRewind:
    """The :class:`~spark_chkpt.snapshot.rewind.SinkRewind` of a ``chkpt-delta`` table
    (``table``: the one to roll back, which must be the savepoint's if both name one)
    and its dead-letter table (``dead_letter_table``: needed only when neither the
    savepoint nor the table's commit of N names it). ``discard_other_writers`` names the
    other writers whose commits after N the rewind may undo."""

    def __init__(
        self,
        *,
        point: RewindPoint,
        table: str | None = None,
        dead_letter_table: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        discard_other_writers: Sequence[str] = (),
    ) -> None:
        self.point = point
        self.target = rewind_target(point, table, storage_options)
        self.dead_letter_table = dead_letter_table
        self.storage_options = storage_options
        self.discard_other_writers = tuple(discard_other_writers)
        self.letters: DeadLetterTable | None = None

    def plan(self) -> int:
        state = check_table(self.point, self.target, self.discard_other_writers)
        self.letters = dead_letter_table_of(
            self.point, state, self.dead_letter_table, self.storage_options
        )
        if self.letters is not None:
            plan_dead_letter_rewind(self.letters, discard_other_writers=self.discard_other_writers)
        return (self.target.generation(state.table, app_id=state.app_id) or 0) + 1

    def apply(self, *, generation: int, checkpoint_location: str) -> DeltaRewound:
        rewound = rewind_table(
            self.point,
            self.target,
            self.discard_other_writers,
            generation,
            checkpoint_location=checkpoint_location,
        )
        if self.letters is None:
            return replace(rewound, table=self.target.uri)
        before, restored = rewind_dead_letters(
            self.letters,
            discard_other_writers=self.discard_other_writers,
            generation=generation,
            savepoint_id=self.point.savepoint_id,
        )
        return replace(
            rewound,
            table=self.target.uri,
            dead_letter_table=self.letters.target.uri,
            dead_letters_rolled_back_from=before,
            dead_letters_restore_version=restored,
        )


class DeltaTableKind:
    """The sink kind of a writer of one Delta table (``chkpt-delta``, ``DeltaUpsert``),
    as :mod:`spark_chkpt.sinks` asks it: its rewind is :class:`DeltaRewind`."""

    has_barriers = False
    target_option = "path"
    progress_hint = ""
    tools: frozenset[Tool] = frozenset({"recover", "diff", "lineage", "migrate"})

    def __init__(self, *, name: str) -> None:
        self.name = name

    def rewind(self, *, point: RewindPoint, request: RewindRequest) -> DeltaRewind:
        own = DeltaRewindRequest.of(request)
        return DeltaRewind(
            point=point,
            table=own.table,
            dead_letter_table=own.dead_letter_table,
            storage_options=own.storage_options,
            discard_other_writers=own.discard_other_writers,
        )

    def check_fork(self, *, point: RewindPoint, request: RewindRequest) -> None:
        own = DeltaRewindRequest.of(request)
        check_fork_tables(point=point, table=own.table, dead_letter_table=own.dead_letter_table)

    def holds(self, *, target: str) -> bool:
        try:
            return resolve(target).child("_delta_log").exists()
        except OSError:  # a store that does not answer holds nothing we can tell
            return False

    def data_source(self) -> None:
        return None  # chkpt-delta's format is spark_chkpt.connectors'

    def describe(
        self, *, target: str | None, app_id: str, batch_id: int, version: int | None
    ) -> str:
        return f"Delta version {'-' if version is None else version}, txn {app_id}={batch_id}"

    def barrier_topics(self, target: str | None) -> tuple[str, ...]:
        return ()

    def progress(
        self, *, record: SnapshotRecord, bootstrap_servers: str | None
    ) -> dict[str, dict[str, int]] | None:
        return None


def rewind_target(
    point: RewindPoint, table: str | None, storage_options: Mapping[str, str] | None
) -> DeltaTarget:
    """Step 2 of a rewind: the table, checked (see the module docstring)."""
    uri = table or point.target
    if uri is None:
        raise SavepointError(
            f"savepoint {point.savepoint_id} does not name the sink's table (its snapshot "
            "record does not name it): give --table, the chkpt-delta table to roll back"
        )
    if table is not None and point.target and not same_table(table, point.target):
        raise SavepointError(
            f"--table {table} is not the table the savepoint's query wrote ({point.target}): "
            "a rewind rolls back the same table; restore with --mode fork to write another"
        )
    return DeltaTarget(uri=qualify(uri), storage_options=storage_options)
