"""The restart settings, Flink's names: parsed once into a frozen :class:`RestartConfig`.

More: docs/concepts/runtime.md (spark_chkpt/restart/options.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from spark_chkpt.errors import ConfigError
from spark_chkpt.options import parse_duration_ms, parse_positive_int

log = logging.getLogger(__name__)

PREFIX = "restart-strategy."
TYPE = "restart-strategy.type"
TOLERABLE = "execution.checkpointing.tolerable-failed-checkpoints"

StrategyType = Literal["none", "fixed-delay", "exponential-delay", "failure-rate"]
# Flink's spellings of each type (RestartStrategyOptions.RestartStrategyType).
_TYPES: dict[str, StrategyType] = {
    "none": "none",
    "off": "none",
    "disable": "none",
    "fixed-delay": "fixed-delay",
    "fixeddelay": "fixed-delay",
    "exponential-delay": "exponential-delay",
    "exponentialdelay": "exponential-delay",
    "failure-rate": "failure-rate",
    "failurerate": "failure-rate",
}


@dataclass(frozen=True, kw_only=True)
class NoRestart:
    """``none``: a failed query is not restarted; the program exits 1, as without a
    supervisor."""

    type: StrategyType = field(default="none", init=False)


@dataclass(frozen=True, kw_only=True)
class FixedDelay:
    """``fixed-delay``: up to ``attempts`` restarts, each ``delay_ms`` after the failure."""

    attempts: int = 1
    delay_ms: int = 1000
    type: StrategyType = field(default="fixed-delay", init=False)


@dataclass(frozen=True, kw_only=True)
class ExponentialDelay:
    """``exponential-delay``: the delay starts at ``initial_backoff_ms`` and grows by
    ``multiplier`` up to ``max_backoff_ms``, each with +/- ``jitter`` of it at random.
    A query that ran ``reset_backoff_threshold_ms`` without failing starts again from the
    initial backoff; ``attempts`` restarts in a row without such a reset exhaust it
    (None: never)."""

    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 60_000
    multiplier: float = 1.5
    jitter: float = 0.1
    reset_backoff_threshold_ms: int = 3_600_000
    attempts: int | None = None
    type: StrategyType = field(default="exponential-delay", init=False)


@dataclass(frozen=True, kw_only=True)
class FailureRate:
    """``failure-rate``: restart after ``delay_ms`` unless more than
    ``max_failures_per_interval`` failures fell within the last ``interval_ms``."""

    max_failures_per_interval: int = 1
    interval_ms: int = 60_000
    delay_ms: int = 1000
    type: StrategyType = field(default="failure-rate", init=False)


Strategy = NoRestart | FixedDelay | ExponentialDelay | FailureRate


@dataclass(frozen=True, kw_only=True)
class RestartConfig:
    """How a supervised query is restarted: the ``strategy``, and how many snapshot
    failures in a row (failed commits, counted apart from task failures) end the job
    whatever the strategy allows (``tolerable_snapshot_failures``; None: no limit of
    their own, they count as failures of the strategy only)."""

    strategy: Strategy = field(default_factory=NoRestart)
    tolerable_snapshot_failures: int | None = None

    def __post_init__(self) -> None:
        _check(self)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> RestartConfig:
        """The restart settings among ``options`` (other keys are ignored: a job's
        settings hold its source's and sink's too). Raises
        :class:`~spark_chkpt.errors.ConfigError` naming the option."""
        mine = {
            k.strip().lower(): str(v).strip()
            for k, v in options.items()
            if k.strip().lower().startswith(PREFIX) or k.strip().lower() == TOLERABLE
        }
        raw_type = mine.pop(TYPE, "none")
        kind = _TYPES.get(raw_type.lower().strip())
        if kind is None:
            raise ConfigError(
                TYPE, raw_type, "one of none, fixed-delay, exponential-delay, failure-rate"
            )
        tolerable = parse_positive_int(TOLERABLE, mine.pop(TOLERABLE, None), allow_zero=True)
        strategy = _STRATEGIES[kind](_Keys(mine, f"{PREFIX}{kind}."))
        for key in sorted(mine):
            if any(key in names for names in _KNOWN.values()):
                log.warning("%s is ignored: %s is %s", key, TYPE, kind)
                continue
            known = ", ".join(sorted(_KNOWN[kind])) or "none: it takes no settings"
            raise ConfigError(key, mine[key], f"not a setting of {TYPE}={kind} (known: {known})")
        return cls(strategy=strategy, tolerable_snapshot_failures=tolerable)

    def describe(self) -> str:
        """One line for the log: the strategy and its settings."""
        s = self.strategy
        if isinstance(s, FixedDelay):
            text = f"fixed-delay: {s.attempts} attempt(s), {s.delay_ms} ms apart"
        elif isinstance(s, ExponentialDelay):
            limit = "unlimited" if s.attempts is None else str(s.attempts)
            text = (
                f"exponential-delay: {s.initial_backoff_ms} ms x {s.multiplier} up to "
                f"{s.max_backoff_ms} ms (jitter {s.jitter}), reset after "
                f"{s.reset_backoff_threshold_ms} ms healthy, {limit} attempt(s)"
            )
        elif isinstance(s, FailureRate):
            text = (
                f"failure-rate: at most {s.max_failures_per_interval} failure(s) per "
                f"{s.interval_ms} ms, {s.delay_ms} ms apart"
            )
        else:
            text = "none"
        if self.tolerable_snapshot_failures is not None:
            text += f"; tolerable snapshot failures {self.tolerable_snapshot_failures}"
        return text


class _Keys:
    """Takes one strategy's keys out of the settings, so those left over are unknown."""

    def __init__(self, settings: dict[str, str], prefix: str) -> None:
        self.settings, self.prefix = settings, prefix

    def pop(self, name: str) -> tuple[str, str | None]:
        key = self.prefix + name
        return key, self.settings.pop(key, None)


