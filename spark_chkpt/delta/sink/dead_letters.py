"""The ``chkpt-delta`` sink's dead letters (``deadLetterPath``): malformed records in a
table of their own, committed exactly once with the batch.

The query marks a malformed record by setting its struct column ``_dead_letter`` (null
for good rows). On executors
:func:`~spark_chkpt.delta.sink.dead_letter_rows.split_dead_letters` stages those rows for
the dead-letter table; on the driver :meth:`DeadLetters.commit` makes them visible in one
commit of that table with its own ``txn(appId, N)``, before the batch's commit of the
main table, so a replay neither loses nor repeats them. The Delta version of that
commit goes into the batch's snapshot record: a savepoint rewind to N rolls the
dead-letter table back to it (:mod:`spark_chkpt.delta.rewind`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.features.column_mapping import ColumnMapping
from spark_chkpt.delta.sink.options import DEAD_LETTER_COLUMN, DeltaSinkConfig
from spark_chkpt.delta.staging import StagedFile, StagedOutput
from spark_chkpt.delta.table.actions import committing
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import ConfigError
from spark_chkpt.snapshot.coordinator import retry_conflicts

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


def check_dead_letters(schema: Any, config: DeltaSinkConfig, *, complete: bool) -> None:
    """``deadLetterPath`` and the ``_dead_letter`` struct column (of Spark's ``schema``)
    come together, and only in an append query."""
    from pyspark.sql.types import StructType

    field = next((f for f in schema.fields if f.name == DEAD_LETTER_COLUMN), None)
    if config.dead_letter_path and (field is None or not isinstance(field.dataType, StructType)):
        raise ConfigError(
            "deadLetterPath",
            config.dead_letter_path,
            f"the query needs a struct column '{DEAD_LETTER_COLUMN}' (null for good rows) "
            "holding each malformed record; the jobs build it with job.badRecords=deadLetter",
        )
    if field is not None and not config.dead_letter_path:
        raise ConfigError(
            "deadLetterPath",
            None,
            f"the query has a '{DEAD_LETTER_COLUMN}' column: set deadLetterPath to the "
            "dead-letter table its rows go to",
        )
    if complete and config.dead_letter_path:
        raise ConfigError(
            "deadLetterPath",
            config.dead_letter_path,
            "outputMode('complete') rewrites the whole result each batch; dead letters "
            "belong to the append query that parses the records",
        )


def letters_of(outputs: Sequence[StagedOutput | None]) -> list[StagedFile]:
    """The dead-letter files the tasks staged (commit messages without any have none)."""
    return [
        f for m in outputs if m is not None for f in getattr(m, "dead_letter_files", None) or ()
    ]


@dataclass(frozen=True)
class CommittedLetters:
    """A batch's dead letters in their table: how many, and the table's version that
    holds them (None: no dead-letter table yet)."""

    rows: int
    version: int | None


class DeadLetters:
    """The dead-letter table of one query (phase 2 on the driver)."""

    def __init__(self, *, target: DeltaTarget, app_id: str) -> None:
        self.target = target
        self.app_id = app_id

    def commit(
        self,
        outputs: Sequence[StagedOutput],
        *,
        batch_id: int,
        schema: pa.Schema | None,
        mapping: ColumnMapping | None = None,
    ) -> CommittedLetters:
        """The batch's dead letters in one commit with ``txn(appId, N)`` (a replay finds
        it and discards this attempt's letters); returns how many the batch has and the
        version of the table that holds them. ``mapping``: the column mapping they were
        staged with (a column-mapped dead-letter table must still have it)."""
        letters = letters_of(outputs)
        target = self.target
        table = target.latest()
        done = table.transaction_version(self.app_id) if table is not None else None
        if done is not None and done >= batch_id:
            return self._replayed(table, letters, batch_id=batch_id)
        if (not letters and table is None) or schema is None:
            # no dead letter yet: the table is created with the first one
            return CommittedLetters(0, int(table.version()) if table is not None else None)
        count = sum(f.rows for f in letters)
        if table is not None:
            target.check_mapping(
                table, mapping, schema.names, what=f"chkpt-delta batch {batch_id}'s dead letters"
            )

        def attempt(retry: int) -> None:
            with committing(
                f"chkpt-delta could not commit batch {batch_id}'s dead letters to {target.uri}"
            ):
                current = table if retry == 0 else target.latest()
                # another writer may have turned a feature on since the start
                target.check_features(current, writer="chkpt-delta", operation="append")
                target.commit(
                    table=current,
                    schema=schema,
                    partition_by=(),
                    files=letters,
                    app_id=self.app_id,
                    version=batch_id,
                    metadata={"chkpt.batchId": batch_id, "chkpt.deadLetters": count},
                )

        retry_conflicts(attempt, what=f"chkpt-delta batch {batch_id}'s dead letters")
        if count:
            log.warning(
                "chkpt-delta batch %d: %d malformed record(s) committed to %s",
                batch_id,
                count,
                target.uri,
            )
        found = target.find_txn_commit(target.latest(), app_id=self.app_id, txn_version=batch_id)
        return CommittedLetters(count, found.version if found is not None else None)

    def _replayed(
        self, table: Any, letters: Sequence[StagedFile], *, batch_id: int
    ) -> CommittedLetters:
        """The table holds batch ``batch_id``: discard this attempt's letters; returns how
        many the committed batch has, and its commit's version."""
        self.target.delete_unreferenced(letters, table)
        found = self.target.find_txn_commit(table, app_id=self.app_id, txn_version=batch_id)
        rows = found.info.get("chkpt.deadLetters") if found is not None else None
        return CommittedLetters(
            int(rows) if rows is not None else 0,
            found.version if found is not None else int(table.version()),
        )

    def abort(self, outputs: Sequence[StagedOutput | None]) -> None:
        """Delete a failed attempt's staged letters (never files the table references)."""
        self.target.delete_unreferenced(letters_of(outputs), self.target.latest())
