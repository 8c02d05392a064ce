"""The restart strategies' decisions, pure: no Spark, no sleeping, the time handed in.

Each strategy answers one question per failure (:meth:`Backoff.next_delay`): restart
after how long, or not at all (None), as Flink's ``RestartBackoffTimeStrategy`` does.
:class:`RestartPolicy` adds what Flink's ``CheckpointFailureManager`` adds: snapshot
failures in a row are counted apart from task failures, and past
``tolerable_snapshot_failures`` the job ends whatever the strategy allows. ``now`` is
a monotonic time in seconds (the supervisor's clock).
"""

from __future__ import annotations

import random as _random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from spark_chkpt.restart.failure import Failure, FailureKind
from spark_chkpt.restart.options import (
    ExponentialDelay,
    FailureRate,
    FixedDelay,
    RestartConfig,
    Strategy,
)


class Verdict(str, Enum):
    """What the supervisor does after a failure."""

    RESTART = "restart"
    NO_RESTART = "no restart configured"  # restart-strategy.type = none
    EXHAUSTED = "restart strategy exhausted"
    SNAPSHOT_FAILURES_EXCEEDED = "tolerable snapshot failures exceeded"
    FATAL = "not restartable"  # a restart from the same checkpoint cannot fix it
    DRIVER = "driver failure"  # only a new driver can go on


@dataclass(frozen=True)
class Decision:
    """The answer to one failure: the verdict, the delay before the restart (seconds),
    and a word on where the strategy stands (``restart 2 of 3``)."""

    verdict: Verdict
    delay_s: float = 0.0
    detail: str = ""


class Backoff:
    """One strategy's state across failures."""

    def next_delay(self, *, now: float) -> float | None:
        """Seconds to wait before restarting after a failure at ``now``; None: give up."""
        raise NotImplementedError

    def progress(self) -> str:
        """Where the strategy stands, for the log."""
        return ""


class NoBackoff(Backoff):
    def next_delay(self, *, now: float) -> float | None:
        return None


class FixedDelayBackoff(Backoff):
    """Flink's ``FixedDelayRestartBackoffTimeStrategy``: ``attempts`` restarts in all."""

    def __init__(self, strategy: FixedDelay) -> None:
        self.strategy = strategy
        self.restarts = 0

    def next_delay(self, *, now: float) -> float | None:
        if self.restarts >= self.strategy.attempts:
            return None
        self.restarts += 1
        return self.strategy.delay_ms / 1000

    def progress(self) -> str:
        return f"restart {self.restarts} of {self.strategy.attempts}"


class FailureRateBackoff(Backoff):
    """Flink's ``FailureRateRestartBackoffTimeStrategy``: give up when the failure at
    ``now`` makes more than ``max_failures_per_interval`` within the interval."""

    def __init__(self, strategy: FailureRate) -> None:
        self.strategy = strategy
        self.failures: deque[float] = deque()

    def next_delay(self, *, now: float) -> float | None:
        interval_s = self.strategy.interval_ms / 1000
        while self.failures and now - self.failures[0] > interval_s:
            self.failures.popleft()
        self.failures.append(now)
        if len(self.failures) > self.strategy.max_failures_per_interval:
            return None
        return self.strategy.delay_ms / 1000

    def progress(self) -> str:
        return (
            f"failure {len(self.failures)} of {self.strategy.max_failures_per_interval} "
            f"allowed in {self.strategy.interval_ms} ms"
        )


class ExponentialDelayBackoff(Backoff):
    """Flink's ``ExponentialDelayRestartBackoffTimeStrategy``. The backoff goes back to
    the initial one when the query ran ``reset_backoff_threshold_ms`` since its last
    restart without failing; ``attempts`` restarts without such a reset exhaust it."""

    def __init__(self, strategy: ExponentialDelay, *, random: Callable[[], float]) -> None:
        self.strategy = strategy
        self.random = random
        self.backoff_ms = float(strategy.initial_backoff_ms)
        self.attempts = 0  # since the last reset
        self.restarted_at: float | None = None  # when the last restart was due

    def next_delay(self, *, now: float) -> float | None:
        s = self.strategy
        if self.restarted_at is not None and (
            (now - self.restarted_at) * 1000 >= s.reset_backoff_threshold_ms
        ):
            self.backoff_ms, self.attempts = float(s.initial_backoff_ms), 0
        if s.attempts is not None and self.attempts >= s.attempts:
            return None
        delay_ms = self.backoff_ms
        if s.jitter:
            delay_ms += delay_ms * s.jitter * (2 * self.random() - 1)
        delay_ms = max(0.0, min(delay_ms, float(s.max_backoff_ms)))
        self.attempts += 1
        self.backoff_ms = min(self.backoff_ms * s.multiplier, float(s.max_backoff_ms))
        self.restarted_at = now + delay_ms / 1000
        return delay_ms / 1000

    def progress(self) -> str:
        limit = "" if self.strategy.attempts is None else f" of {self.strategy.attempts}"
        return f"restart {self.attempts}{limit} since the backoff was reset"


def backoff_for(strategy: Strategy, *, random: Callable[[], float] = _random.random) -> Backoff:
    if isinstance(strategy, FixedDelay):
        return FixedDelayBackoff(strategy)
    if isinstance(strategy, ExponentialDelay):
        return ExponentialDelayBackoff(strategy, random=random)
    if isinstance(strategy, FailureRate):
        return FailureRateBackoff(strategy)
    return NoBackoff()


class RestartPolicy:
    """The strategy plus the count of snapshot failures in a row: one
    :meth:`on_failure` per failure, in order."""

    def __init__(
        self, config: RestartConfig, *, random: Callable[[], float] = _random.random
    ) -> None:
        self.config = config
        self.backoff = backoff_for(config.strategy, random=random)
        self.snapshot_failures = 0  # in a row: a run that completed a snapshot resets it

    def on_failure(self, failure: Failure, *, now: float, progressed: bool) -> Decision:
        """The decision after ``failure`` at ``now``; ``progressed``: the failed run
        completed at least one snapshot (a batch) before it failed."""
        if self.config.strategy.type == "none":  # exit 1 whatever failed, as without one
            return Decision(Verdict.NO_RESTART)
        if failure.kind is FailureKind.DRIVER:
            return Decision(Verdict.DRIVER)
        if failure.kind is FailureKind.FATAL:
            return Decision(Verdict.FATAL)
        if progressed:
            self.snapshot_failures = 0
        if failure.kind is FailureKind.SNAPSHOT:
            self.snapshot_failures += 1
            tolerable = self.config.tolerable_snapshot_failures
            if tolerable is not None and self.snapshot_failures > tolerable:
                return Decision(
                    Verdict.SNAPSHOT_FAILURES_EXCEEDED,
                    detail=f"{self.snapshot_failures} snapshot failure(s) in a row, "
                    f"{tolerable} tolerated",
                )
        delay = self.backoff.next_delay(now=now)
        if delay is None:
            return Decision(Verdict.EXHAUSTED, detail=self.backoff.progress())
        return Decision(Verdict.RESTART, delay_s=delay, detail=self.backoff.progress())
