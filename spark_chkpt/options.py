"""Parsing of option values, shared by every connector: one error style.

Spark hands every option as a string. These helpers turn one value into a typed one or
raise :class:`~spark_chkpt.errors.ConfigError` naming the option, the value and what is
allowed, so ``option 'maxOffsetsPerTrigger' = 'lots': must be a whole number`` reads the
same whichever connector parsed it. Each connector's option class (``kafka.source_options``,
``kafka.sink_options``, ``delta.sink_options``) uses them in its ``from_options``.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_chkpt.errors import ConfigError, UnknownOptionError

log = logging.getLogger(__name__)


def lowercase(options: Mapping[str, str]) -> dict[str, str]:
    """Spark's options with lower-cased keys (Spark treats option names case-insensitively)."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


# How close an unknown option name must be to a known one (difflib's ratio, on the
# lower-cased names) to be taken for a typo of it and refused: ``subscibe`` and
# ``maxOffsetPerTrigger`` score 0.94 and 0.97; unrelated names stay far below.
CLOSE_MATCH_CUTOFF = 0.8


def _ratio(given: str, known: str) -> float:
    return difflib.SequenceMatcher(None, given.lower(), known).ratio()


def check_option_names(
    options: Iterable[str],
    *,
    known: Iterable[str],
    connector: str,
    prefixes: tuple[str, ...] = (),
) -> None:
    """Refuse option names close to a known one; warn once about the others.

    ``known``: the format's option names as documented (``maxOffsetsPerTrigger``). An
    unknown name whose lower-cased form is close to a known one's (difflib,
    :data:`CLOSE_MATCH_CUTOFF`) raises :class:`~spark_chkpt.errors.UnknownOptionError`
    naming both; names far from every known one are logged in one warning (Spark passes
    some options of its own). Names under ``prefixes`` (``kafka.``) are checked where
    they are parsed. Names are reported as given: Spark hands them lower-cased."""
    documented = {name.lower(): name for name in known}
    unknown = sorted(
        k for k in options if k.lower() not in documented and not k.lower().startswith(prefixes)
    )
    suggestions: dict[str, list[str]] = {}
    for name in unknown:
        close = difflib.get_close_matches(
            name.lower(), list(documented), n=3, cutoff=CLOSE_MATCH_CUTOFF
        )
        if close:  # the closest, and any as close (maxOffset... is near min... too)
            best = _ratio(name, close[0])
            suggestions[name] = [documented[c] for c in close if _ratio(name, c) >= best]
    if suggestions:
        raise UnknownOptionError(connector=connector, suggestions=suggestions)
    if unknown:
        log.warning("%s ignores unknown option(s): %s", connector, ", ".join(unknown))


def parse_bool(option: str, raw: str | None, *, default: bool | None = None) -> bool:
    if raw is None:
        if default is None:
            raise ConfigError(option, raw, "required: true or false")
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ConfigError(option, raw, "must be true or false")


def parse_positive_int(
    option: str, raw: str | None, *, default: int | None = None, allow_zero: bool = False
) -> int | None:
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError as e:
        raise ConfigError(option, raw, "must be a whole number") from e
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(option, raw, "must be greater than 0")
    return value


_UNITS = {
    1: ("ms", "milli", "millis", "millisecond", "milliseconds"),
    1000: ("s", "sec", "secs", "second", "seconds"),
    60_000: ("m", "min", "mins", "minute", "minutes"),
    3_600_000: ("h", "hour", "hours"),
    86_400_000: ("d", "day", "days"),
}
_UNIT_MS = {name: ms for ms, names in _UNITS.items() for name in names}
_DURATION = re.compile(
    r"^\s*(\d+)\s*(" + "|".join(sorted(_UNIT_MS, key=len, reverse=True)) + r")?\s*$",
    re.IGNORECASE,
)


def parse_duration_ms(option: str, raw: str | None, *, default_ms: int) -> int:
    """Spark- and Flink-style durations: ``100ms``, ``30s``, ``10 s``, ``15 min``, ``1h``,
    ``2 minutes``; a bare number is ms."""
    if raw is None:
        return default_ms
    match = _DURATION.match(raw)
    if not match:
        raise ConfigError(option, raw, "must be a duration such as 500ms, 30s, 15m or 1h")
    amount, unit = match.groups()
    return int(amount) * _UNIT_MS[(unit or "ms").lower()]


def parse_size(option: str, raw: str | None, *, default: int) -> int:
    if raw is None:
        return default
    match = re.match(r"^\s*(\d+)\s*([kmg]?)b?\s*$", raw, re.IGNORECASE)
    if not match:
        raise ConfigError(option, raw, "a size such as 134217728, 128m or 1g")
    amount, unit = match.groups()
    size = int(amount) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit.lower()]
    if size <= 0:
        raise ConfigError(option, raw, "must be greater than 0")
    return size


# The sinks' snapshot timing options (chkpt-delta, chkpt-kafka; DeltaUpsert's arguments
# snapshot_timeout and min_pause_between_snapshots), Flink's checkpoint timeout and min
# pause between checkpoints.
SNAPSHOT_TIMEOUT = "snapshotTimeout"
MIN_PAUSE = "minPauseBetweenSnapshots"
SNAPSHOT_TIMING_OPTIONS = (SNAPSHOT_TIMEOUT, MIN_PAUSE)


@dataclass(frozen=True)
class SnapshotTiming:
    """When a sink's snapshot gives up, and how long it keeps the next batch waiting.

    ``timeout_ms`` (``snapshotTimeout``; None: no timeout): a commit (phase 2) still
    short of making the batch visible that long after it began fails the batch with
    :class:`~spark_chkpt.errors.SnapshotTimeoutError`. ``min_pause_ms``
    (``minPauseBetweenSnapshots``): the commit returns only that long after the snapshot
    completed, so Spark plans the next batch no sooner. See
    :class:`spark_chkpt.snapshot.coordinator.SnapshotCoordinator`."""

    timeout_ms: int | None = None
    min_pause_ms: int = 0

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], *, names: tuple[str, str] = SNAPSHOT_TIMING_OPTIONS
    ) -> SnapshotTiming:
        """Both settings from Spark's lower-cased ``options`` (``names``: how the caller
        calls them, for the error)."""
        timeout_name, pause_name = names
        raw_timeout = options.get(timeout_name.lower())
        timeout: int | None = None
        if raw_timeout is not None and raw_timeout.strip():
            timeout = parse_duration_ms(timeout_name, raw_timeout, default_ms=0)
            if timeout <= 0:
                raise ConfigError(
                    timeout_name,
                    raw_timeout,
                    "must be a duration greater than 0, such as 60s (leave it unset for no "
                    "timeout)",
                )
        pause = parse_duration_ms(pause_name, options.get(pause_name.lower()), default_ms=0)
        return cls(timeout_ms=timeout, min_pause_ms=pause)
