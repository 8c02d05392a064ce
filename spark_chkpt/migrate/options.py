"""What ``spark-chkpt migrate`` is given, parsed once and checked together.

The checkpoint does not say which options the job passes its source and sink, so the
user hands them over as ``--option KEY=VALUE`` (the job's own ``.option`` calls): an
option the other side cannot honour is refused, named, before anything is read; an
option the other side merely has no use for is kept in :attr:`MigrateOptions.dropped`
and printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from spark_chkpt.errors import MigrationError

Target = Literal["chkpt", "spark"]
SinkKind = Literal["delta", "kafka"]

# --to chkpt: options of Spark's kafka source / delta-spark's sink that the chkpt
# formats cannot honour, and why.
NOT_IN_CHKPT: Mapping[str, str] = {
    "maxRecordsPerPartition": "chkpt-kafka splits a batch by minPartitions only",
    "overwriteSchema": "chkpt-delta evolves a schema with mergeSchema only",
    "replaceWhere": "chkpt-delta appends or replaces the whole table (complete mode)",
    "txnVersion": "chkpt-delta sets txn(appId, batchId) itself",
    "optimizeWrite": "chkpt-delta sizes files with targetFileSize",
}
# --to spark: options of the chkpt formats Spark's kafka source and delta-spark's sink
# cannot honour, and why.
NOT_IN_SPARK: Mapping[str, str] = {
    "alignment": "Spark's kafka source reads barrier records as data and passes records "
    "of unconfirmed attempts",
    "alignmentTimeout": "Spark's kafka source does not align at barriers",
    "upstreamApps": "Spark's kafka source does not align at barriers",
    "controlTopic": "Spark's kafka source does not read control topics",
    "deadLetterPath": "delta-spark's sink has no dead-letter table (the _dead_letter "
    "column would be written into the table)",
    "otherWriters": "delta-spark's sink does not check other writers' snapshots",
    "delivery": "Spark's kafka sink has no transactions (at-least-once)",
    "barriers": "Spark's kafka sink writes no barriers",
}
# Options of one side the other has no use for: dropped, said so, never refused.
CHKPT_ONLY_TUNING = (
    "partitionsPerTask",
    "recordsPerTask",
    "prefetchRecords",
    "decode",
    "maxRecordsPerArrowBatch",
    "failOnMissingTopic",
    "retainedSnapshots",
    "snapshotTimeout",
    "minPauseBetweenSnapshots",
    "orphanRetention",
    "targetFileSize",
    "maxRecordsPerFile",
)


@dataclass(frozen=True)
class MigrateOptions:
    """One migration: the checkpoint, the side it moves to, the sink and its table."""

    checkpoint: str
    to: Target
    sink: SinkKind = "delta"
    table: str | None = None
    dry_run: bool = False
    # The job's source and sink options (only their names and txnAppId are used).
    job_options: Mapping[str, str] = field(default_factory=dict)
    # How long the checkpoint's logs must stay unchanged (a running query writes them).
    watch_s: float = 5.0
    dropped: tuple[str, ...] = ()

    @property
    def txn_app_id(self) -> str | None:
        return self.job_options.get("txnAppId")

    @classmethod
    def from_values(
        cls,
        *,
        checkpoint: str,
        to: str,
        sink: str = "delta",
        table: str | None = None,
        dry_run: bool = False,
        options: Sequence[str] = (),
        watch_s: float = 5.0,
    ) -> MigrateOptions:
        """Parse and check the command's values; :class:`MigrationError` names the one
        that is wrong."""
        if to not in ("chkpt", "spark"):
            raise MigrationError(f"--to {to!r}: give chkpt or spark")
        if sink not in ("delta", "kafka"):
            raise MigrationError(f"--sink {sink!r}: give delta or kafka")
        if sink == "delta" and not table:
            raise MigrationError(
                "--table is required for a Delta sink: the checkpoint does not name the "
                "table, and the table's txn(appId) says which batches are in it"
            )
        if watch_s < 0:
            raise MigrationError(f"--watch {watch_s}: give a number of seconds >= 0")
        parsed: dict[str, str] = {}
        for item in options:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise MigrationError(f"--option {item!r}: give KEY=VALUE, as the job's .option")
            parsed[key.strip()] = value.strip()
        refused = NOT_IN_CHKPT if to == "chkpt" else NOT_IN_SPARK
        by_lower = {k.lower(): k for k in refused}
        for key in sorted(parsed):
            known = by_lower.get(key.lower())
            if known is None:
                continue
            other = "the chkpt formats" if to == "chkpt" else "Spark's own kafka and delta"
            raise MigrationError(
                f"option {key}={parsed[key]!r} cannot be honoured by {other}: "
                f"{refused[known]}. Remove it from the job (and from --option) first; "
                "nothing was written"
            )
        tuning = {k.lower() for k in CHKPT_ONLY_TUNING}
        dropped = tuple(k for k in sorted(parsed) if to == "spark" and k.lower() in tuning)
        return cls(
            checkpoint=checkpoint,
            to=to,  # type: ignore[arg-type]
            sink=sink,  # type: ignore[arg-type]
            table=table,
            dry_run=dry_run,
            job_options=parsed,
            watch_s=watch_s,
            dropped=dropped,
        )
