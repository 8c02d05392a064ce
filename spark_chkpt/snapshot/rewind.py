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
    the sink's ``version`` (a Delta table's; None: not recorded), its dead-letter table
    and that table's version at N (None: none recorded), and the snapshot ``record``."""

    savepoint_id: str
    app_id: str
    batch_id: int
    source_offsets: Sequence[Any]
    target: str | None
    version: int | None = None
    dead_letters: str | None = None
    dead_letter_version: int | None = None
    record: SnapshotRecord | None = None


@dataclass(frozen=True)
class RewindRequest:
    """What the caller of a rewind gave, each sink taking what it needs: the ``table``
    to roll back (which must be the savepoint's if both name one), its
    ``storage_options``, the other writers whose commits after N may be undone
    (``discard_other_writers``), the ``dead_letter_table`` of a savepoint of an earlier
    release; a Kafka sink's brokers (``kafka_bootstrap_servers``) and ``control_topic``
    (if the sink set ``controlTopic``); ``sink_options``, a sink plugin's own inputs
    by name (``--sink-option name=value``), which its kind parses into its own typed
    request."""

    table: str | None = None
    storage_options: Mapping[str, str] | None = None
    discard_other_writers: Sequence[str] = ()
    dead_letter_table: str | None = None
    kafka_bootstrap_servers: str | None = None
    control_topic: str | None = None
    sink_options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rewound:
    """What a rewind did (the fields of the restore's result it fills): a table's
    version before and its restore commit's (None: nothing to undo), the commits
    without any txn it undid, the same for the dead-letter table; or, for Kafka, the
    snapshots revoked per topic."""

    table: str | None = None
    rolled_back_from: int | None = None
    restore_version: int | None = None
    others_rolled_back: int = 0
    dead_letter_table: str | None = None
    dead_letters_rolled_back_from: int | None = None
    dead_letters_restore_version: int | None = None
    revoked: Mapping[str, tuple[int, ...]] | None = None


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


def check_fork_targets(*, point: RewindPoint, request: RewindRequest) -> None:
    """A fork's check for a sink writing a table (and a dead-letter table): it writes
    new ones, never the savepoint's."""
    if request.table is not None and same_table(request.table, point.target):
        raise SavepointError(
            f"--table {request.table} is the table the savepoint's query writes: a fork "
            "writes a new table (or restore with mode rewind to roll that table back)"
        )
    if request.dead_letter_table is not None and same_table(
        request.dead_letter_table, point.dead_letters
    ):
        raise SavepointError(
            f"--dead-letter-table {request.dead_letter_table} is the dead-letter table the "
            "savepoint's query writes: a fork writes a new one"
        )
