"""The snapshot store: ``<checkpointLocation>/chkpt/snapshots/<batchId>.json``.

Each record is written atomically (see :meth:`spark_chkpt.fs.Location.write_atomic`);
the newest ``retained`` records are kept, older ones deleted after each write
(``retainedSnapshots=0`` turns the store off).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from spark_chkpt.errors import ChkptError
from spark_chkpt.fs import Location, resolve
from spark_chkpt.snapshot.record import SnapshotRecord

log = logging.getLogger(__name__)

STORE_DIR = "chkpt/snapshots"
FAILURES_DIR = "chkpt/failures"  # snapshots that failed on purpose (snapshotTimeout)
KEPT_FAILURES = 100


class SnapshotStore:
    """Completed snapshots of one query, next to Spark's checkpoint."""

    def __init__(self, *, checkpoint_location: str, retained: int = 10) -> None:
        if retained < 0:
            raise ChkptError(f"retainedSnapshots must be 0 or more, got {retained}")
        self.root: Location = resolve(checkpoint_location).child(*STORE_DIR.split("/"))
        self.failures_root: Location = resolve(checkpoint_location).child(*FAILURES_DIR.split("/"))
        self.retained = retained

    def _path(self, batch_id: int) -> Location:
        return self.root.child(f"{batch_id}.json")

    def batch_ids(self) -> list[int]:
        ids = []
        for info in self.root.list():
            name = info.base_name
            if name.endswith(".json") and name[: -len(".json")].isdigit():
                ids.append(int(name[: -len(".json")]))
        return sorted(ids)

    def put(self, record: SnapshotRecord) -> None:
        """Write ``record`` atomically, then drop records beyond the newest ``retained``.
        With ``retained == 0`` the store is off (the Delta sink still records each
        snapshot in its commit)."""
        if self.retained == 0:
            return
        self._path(record.batch_id).write_atomic(record.to_json() + "\n")
        ids = self.batch_ids()
        for old in ids[: max(0, len(ids) - self.retained)]:
            self._path(old).delete()

    def update(self, record: SnapshotRecord) -> bool:
        """Rewrite a record the store holds, atomically, without dropping any (the
        reporter adds figures that arrive after the commit; it does not know the
        coordinator's ``retained``). False if the store no longer holds that batch."""
        path = self._path(record.batch_id)
        if not path.exists():
            return False
        path.write_atomic(record.to_json() + "\n")
        return True

    def get(self, batch_id: int) -> SnapshotRecord | None:
        path = self._path(batch_id)
        try:
            return SnapshotRecord.from_json(path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as e:
            raise ChkptError(f"snapshot record {path} is corrupt: {e}") from e

    def latest(self) -> SnapshotRecord | None:
        ids = self.batch_ids()
        return self.get(ids[-1]) if ids else None

    def put_failure(self, *, batch_id: int, reason: str, message: str, sink: str) -> None:
        """Record a snapshot that failed (``reason``: a
        :class:`~spark_chkpt.errors.CommitFailureReason` value) as
        ``chkpt/failures/<batchId>-<ms>-<random>.json``, keeping the newest
        ``KEPT_FAILURES``. Its own errors are logged: the batch fails with its own error
        either way."""
        now = int(time.time() * 1000)
        doc = {
            "batch_id": batch_id,
            "reason": reason,
            "sink": sink,
            "message": message,
            "created_ms": now,
        }
        try:
            name = f"{batch_id}-{now}-{uuid.uuid4().hex[:8]}.json"  # two in one ms: both kept
            self.failures_root.child(name).write_atomic(json.dumps(doc, sort_keys=True) + "\n")
            names = sorted(
                (i.base_name for i in self.failures_root.list()),
                key=lambda name: name.partition("-")[2],  # by the time: all ms have 13 digits
            )
            for old in names[: max(0, len(names) - KEPT_FAILURES)]:
                self.failures_root.child(old).delete()
        except OSError as e:
            log.warning("failure of snapshot %d not recorded: %s", batch_id, e)

    def failures(self) -> list[dict[str, Any]]:
        """The recorded snapshot failures, oldest first."""
        found = []
        for info in self.failures_root.list():
            if info.base_name.endswith(".json"):
                try:
                    found.append(json.loads(self.failures_root.child(info.base_name).read_text()))
                except (OSError, ValueError) as e:
                    log.warning("snapshot failure %s unreadable: %s", info.base_name, e)
        return sorted(found, key=lambda d: (d.get("created_ms", 0), d.get("batch_id", 0)))
