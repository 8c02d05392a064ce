"""The ``chkpt-delta`` sink's auto compaction, as Databricks' ``delta.autoOptimize.autoCompact``.

After a batch's commit and its snapshot record are durable, the coordinator asks
:meth:`AutoCompaction.after_batch` whether the partitions the batch wrote (the table,
unpartitioned) hold ``autoCompactMinNumFiles`` files smaller than
``autoCompactMaxFileSize``; if so, delta-rs's ``optimize.compact`` rewrites them in a
commit of its own: ``dataChange=false``, no txn, ``chkpt.compaction`` in commitInfo
(the rewind passes such commits, they change no row). A compaction that fails or loses a
race logs one warning naming the table and version, never fails the batch, and is tried
again at the next crossing. Tables whose features the rewrite cannot keep are skipped
with one log line (:func:`refusal`). The count is kept in the process: the table's files
are read only when the files added since the last count could have crossed it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_chkpt.delta.features.protocol import TableProtocol, check_table, read_protocol
from spark_chkpt.delta.log.commit import OWN_COMMIT_FEATURES
from spark_chkpt.delta.sink.options import DeltaSinkConfig, auto_compact_value
from spark_chkpt.delta.staging import StagedFile
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import ChkptError, TableFeatureError
from spark_chkpt.failpoints import FaultPoint, failpoint

log = logging.getLogger(__name__)

COMPACTION_KEY = "chkpt.compaction"  # commitInfo of an auto compaction's commit
PROPERTY = "delta.autoOptimize.autoCompact"
WRITER = "chkpt-delta auto compaction"

Partition = tuple[tuple[str, str | None], ...]

# Features a rewrite by delta-rs's compaction cannot keep, and why (the table is skipped).
_CANNOT_KEEP = {
    "deletionVectors": "delta-rs's compaction does not carry deletion vectors over to the "
    "files it writes (rows deleted by another writer could come back)",
    "columnMapping": "delta-rs's compaction writes the logical column names, not the "
    "table's physical ones",
}
_OWN_COMMIT_REASON = (
    "delta-rs cannot commit to such tables (the sink's appends to them are its own "
    "commits) and a rewrite would have to keep their row ids, identity high-water marks "
    "and domain metadata"
)


def refusal(found: TableProtocol) -> str | None:
    """Why ``found`` is not compacted (None: it may be): a feature the sink cannot
    write, one delta-rs cannot commit (:data:`OWN_COMMIT_FEATURES`: row tracking,
    identity columns, in-commit timestamps, domain metadata, clustering, type
    widening), deletion vectors, column mapping in use."""
    try:
        check_table(found, writer=WRITER, operation="append")
    except TableFeatureError as e:
        return f"table feature '{e.feature}': the sink cannot write it"
    for name in found.required():
        if name in OWN_COMMIT_FEATURES:
            return f"table feature '{name}': {_OWN_COMMIT_REASON}"
        if name == "columnMapping":
            mode = found.configuration.get("delta.columnMapping.mode", "none").strip().lower()
            if mode == "none":
                continue
        if name in _CANNOT_KEEP:
            return f"table feature '{name}': {_CANNOT_KEEP[name]}"
    return None


@dataclass
class _Count:
    """Small files of the table, in this process: the most any partition held at the
    last count (``counted``) and those the batches staged since (``added``); the reason
    the table is skipped, once logged."""

    counted: int | None = None  # None: not counted yet in this process
    added: int = 0
    skipped: str | None = None


# Per table and app id, across the coordinators of one process (one per commit call).
_COUNTS: dict[tuple[str, str], _Count] = {}


class AutoCompaction:
    """Auto compaction of one ``chkpt-delta`` table (``config``: the sink's options)."""

    def __init__(self, *, config: DeltaSinkConfig, target: DeltaTarget, app_id: str) -> None:
        self.config, self.target, self.app_id = config, target, app_id
        self.min_files = config.auto_compact_min_files
        self.max_bytes = config.auto_compact_max_file_bytes
        self.key = (config.path, app_id)

    @property
    def count(self) -> _Count:
        return _COUNTS.setdefault(self.key, _Count())

    @count.setter
    def count(self, value: _Count) -> None:
        value.skipped = _COUNTS.get(self.key, _Count()).skipped
        _COUNTS[self.key] = value

    def enabled(self, table: Any) -> bool:
        """Option ``autoCompact`` if given, else the table property."""
        if self.config.auto_compact is not None:
            return self.config.auto_compact
        raw = (table.metadata().configuration or {}).get(PROPERTY) if table is not None else None
        if raw is None:
            return False
        try:
            return auto_compact_value(PROPERTY, str(raw))
        except ChkptError:
            return False  # delta-spark refuses other values; none here turns it on

    def after_batch(self, *, batch_id: int, files: Sequence[StagedFile]) -> dict[str, Any] | None:
        """After batch ``batch_id``'s commit and record are durable: compact the
        partitions ``files`` wrote that reached the threshold. Never raises; returns
        delta-rs's metrics of the last compaction (None: none ran)."""
        try:
            return self._after_batch(batch_id=batch_id, files=files)
        except Exception as e:  # the batch is committed: compaction never fails it
            version = self._version()
            log.warning(
                "chkpt-delta auto compaction of %s after batch %d (Delta version %s) "
                "failed, tried again at the next %d small files: %s",
                self.config.path,
                batch_id,
                version,
                self.min_files,
                str(e).splitlines()[0] if str(e) else type(e).__name__,
            )
            self.count = _Count(counted=0)
            return None

    def _after_batch(self, *, batch_id: int, files: Sequence[StagedFile]) -> dict[str, Any] | None:
        if self.config.auto_compact is False:
            return None
        self.count.added += sum(1 for f in files if f.size < self.max_bytes)
        counted = self.count.counted
        if counted is not None and counted + self.count.added < self.min_files:
            return None
        table = self.target.latest()
        if table is None or not self.enabled(table):
            self.count = _Count(counted=0)
            return None
        reason = refusal(read_protocol(table, uri=self.target.uri))
        if reason is not None:
            if reason != self.count.skipped:
                log.info("chkpt-delta auto compaction skips %s: %s", self.config.path, reason)
            self.count = _Count(counted=0)
            self.count.skipped = reason
            return None
        counts = self.target.small_files(
            table, below=self.max_bytes, partition_by=self.config.partition_by
        )
        wrote = {_partition_of(f, self.config.partition_by) for f in files}
        # a partition with a null value is left as it is (delta-rs's filter cannot name it)
        due = [
            p
            for p in sorted(counts, key=str)
            if counts[p] >= self.min_files and all(v is not None for _, v in p)
        ]
        if counted is not None:  # a crossing: only the partitions the batch wrote
            due = [p for p in due if p in wrote or not self.config.partition_by]
        metrics = None
        for partition in due:
            metrics = self._compact(table, partition, batch_id=batch_id)
            table = self.target.latest()
        if due:
            counts = self.target.small_files(
                table, below=self.max_bytes, partition_by=self.config.partition_by
            )
        self.count = _Count(counted=max(counts.values(), default=0))
        return metrics

    def _compact(self, table: Any, partition: Partition, *, batch_id: int) -> dict[str, Any]:
        values = dict(partition)
        before = int(table.version())
        metrics = self.target.compact(
            table,
            partition={k: str(v) for k, v in values.items() if v is not None},
            target_size=self.max_bytes,
            metadata={
                COMPACTION_KEY: json.dumps(
                    {"appId": self.app_id, "afterBatch": batch_id, "partition": values}
                )
            },
        )
        failpoint(FaultPoint.AFTER_COMPACTION, batch_id)
        log.info(
            "chkpt-delta auto compaction of %s%s after batch %d: %s small file(s) into %s "
            "(from Delta version %d)",
            self.config.path,
            f" partition {values}" if values else "",
            batch_id,
            metrics.get("numFilesRemoved"),
            metrics.get("numFilesAdded"),
            before,
        )
        return metrics

    def _version(self) -> int | None:
        try:
            table = self.target.open()
        except Exception:  # the warning names no version then
            return None
        return int(table.version()) if table is not None else None


def _partition_of(file: StagedFile, partition_by: Sequence[str]) -> Partition:
    return tuple((n, file.partition_values.get(n)) for n in sorted(partition_by))
