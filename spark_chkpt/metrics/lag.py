"""Lag where Spark users look: offsets behind the latest, per source and per partition.

More: docs/concepts/runtime.md (spark_chkpt/metrics/lag.py).
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming import StreamingQueryListener

from spark_chkpt.offsets import META_KEY

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("spark_chkpt.progress")

PROGRESS_LOG_CONF = "spark.chkpt.progressLog"


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` prints it (how Spark's Kafka source prints
    ``avgOffsetsBehindLatest``): the shortest digits that read back as ``value``, plain
    from 10^-3 up to 10^7 (always a digit after the point: ``5.0``), else computerized
    scientific notation (``1.25E7``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Python's repr: the same shortest digits, plain in this range
    digits = next(
        text for precision in range(17) if float(text := f"{value:.{precision}e}") == value
    )
    mantissa, _, exponent = digits.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}E{int(exponent)}"


def spark_average(value: float) -> str:
    """``avgOffsetsBehindLatest`` as Spark's progress prints it: :func:`java_double`'s
    text rounded half up to one decimal (``4500.25`` -> ``4500.3``)."""
    if not math.isfinite(value):
        return java_double(value)
    return str(Decimal(java_double(value)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


@dataclass(frozen=True)
class SourceLag:
    """One source's lag in one progress: offsets behind the latest, per ``topic-partition``.

    ``source``: a label that stays the same across batches and runs (the query's name or
    id, and the topics); ``description``: Spark's own description of the source."""

    source: str
    partitions: Mapping[str, int]
    description: str = ""

    @property
    def max(self) -> int:
        return max(self.partitions.values(), default=0)

    @property
    def min(self) -> int:
        return min(self.partitions.values(), default=0)

    @property
    def avg(self) -> float:
        return sum(self.partitions.values()) / len(self.partitions) if self.partitions else 0.0

    @property
    def behind(self) -> int:
        """Offsets behind in all (an upper bound on records: transaction markers and
        barriers take offsets too)."""
        return sum(self.partitions.values())

    def describe(self) -> str:
        worst = max(self.partitions, key=lambda tp: self.partitions[tp], default="-")
        return (
            f"lag {self.behind} offsets over {len(self.partitions)} partitions "
            f"(max {self.max} at {worst}, avg {spark_average(self.avg)}, min {self.min})"
        )

    def metrics(self) -> dict[str, str]:
        """The figures under Spark's own Kafka source's metric names (strings, as Spark
        reports ``sources[i].metrics``)."""
        return {
            "avgOffsetsBehindLatest": spark_average(self.avg),
            "maxOffsetsBehindLatest": str(self.max),
            "minOffsetsBehindLatest": str(self.min),
        }


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _partition_offsets(text: Any) -> dict[str, int] | None:
    """``{"topic-p": offset}`` from a Kafka-shaped offset JSON, or None for any other."""
    try:
        doc = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    if not isinstance(doc, Mapping):
        return None
    found: dict[str, int] = {}
    for topic, partitions in doc.items():
        if topic == META_KEY:
            continue
        if not isinstance(partitions, Mapping):
            return None
        for partition, offset in partitions.items():
            if not str(partition).lstrip("-").isdigit() or not isinstance(offset, int):
                return None
            found[f"{topic}-{partition}"] = offset
    return found


def _topics(text: Any) -> list[str]:
    try:
        doc = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return []
    return sorted(t for t in doc if t != META_KEY) if isinstance(doc, Mapping) else []


def source_label(progress: Any, topics: list[str]) -> str:
    """A label for one source of ``progress`` that dashboards can keep: the query's name
    (its id if it has none) and the topics it read, ``name[topic,topic]``."""
    query = _field(progress, "name") or _field(progress, "id") or "query"
    return f"{query}[{','.join(topics)}]"


def source_lags(progress: Any) -> list[SourceLag]:
    """Each Kafka-shaped source's lag in ``progress`` (sources without a ``latestOffset``
    or with other offsets are left out)."""
    lags = []
    labels: dict[str, int] = {}
    for source in _field(progress, "sources") or ():
        latest = _partition_offsets(_field(source, "latestOffset"))
        if not latest:
            continue
        end = _partition_offsets(_field(source, "endOffset")) or {}
        # Spark's offsets for "earliest"/"latest" are negative sentinels: no lag known.
        behind = {tp: max(0, off - max(0, end.get(tp, 0))) for tp, off in latest.items()}
        label = source_label(progress, _topics(_field(source, "latestOffset")))
        labels[label] = labels.get(label, 0) + 1
        if labels[label] > 1:  # two sources of one query on the same topics
            label = f"{label}#{labels[label]}"
        lags.append(
            SourceLag(
                source=label,
                partitions=behind,
                description=str(_field(source, "description")),
            )
        )
    return lags


