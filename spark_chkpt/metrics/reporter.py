"""Snapshot metrics: per-batch commit figures next to Spark's query progress.

More: docs/concepts/runtime.md (spark_chkpt/metrics/reporter.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming import StreamingQueryListener

from spark_chkpt.failpoints import FaultPoint, failpoint, named
from spark_chkpt.metrics.lag import (
    SourceLag,
    detach_at_exit,
    line_printer,
    progress_log_on,
    source_lags,
)
from spark_chkpt.metrics.restarts import RestartMetrics
from spark_chkpt.offsets import meta_of
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.store import SnapshotStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(
    records: Iterable[SnapshotRecord], *, failures: Iterable[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """Figures over snapshot records and the store's recorded failures
    (:meth:`~spark_chkpt.snapshot.store.SnapshotStore.failures`)."""
    items = list(records)
    failed = list(failures)
    commit_ms = [r.commit_ms for r in items]
    return {
        "snapshots": len(items),
        "first_batch": items[0].batch_id if items else None,
        "last_batch": items[-1].batch_id if items else None,
        "rows": sum(r.rows for r in items),
        "files": sum(r.files for r in items),
        "bytes": sum(r.bytes for r in items),
        "commit_ms_p50": percentile(commit_ms, 50),
        "commit_ms_p99": percentile(commit_ms, 99),
        "duplicates": sum(1 for r in items if r.outcome == "duplicate"),
        "timed_out": sum(1 for f in failed if f.get("reason") == "timeout"),
        "last_offsets": items[-1].source_offsets if items else None,
    }


def _offsets(text: Any) -> dict[str, Any]:
    """A progress offset as a dict; the listener hands ``str(None)`` for a first batch."""
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def alignment_report(progress: Any) -> dict[str, dict[str, Any]]:
    """Per topic of a chkpt-kafka source in one progress event: the alignment mode, the
    upstream snapshots the batch covers, the wait, barrier records skipped, and records
    dropped as unconfirmed (offset span - rows - barriers - revoked: exact on a topic
    written only by chkpt-kafka sinks, whose offsets are contiguous; barriers a replayed
    commit wrote again count as dropped), and the offsets of snapshots a savepoint rewind
    revoked (``revoked``, when there are any)."""
    result: dict[str, dict[str, Any]] = {}
    for source in getattr(progress, "sources", None) or ():
        topics = meta_of(_offsets(source.endOffset)).get("topics") or {}
        rows = int(source.numInputRows)
        for topic, report in topics.items():
            entry = dict(report)
            if len(topics) == 1 and "span" in report:  # rows are per source, not per topic
                barriers = int(report.get("barriers", 0))
                revoked = int(report.get("revoked", 0))
                entry["dropped"] = max(0, int(report["span"]) - rows - barriers - revoked)
            result[topic] = entry
    return result


# Spark's StateOperatorProgress fields merged into a record's state_operators entries.
PROGRESS_FIELDS = {
    "numRowsTotal": "keys",
    "numRowsUpdated": "keys_updated",
    "numRowsRemoved": "keys_removed",
    "memoryUsedBytes": "memory_bytes",
}


def _field(op: Any, name: str) -> Any:
    return op.get(name) if isinstance(op, Mapping) else getattr(op, name, None)


def merge_state_progress(
    state_operators: list[dict[str, Any]], progress_operators: Iterable[Any]
) -> list[dict[str, Any]]:
    """``state_operators`` (a record's, in operator id order) with the figures of Spark's
    ``progress.stateOperators`` added: keys, keys updated and removed, memory.

    Spark's progress lists the operators without their ids, in the order of the
    executed plan; an entry is matched by that position when the operator there has the
    same name, else by a name only one operator has, else left out. A progress
    entry with no match in a record without state listing becomes an entry of its own
    (``operator_id`` None)."""
    merged = [dict(op) for op in state_operators]
    for i, progress_op in enumerate(progress_operators):
        name = _field(progress_op, "operatorName")
        figures = {
            key: _field(progress_op, field)
            for field, key in PROGRESS_FIELDS.items()
            if _field(progress_op, field) is not None
        }
        target = None
        if i < len(merged) and merged[i].get("name") in (name, None):
            target = merged[i]
        else:
            named = [op for op in merged if op.get("name") == name]
            target = named[0] if len(named) == 1 else None
        if target is not None:
            target.update(figures)
        elif not state_operators:
            merged.append({"operator_id": None, "name": name, **figures})
    return merged


def describe(record: SnapshotRecord) -> str:
    return (
        f"snapshot {record.batch_id} {record.outcome}: {record.rows} rows, "
        f"{record.files} files, {record.bytes} bytes, commit {record.commit_ms:.0f} ms, "
        f"{record.sink} version {record.table_version}, offsets {record.source_offsets}"
    )


class SnapshotReporter(StreamingQueryListener):
    """Logs each completed snapshot of the queries it knows, after Spark's progress event.

    reporter = SnapshotReporter.attach(spark)
    query = df.writeStream.format("chkpt-delta")...start()
    reporter.track(query, checkpoint_location="/chk/events")

    Per query it keeps the newest ``keep`` snapshot records (``history``) and alignment
    reports (``alignment``): a query that runs for months holds no more.
    """

    def __init__(
        self,
        *,
        on_snapshot: Callable[[SnapshotRecord], None] | None = None,
        keep: int = 1000,
        print_lines: bool = True,
    ) -> None:
        self._print = line_printer() if print_lines else None
        # Each query's sources' lag in its latest progress (offsets behind the latest).
        self.lag: dict[str, list[SourceLag]] = {}
        self._stores: dict[str, SnapshotStore] = {}
        self._on_snapshot = on_snapshot
        self._keep = keep
        self.history: dict[str, list[SnapshotRecord]] = {}
        self.alignment: dict[str, list[dict[str, Any]]] = {}
        # Failures and restarts of the queries the jobs supervise (spark_chkpt.restart).
        self.restarts = RestartMetrics()

    @classmethod
    def attach(
        cls,
        spark: SparkSession,
        *,
        on_snapshot: Callable[[SnapshotRecord], None] | None = None,
        print_lines: bool | None = None,
    ) -> SnapshotReporter:
        """A reporter listening to ``spark``'s queries; its line is printed unless
        ``print_lines`` is False (None: unless ``spark.chkpt.progressLog`` is false)."""
        if print_lines is None:
            print_lines = progress_log_on(spark)
        reporter = cls(on_snapshot=on_snapshot, print_lines=print_lines)
        spark.streams.addListener(reporter)
        detach_at_exit(spark, reporter)
        return reporter

    def track(self, query: StreamingQuery, *, checkpoint_location: str) -> None:
        self._stores[str(query.id)] = SnapshotStore(checkpoint_location=checkpoint_location)

    def records(self, query: StreamingQuery) -> list[SnapshotRecord]:
        return list(self.history.get(str(query.id), []))

    def timed_out(self, query: StreamingQuery) -> int:
        """How many snapshots of ``query`` failed on ``snapshotTimeout`` (the coordinator
        records each in the store; a failed batch has no progress event)."""
        store = self._stores.get(str(query.id))
        if store is None:
            return 0
        return sum(1 for f in store.failures() if f.get("reason") == "timeout")

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        for topic, report in alignment_report(progress).items():
            runs = self.alignment.setdefault(str(progress.id), [])
            runs.append({"batch": progress.batchId, "topic": topic, **report})
            del runs[: max(0, len(runs) - self._keep)]  # a query's life: the newest only
            log.info(
                "%s batch %s read %s %s: upstream snapshots %s, waited %s ms, "
                "%s barrier(s) skipped, %s unconfirmed record(s) dropped, %s offset(s) of "
                "revoked snapshots skipped",
                progress.name or progress.id,
                progress.batchId,
                topic,
                report.get("mode"),
                report.get("snapshots"),
                report.get("waited_ms"),
                report.get("barriers"),
                report.get("dropped", "?"),
                report.get("revoked", 0),
            )
        drift = (getattr(progress, "observedMetrics", None) or {}).get("schema_drift")
        if drift is not None and (drift["records_with_unknown_fields"] or 0) > 0:
            log.warning(
                "%s batch %s: %s of %s record(s) carried fields the schema does not declare "
                "(ignored; add them to the schema and set mergeSchema to keep them)",
                progress.name or progress.id,
                progress.batchId,
                drift["records_with_unknown_fields"],
                drift["records"],
            )
        lags = source_lags(progress)
        if lags:
            self.lag[str(progress.id)] = lags
        store = self._stores.get(str(progress.id))
        if store is None:
            return
        try:
            record = store.get(int(progress.batchId))
        except Exception as e:  # a listener must never take the query down
            log.warning("snapshot record of batch %s unreadable: %s", progress.batchId, e)
            return
        if record is None:
            return
        record = self._with_state_progress(store, record, progress)
        history = self.history.setdefault(str(progress.id), [])
        if history and history[-1].batch_id == record.batch_id:
            return
        history.append(record)
        del history[: max(0, len(history) - self._keep)]
        line = f"{progress.name or progress.id}: {describe(record)}"
        if lags:
            line += "; " + "; ".join(lag.describe() for lag in lags)
        if self._print is not None:
            self._print(line)
            log.debug("%s", line)  # printed already: a configured INFO log would repeat it
        else:
            log.info("%s", line)
        if self._on_snapshot is not None:
            self._on_snapshot(record)

    @staticmethod
    def _with_state_progress(
        store: SnapshotStore, record: SnapshotRecord, progress: Any
    ) -> SnapshotRecord:
        """``record`` with the progress's state figures (keys, memory), stored again."""
        progress_operators = list(getattr(progress, "stateOperators", None) or ())
        if not progress_operators:
            return record
        merged = merge_state_progress(record.state_operators, progress_operators)
        if merged == record.state_operators:
            return record
        updated = dataclasses.replace(record, state_operators=merged)
        try:
            store.update(updated)
        except Exception as e:  # a listener must never take the query down
            log.warning("state figures of snapshot %s not stored: %s", record.batch_id, e)
        return updated

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


class CommitLogFailpoint(StreamingQueryListener):
    """The ``after-commit-log`` fail point: Spark posts a batch's progress after writing
    its commit log (``commits/N``). :func:`arm_commit_log_failpoint` listens with it on
    a session whose environment switches the point on, whatever else the script
    attaches (a plain ``foreachBatch`` job has no :class:`SnapshotReporter`)."""

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        failpoint(FaultPoint.AFTER_COMMIT_LOG, int(event.progress.batchId))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


_ARMED_SESSIONS: set[int] = set()


def arm_commit_log_failpoint(spark: SparkSession) -> bool:
    """Listen on ``spark``'s queries with :class:`CommitLogFailpoint` (once per session)
    when the environment kills or stalls at ``after-commit-log``; called by
    ``spark_chkpt.register``. Returns whether it listens."""
    if not named(FaultPoint.AFTER_COMMIT_LOG):
        return False
    if id(spark) not in _ARMED_SESSIONS:
        _ARMED_SESSIONS.add(id(spark))
        spark.streams.addListener(CommitLogFailpoint())
    return True


def store_records(*, checkpoint_location: str) -> list[SnapshotRecord]:
    store = SnapshotStore(checkpoint_location=checkpoint_location)
    return [r for r in (store.get(i) for i in store.batch_ids()) if r is not None]


def state_totals(record: SnapshotRecord) -> dict[str, Any]:
    """A record's state in three figures: operators, keys (None until the reporter
    merged Spark's progress) and bytes written for the snapshot."""
    ops = record.state_operators
    keys = [op["keys"] for op in ops if op.get("keys") is not None]
    return {
        "state_operators": len(ops),
        "keys": sum(keys) if keys else None,
        "state_bytes": sum(int(op.get("bytes") or 0) for op in ops),
    }


def as_table(records: Iterable[SnapshotRecord]) -> list[Mapping[str, Any]]:
    return [
        {
            "batch": r.batch_id,
            "outcome": r.outcome,
            "rows": r.rows,
            "files": r.files,
            "commit_ms": r.commit_ms,
            "version": r.table_version,
            "dead_letters": r.dead_letters,
            **state_totals(r),
        }
        for r in records
    ]
