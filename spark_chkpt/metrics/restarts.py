"""Restart figures: each failure of a supervised query and each restart, with its cause.

:func:`spark_chkpt.restart.run_supervised` counts into a :class:`RestartMetrics`
(``SnapshotReporter.restarts`` when the jobs run, or one you pass). Read the counters,
or push them to your metrics system from ``on_restart``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RestartEvent:
    """One restart: its number, the failure's kind and cause, the delay before it and
    when it was decided (seconds since the epoch)."""

    restart: int
    kind: str
    cause: str
    delay_s: float
    at: float


@dataclass
class RestartMetrics:
    """Failures of a supervised query by kind, its restarts and the last cause."""

    on_restart: Callable[[RestartEvent], None] | None = None
    keep: int = 100
    failures: int = 0
    task_failures: int = 0
    snapshot_failures: int = 0
    restarts: int = 0
    last_cause: str | None = None
    history: list[RestartEvent] = field(default_factory=list)

    def failed(self, *, kind: str, cause: str, snapshot: bool) -> None:
        """Count one failure (``snapshot``: of a sink's commit, else of a task)."""
        self.failures += 1
        if snapshot:
            self.snapshot_failures += 1
        else:
            self.task_failures += 1
        self.last_cause = f"{kind}: {cause}"

    def restarted(self, *, kind: str, cause: str, delay_s: float) -> RestartEvent:
        """Count one restart, decided now, and tell ``on_restart``."""
        self.restarts += 1
        event = RestartEvent(
            restart=self.restarts, kind=kind, cause=cause, delay_s=delay_s, at=time.time()
        )
        self.history.append(event)
        del self.history[: max(0, len(self.history) - self.keep)]
        if self.on_restart is not None:
            self.on_restart(event)
        return event

    def as_dict(self) -> dict[str, Any]:
        return {
            "failures": self.failures,
            "task_failures": self.task_failures,
            "snapshot_failures": self.snapshot_failures,
            "restarts": self.restarts,
            "last_cause": self.last_cause,
        }