def describe(progress: Any, lags: list[SourceLag]) -> str:
    """One line: the query, the batch, its rows and rate, and each source's lag."""
    name = _field(progress, "name") or _field(progress, "id")
    rows = _field(progress, "numInputRows") or 0
    rate = _field(progress, "processedRowsPerSecond") or 0.0
    head = f"chkpt {name} batch {_field(progress, 'batchId')}: {rows} rows ({rate:.0f}/s)"
    return "; ".join([head, *(lag.describe() for lag in lags)])


def detach_at_exit(spark: SparkSession, listener: StreamingQueryListener) -> None:
    """At interpreter exit, let Spark deliver the events still queued for ``listener``
    (at most 10 s), then remove it.

    Spark posts progress events to listeners asynchronously. A script whose last query
    just ended (``availableNow``) exits before its last events reach a Python listener,
    and the JVM, calling back into a process that is gone, printed
    ``Py4JNetworkException ... Connection refused`` stack traces after the script's
    output (and the last batch's line was lost)."""
    import atexit

    from spark_chkpt.runtime.connect import is_connect

    connect = is_connect(spark)

    def flush() -> None:
        try:
            if not connect:  # Spark Connect: the events come over gRPC, no bus here
                bus = spark.sparkContext._jsc.sc().listenerBus()
                bus.waitUntilEmpty(10_000)
        except Exception:  # a stopped context: nothing to wait for
            log.debug("listener bus not drained at exit", exc_info=True)
        try:
            spark.streams.removeListener(listener)
        except Exception:
            log.debug("listener not removed at exit", exc_info=True)

    atexit.register(flush)


def progress_log_on(spark: SparkSession) -> bool:
    """False when the session's ``spark.chkpt.progressLog`` is ``false``."""
    try:
        setting = spark.conf.get(PROGRESS_LOG_CONF, "true")
    except Exception:  # a conf that cannot be read leaves the default
        return True
    return str(setting or "true").strip().lower() != "false"


def line_printer(stream: Any = None) -> Callable[[str], None]:
    """Print a line on ``stream`` (standard error) through a handler of its own, so it
    shows whatever the application's logging configuration."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))

    def emit(line: str) -> None:
        handler.handle(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))

    return emit


def progress_bar(progress: Any, lags: list[SourceLag], *, read: int, width: int = 30) -> str:
    """A terminal line rewritten in place: ``read`` records of ``read`` + the lag, as a
    bar; a newline once nothing is left (the run is done, or the query caught up)."""
    behind = sum(lag.behind for lag in lags)
    total = read + behind
    done = width if total == 0 else round(width * read / total)
    name = _field(progress, "name") or _field(progress, "id")
    percent = 100 if total == 0 else 100 * read // total
    line = (
        f"\rchkpt {name} [{'#' * done}{'.' * (width - done)}] {read}/{total} records "
        f"({percent}%), batch {_field(progress, 'batchId')}"
    )
    return line + ("\n" if behind == 0 else "")


class LagReporter(StreamingQueryListener):
    """One line per batch of each query with a Kafka-shaped source that reports its
    latest offsets (``chkpt-kafka``), and the latest figures by query id in ``latest``.

    ``LagReporter.attach(spark)``: the one line to add where :class:`SnapshotReporter`
    (which prints the same figures in its snapshot line) is not used.

    On a terminal the lines become a progress bar per query, rewritten in place: records
    read of records to read (read so far plus the lag), which is the whole run of an
    ``availableNow`` query, whose latest offsets are the end it stops at. Not on a
    terminal (a log file, a notebook, a job's output), one line per batch as above."""

    def __init__(self, *, stream: Any = None, bar: bool | None = None) -> None:
        self.latest: dict[str, list[SourceLag]] = {}
        self._stream = stream or sys.stderr
        self._print = line_printer(self._stream)
        if bar is None:
            isatty = getattr(self._stream, "isatty", None)
            bar = bool(isatty()) if callable(isatty) else False
        self._bar = bar
        self._read: dict[str, int] = {}  # rows each query has read since this reporter began

    @classmethod
    def attach(cls, spark: SparkSession) -> LagReporter | None:
        """Add a reporter to ``spark`` unless ``spark.chkpt.progressLog`` is ``false``."""
        if not progress_log_on(spark):
            return None
        reporter = cls()
        spark.streams.addListener(reporter)
        detach_at_exit(spark, reporter)
        return reporter

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = event.progress
            lags = source_lags(progress)
            if not lags:
                return
            query = str(_field(progress, "id"))
            self.latest[query] = lags
            if self._bar:
                self._read[query] = self._read.get(query, 0) + int(
                    _field(progress, "numInputRows") or 0
                )
                self._stream.write(progress_bar(progress, lags, read=self._read[query]))
                self._stream.flush()
            else:
                self._print(describe(progress, lags))
        except Exception:  # a listener must never take the query down
            log.debug("lag line not printed", exc_info=True)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
