"""A Delta table's history, read one way: its commits and the snapshot records they carry.

The replay check (:mod:`spark_chkpt.delta.replay`, the other writers of a table),
``recover`` (:mod:`spark_chkpt.recovery.rebuild`), lineage
(:mod:`spark_chkpt.lineage.walk`) and a rewind (the commits a rollback would undo,
:mod:`spark_chkpt.delta.rewind`) all read it here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_chkpt.delta.table.reader import project_info
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.snapshot.epoch import writer_of
from spark_chkpt.snapshot.record import SNAPSHOT_KEY, SnapshotRecord


@dataclass(frozen=True)
class HistoryEntry:
    """One commit of the table's history: its version and what delta-rs reports of its
    commitInfo (the project's keys, ``chkpt.snapshot`` among them, at the top level)."""

    version: int
    info: Mapping[str, Any]

    @property
    def record_text(self) -> str | None:
        """The snapshot record the commit carries (JSON), or None."""
        text = self.info.get(SNAPSHOT_KEY)
        return str(text) if text else None


def history(table: Any) -> list[HistoryEntry]:
    """Every commit delta-rs' ``history()`` reports of ``table``, newest first."""
    return [HistoryEntry(version=int(e["version"]), info=project_info(e)) for e in table.history()]


def snapshot_records(
    table: Any, *, unreadable: Callable[[int, Exception], None] | None = None
) -> list[tuple[int, SnapshotRecord]]:
    """Each commit of ``table`` that carries a snapshot record, newest first, with its
    Delta version. A record that does not parse goes to ``unreadable(version, error)``
    (which may raise); without it, it is skipped."""
    found = []
    for entry in history(table):
        text = entry.record_text
        if not text:
            continue
        try:
            record = SnapshotRecord.from_json(text)
        except (ValueError, TypeError) as e:
            if unreadable is not None:
                unreadable(entry.version, e)
            continue
        found.append((entry.version, record))
    return found


def commits_after(
    target: DeltaTarget, version: int, current: int, app_id: str
) -> tuple[set[str], int]:
    """Other app ids with commits after ``version`` up to ``current``, and how many
    commits had no txn at all (read from the JSON commits; a cleaned-up one is passed).
    A commit that changes no row (:func:`rearranges`: a compaction, an OPTIMIZE) is
    neither: a rollback undoing it loses nothing."""
    others: set[str] = set()
    plain = 0
    log_dir = target.location.child("_delta_log")
    for v in range(version + 1, current + 1):
        try:
            text = log_dir.child(f"{v:020d}.json").read_text()
        except FileNotFoundError:
            continue
        if rearranges(text):
            continue
        apps = set()
        for line in text.splitlines():
            if '"txn"' in line:
                txn = json.loads(line).get("txn")
                if isinstance(txn, dict):
                    apps.add(writer_of(str(txn.get("appId"))))
        if not apps:
            plain += 1
        others |= apps - {app_id}
    return others, plain


def rearranges(text: str) -> bool:
    """Whether the JSON commit ``text`` only rearranges files: add and remove actions,
    every one ``dataChange=false`` (a compaction, delta-spark's OPTIMIZE), and nothing
    else but its commitInfo (no txn, metaData, protocol, cdc or domain metadata)."""
    files = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        for name, body in action.items():
            if name == "commitInfo":
                continue
            if name not in ("add", "remove") or not isinstance(body, dict):
                return False
            if body.get("dataChange", True):
                return False
            files += 1
    return files > 0
