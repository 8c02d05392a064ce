"""Deadlines as objects: pass one in instead of calling the clock deep inside."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock."""

    at: float = field(default=0.0)

    @classmethod
    def after(cls, *, seconds: float) -> Deadline:
        return cls(at=time.monotonic() + seconds)

    def remaining(self, *, now: float | None = None) -> float:
        """Seconds left, never negative (``now``: the monotonic clock's reading, if the
        caller has its own clock)."""
        return max(0.0, self.at - (time.monotonic() if now is None else now))

    def expired(self, *, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.at
