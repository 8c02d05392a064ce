"""A sink's rewind to snapshot N: a hook of a savepoint's restore, as a commit's hooks are.

:func:`spark_chkpt.savepoint.restore.restore_savepoint` with ``mode="rewind"`` asks the
savepoint's sink kind (:mod:`spark_chkpt.sinks`) for its rewind and calls it twice:
:meth:`SinkRewind.plan` at step 2 (every check, nothing changed; it returns the new
generation) and :meth:`SinkRewind.apply` at step 5, once the new checkpoint is written.
Each sink's rewind takes plain values (:class:`RewindPoint`, :class:`RewindRequest`),
never the savepoint: a Delta table and its dead-letter table are rolled back
(:mod:`spark_chkpt.delta.rewind`), a ``chkpt-kafka`` topic's snapshots after N are
revoked (:mod:`spark_chkpt.kafka.sink.rewind`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from spark_chkpt.errors import SavepointError
from spark_chkpt.fs import same_table
from spark_chkpt.snapshot.record import SnapshotRecord


@dataclass(frozen=True)
class RewindPoint:
    """Snapshot N as a savepoint holds it: ``app_id``'s batch ``batch_id`` from
    ``source_offsets``, written to ``target`` (a table, or topics joined by commas), at
    the sink's ``version`` (a Delta table's; None: not recorded), and the snapshot
    ``record`` (what else a sink recorded at N: a Delta sink's dead-letter table and its
    version, a plugin's ``sink_state``; None: a savepoint of an earlier release)."""

    savepoint_id: str
    app_id: str
    batch_id: int
    source_offsets: Sequence[Any]
    target: str | None
    version: int | None = None
    record: SnapshotRecord | None = None


@dataclass(frozen=True)
class RewindRequest:
    """What the caller of a rewind or fork gave: the target's ``storage_options``, the
    other writers whose commits after N may be undone (``discard_other_writers``), and
    ``sink_options``, the sink kind's own inputs by name, which its kind parses into its
    own typed request (``--sink-option name=value``; the command line's ``--table``,
    ``--dead-letter-table``, ``--bootstrap-servers`` and ``--control-topic`` arrive here
    as the built-in kinds' options of those names)."""

    storage_options: Mapping[str, str] | None = None
    discard_other_writers: Sequence[str] = ()
    sink_options: Mapping[str, str] = field(default_factory=dict)


class Rewound(Protocol):
    """What a sink's rewind did, the sink's own object (a table's versions, a topic's
    revoked snapshots, a plugin's own), in the restore's result."""

    def lines(self, *, generation: int, resumes_at: int) -> list[str]:
        """The restore's report of it: the rewind under ``generation``, the query
        resuming at batch ``resumes_at``."""
        ...


class SinkRewind(Protocol):
    """A sink's rewind to a :class:`RewindPoint`: plan, then apply."""

    def plan(self) -> int:
        """Step 2: every check (raising before anything is changed); returns the new
        generation, one above the newest the sink records of the app id."""
        ...

    def apply(self, *, generation: int, checkpoint_location: str) -> Rewound:
        """Step 5: the rewind itself under ``generation`` (the plan's, or the one an
        interrupted restore recorded), after the checkpoint at ``checkpoint_location``
        is written; run again, it finishes what an interrupted one left."""
        ...


def check_fork_target(
    *, given: str | None, written: str | None, flag: str, what: str = "table"
) -> None:
    """A fork's check for a sink writing a path: ``given`` (as ``flag``) is a new one,
    never ``written``, the savepoint's ``what`` (a table, a dead-letter table)."""
    if given is None or not same_table(given, written):
        return
    if what == "table":
        raise SavepointError(
            f"{flag} {given} is the table the savepoint's query writes: a fork "
            "writes a new table (or restore with mode rewind to roll that table back)"
        )
    raise SavepointError(
        f"{flag} {given} is the {what} the savepoint's query writes: a fork writes a new one"
    )


def check_fork_tables(
    *, point: RewindPoint, table: str | None, dead_letter_table: str | None
) -> None:
    """A fork's check for a sink's ``table`` and ``dead_letter_table`` (its own request's,
    the command line's ``--table`` and ``--dead-letter-table``): new ones only."""
    check_fork_target(given=table, written=point.target, flag="--table")
    check_fork_target(
        given=dead_letter_table,
        written=point.record.dead_letter_target if point.record is not None else None,
        flag="--dead-letter-table",
        what="dead-letter table",
    )
