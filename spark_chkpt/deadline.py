"""Deadlines as objects, and the one loop that retries a call until one passes.

Pass a :class:`Deadline` in instead of calling the clock deep inside. :func:`retry` is
the project's one retry loop: every wait for a refused or unanswered request (a Kafka
broker restarting, a leader that moved) and every commit conflict retried goes through
it, each caller saying which errors are worth another try and how long to pause.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

_R = TypeVar("_R")


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock."""

    at: float = field(default=0.0)

    @classmethod
    def after(cls, *, seconds: float) -> Deadline:
        return cls(at=time.monotonic() + seconds)

    @classmethod
    def never(cls) -> Deadline:
        """A deadline that does not pass (a loop bounded by its number of tries)."""
        return cls(at=float("inf"))

    def remaining(self, *, now: float | None = None) -> float:
        """Seconds left, never negative (``now``: the monotonic clock's reading, if the
        caller has its own clock)."""
        return max(0.0, self.at - (time.monotonic() if now is None else now))

    def expired(self, *, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.at


def retry(
    call: Callable[[int], _R],
    *,
    deadline: Deadline,
    retriable: Callable[[BaseException], bool],
    pause_s: Callable[[int], float],
    tries: int | None = None,
    before_retry: Callable[[BaseException], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> _R:
    """``call(n)`` for try ``n`` = 0, 1, ... until it returns; an error ``retriable``
    accepts is tried again after ``pause_s(n)`` seconds (never past ``deadline``), at
    most ``tries`` times in all if given. Past the deadline or the last try, or for any
    other error, the error leaves as raised. ``before_retry(error)`` runs before each new
    try (a log line, a metadata refresh that finds a moved leader); ``call`` must be safe
    to repeat."""
    n = 0
    while True:
        try:
            return call(n)
        except Exception as e:
            last = tries is not None and n + 1 >= tries
            if last or not retriable(e) or deadline.expired():
                raise
            sleep(min(pause_s(n), deadline.remaining()))
            if before_retry is not None:
                before_retry(e)
        n += 1