def _int(keys: _Keys, name: str, default: int) -> int:
    key, raw = keys.pop(name)
    value = parse_positive_int(key, raw, default=default)
    return default if value is None else value


def _ms(keys: _Keys, name: str, default_ms: int) -> int:
    key, raw = keys.pop(name)
    return parse_duration_ms(key, raw, default_ms=default_ms)


def _float(keys: _Keys, name: str, default: float, *, low: float, high: float | None) -> float:
    key, raw = keys.pop(name)
    if raw is None:
        return default
    allowed = f"a number from {low}" + (f" to {high}" if high is not None else " up")
    try:
        value = float(raw)
    except ValueError as e:
        raise ConfigError(key, raw, allowed) from e
    if value < low or (high is not None and value > high):
        raise ConfigError(key, raw, allowed)
    return value


def _none(keys: _Keys) -> Strategy:
    return NoRestart()


def _fixed(keys: _Keys) -> Strategy:
    return FixedDelay(attempts=_int(keys, "attempts", 1), delay_ms=_ms(keys, "delay", 1000))


def _exponential(keys: _Keys) -> Strategy:
    key, raw = keys.pop("attempts-before-reset-backoff")
    return ExponentialDelay(
        initial_backoff_ms=_ms(keys, "initial-backoff", 1000),
        max_backoff_ms=_ms(keys, "max-backoff", 60_000),
        multiplier=_float(keys, "backoff-multiplier", 1.5, low=1.0, high=None),
        jitter=_float(keys, "jitter-factor", 0.1, low=0.0, high=1.0),
        reset_backoff_threshold_ms=_ms(keys, "reset-backoff-threshold", 3_600_000),
        attempts=parse_positive_int(key, raw),
    )


def _failure_rate(keys: _Keys) -> Strategy:
    return FailureRate(
        max_failures_per_interval=_int(keys, "max-failures-per-interval", 1),
        interval_ms=_ms(keys, "failure-rate-interval", 60_000),
        delay_ms=_ms(keys, "delay", 1000),
    )


_STRATEGIES = {
    "none": _none,
    "fixed-delay": _fixed,
    "exponential-delay": _exponential,
    "failure-rate": _failure_rate,
}
_KNOWN: dict[str, set[str]] = {
    "none": set(),
    "fixed-delay": {f"{PREFIX}fixed-delay.{k}" for k in ("attempts", "delay")},
    "exponential-delay": {
        f"{PREFIX}exponential-delay.{k}"
        for k in (
            "initial-backoff",
            "max-backoff",
            "backoff-multiplier",
            "jitter-factor",
            "reset-backoff-threshold",
            "attempts-before-reset-backoff",
        )
    },
    "failure-rate": {
        f"{PREFIX}failure-rate.{k}"
        for k in ("max-failures-per-interval", "failure-rate-interval", "delay")
    },
}


def _check(config: RestartConfig) -> None:
    """Settings that each parse but disagree, or a config built in code out of range."""
    s = config.strategy
    if config.tolerable_snapshot_failures is not None and config.tolerable_snapshot_failures < 0:
        raise ConfigError(TOLERABLE, config.tolerable_snapshot_failures, "must be 0 or more")
    if isinstance(s, ExponentialDelay) and s.initial_backoff_ms > s.max_backoff_ms:
        raise ConfigError(
            f"{PREFIX}exponential-delay.initial-backoff",
            f"{s.initial_backoff_ms} ms",
            f"must not exceed {PREFIX}exponential-delay.max-backoff ({s.max_backoff_ms} ms)",
        )
    if isinstance(s, FixedDelay) and s.attempts < 1:
        raise ConfigError(f"{PREFIX}fixed-delay.attempts", s.attempts, "must be greater than 0")
    if isinstance(s, FailureRate) and s.interval_ms <= 0:
        raise ConfigError(
            f"{PREFIX}failure-rate.failure-rate-interval", s.interval_ms, "must be greater than 0"
        )
