"""Delta checkpoints and log clean-up after a commit, by the table's own properties.

delta-spark writes a checkpoint when its commit's version is a multiple of the table's
``delta.checkpointInterval`` (10 if unset) and, after it, deletes the log files older
than ``delta.logRetentionDuration`` (30 days if unset) that lie before a checkpoint,
unless ``delta.enableExpiredLogCleanup`` is false. delta-rs's own post-commit hook
checkpoints at another version (``(version + 1) % interval``) and with another default
(100), so every commit of the project turns it off (:data:`NO_HOOKS`) and calls
:func:`upkeep` instead: the table keeps delta-spark's checkpoints whoever writes it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from spark_chkpt.fs import Location


class DeltaTarget(Protocol):
    """What upkeep needs of :class:`spark_chkpt.delta.table.target.DeltaTarget`."""

    uri: str
    location: Location

    def latest(self) -> Any | None: ...
    def open_at(self, version: int) -> Any: ...


log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = 10  # delta-spark's DeltaConfigs.CHECKPOINT_INTERVAL


def no_hooks() -> Any:
    """delta-rs ``PostCommitHookProperties`` with its checkpoint and clean-up off."""
    from deltalake import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


@dataclass(frozen=True)
class LogSettings:
    """The table properties that decide checkpoints and clean-up."""

    checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL
    cleanup: bool = True  # delta.enableExpiredLogCleanup

    @classmethod
    def of(cls, configuration: dict[str, str | None]) -> LogSettings:
        raw = (configuration.get("delta.checkpointInterval") or "").strip()
        try:
            interval = int(raw) if raw else DEFAULT_CHECKPOINT_INTERVAL
        except ValueError:
            interval = DEFAULT_CHECKPOINT_INTERVAL
        cleanup = (configuration.get("delta.enableExpiredLogCleanup") or "true").strip()
        return cls(
            checkpoint_interval=interval if interval > 0 else DEFAULT_CHECKPOINT_INTERVAL,
            cleanup=cleanup.lower() != "false",
        )

    def due(self, version: int) -> int | None:
        """The newest version at or before ``version`` that gets a checkpoint (None: none)."""
        at = version - version % self.checkpoint_interval
        return at if at > 0 else None


def last_checkpoint(target: DeltaTarget) -> int | None:
    """The version ``_delta_log/_last_checkpoint`` names (None: no checkpoint yet)."""
    try:
        text = target.location.child("_delta_log", "_last_checkpoint").read_text()
        return int(json.loads(text)["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def upkeep(target: DeltaTarget) -> int | None:
    """After a commit to ``target``: the checkpoint the table's interval makes due, if
    no checkpoint at or after that version exists yet (another writer's commits count:
    a due version it skipped is checkpointed here), then the clean-up of expired log
    files by its ``delta.logRetentionDuration``. Returns the version checkpointed (None:
    none). A failure is logged, never raised: the commit is done, as delta-spark does."""
    try:
        table = target.latest()  # the table kept across batches: no reload per commit
        if table is None:
            return None
        settings = LogSettings.of(dict(table.metadata().configuration or {}))
        due = settings.due(int(table.version()))
        last = last_checkpoint(target)
        if due is None or (last is not None and last >= due):
            return None
        at = table if due == int(table.version()) else target.open_at(due)
        at.create_checkpoint()
        if settings.cleanup:
            at.cleanup_metadata()  # by the table's delta.logRetentionDuration
        log.info("Delta table %s: checkpoint at version %d", target.uri, due)
        return due
    except Exception as e:  # the commit stands; the next commit tries again
        log.warning("Delta table %s: checkpoint or log clean-up failed: %s", target.uri, e)
        return None
