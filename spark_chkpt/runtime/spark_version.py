"""The Spark lines the project supports, and what each one's Python DataSource API lacks.

Every check of the running Spark's version lives here: the connectors ask
:func:`has_stream_arrow_writer` and :func:`has_admission_control` and import Spark's
classes through :func:`stream_writer_base` and :func:`read_limits`; the JVM step asks
:func:`connector_coordinates` for the Maven artifacts built for the line;
``docs/reference/spark-versions.md`` is the table of :data:`LINES`, checked by
``tests/project/test_spark_versions.py`` against the Makefile's list of Spark lines.

More: docs/reference/spark-versions.md (spark_chkpt/runtime/spark_version.py).
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SparkLine:
    """One supported Spark line (``4.0``): the pyspark CI runs it on, the Databricks
    runtime that ships it, and the Maven artifacts built for it."""

    line: str
    pyspark: str
    databricks: str
    kafka_connector: str  # org.apache.spark:spark-sql-kafka-0-10_2.13
    delta_spark: str  # io.delta:<artifact>:4.4.0, Spark's Delta reader


DELTA_SPARK_VERSION = "4.4.0"
# The jars each line gets (December 2026): Spark's Kafka connector at a release whose
# dependencies all resolved from Maven Central here (4.0.0, 4.1.1); neither it nor
# delta-spark is published for 4.3 yet, so 4.3 gets the 4.2 builds (no CI test loads
# them on 4.3: the formats need neither jar).
LINES: tuple[SparkLine, ...] = (
    SparkLine("4.0", "4.0.5", "17.3 LTS (Spark 4.0.0)", "4.0.0", "delta-spark_4.0_2.13"),
    SparkLine("4.1", "4.1.4", "18 LTS (Spark 4.1.0)", "4.1.1", "delta-spark_4.1_2.13"),
    SparkLine("4.2", "4.2.0", "19 (Spark 4.2.0)", "4.2.0", "delta-spark_4.2_2.13"),
    SparkLine("4.3", "4.3.0", "none yet", "4.2.0", "delta-spark_4.2_2.13"),
)


def version_tuple(version: str) -> tuple[int, int]:
    """``(4, 1)`` of ``"4.1.4"`` (or of ``"4.1.0-preview2"``)."""
    major, minor = version.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


@functools.cache
def running() -> str:
    """The version of the pyspark imported here (``"4.0.5"``)."""
    import pyspark

    return str(pyspark.__version__)


def running_line() -> SparkLine:
    """The supported line of the running pyspark; an unknown newer 4.x counts as the
    newest line, an older one as the oldest."""
    major_minor = version_tuple(running())
    for line in LINES:
        if version_tuple(line.line) == major_minor:
            return line
    return LINES[-1] if major_minor > version_tuple(LINES[-1].line) else LINES[0]


def at_least(major: int, minor: int) -> bool:
    return version_tuple(running()) >= (major, minor)


def has_stream_arrow_writer() -> bool:
    """``DataSourceStreamArrowWriter`` (Spark 4.1): a streaming sink's ``write`` gets
    Arrow batches. On 4.0 Spark's write worker hands Arrow batches to any writer that is
    a ``DataSourceArrowWriter``, streaming or not; the sink's base class is both."""
    return at_least(4, 1)


def has_admission_control() -> bool:
    """``pyspark.sql.streaming.datasource`` (Spark 4.2): ``latestOffset(start, limit)``,
    ``getDefaultReadLimit`` and ``SupportsTriggerAvailableNow``. Before it, Spark asks a
    Python source ``latestOffset()`` alone, and runs ``Trigger.AvailableNow`` as one batch
    up to the end the source gives once."""
    return at_least(4, 2)


def stream_writer_base() -> type:
    """The base class of the sinks' stream writers on the running Spark: Arrow batches
    into ``write`` on every supported line."""
    if has_stream_arrow_writer():
        from pyspark.sql.datasource import DataSourceStreamArrowWriter

        return DataSourceStreamArrowWriter
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter

    class ArrowStreamWriter(DataSourceStreamWriter, DataSourceArrowWriter):  # type: ignore[misc]
        """Spark 4.0's stream writer that Spark's write worker hands Arrow batches."""

    return ArrowStreamWriter


def spark_class(name: str) -> str:
    """A Spark class as the running line names it: Spark 4.1 moved the streaming
    checkpoint file managers into ``...execution.streaming.checkpointing``."""
    if at_least(4, 1):
        return name
    return name.replace(".execution.streaming.checkpointing.", ".execution.streaming.")


def arrow_schema(schema: Any) -> Any:
    """Spark's Arrow form of a ``StructType``, timestamps in UTC (Spark 4.2 asks
    ``timezone="UTC"``, 4.0 and 4.1 ``timestamp_utc=True``: the same schema)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if at_least(4, 2):
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema, timestamp_utc=True)  # type: ignore[call-arg]


def read_limits() -> dict[str, Any]:
    """Spark's ``ReadLimit`` classes and ``SupportsTriggerAvailableNow`` where Spark has
    them; empty before 4.2 (the source then reads its limit from its own options)."""
    if not has_admission_control():
        return {}
    from pyspark.sql.streaming import datasource

    return {
        name: getattr(datasource, name)
        for name in ("ReadAllAvailable", "ReadLimit", "ReadMaxRows", "SupportsTriggerAvailableNow")
    }


def connector_coordinates(line: SparkLine | None = None) -> dict[str, str]:
    """The Maven properties of ``jvm/spark-connectors/pom.xml`` for a line (the running
    one by default): Spark's Kafka connector and delta-spark built for it."""
    chosen = line or running_line()
    return {
        "spark.kafka.version": chosen.kafka_connector,
        "delta.spark.artifact": chosen.delta_spark,
        "delta.spark.version": DELTA_SPARK_VERSION,
    }


def require_admission_control(option: str, value: object) -> None:
    """Refuse an option only Spark 4.2's admission control can honour, naming the running
    Spark (minOffsetsPerTrigger: before 4.2 Spark gives a Python source no read limit,
    so it cannot tell a trigger to wait from the one batch of Trigger.AvailableNow)."""
    if value is not None and not has_admission_control():
        from spark_chkpt.errors import ConfigError

        raise ConfigError(
            option,
            value,
            f"needs Spark 4.2 or newer; Spark {running()} gives a Python source no read "
            "limit (docs/reference/spark-versions.md): remove the option or run Spark 4.2+",
        )


# Trigger.AvailableNow before Spark 4.2: a hand-off from DataStreamWriter.start() (the
# driver's Python) to the query's chkpt-kafka readers (Spark's source runner, a Python
# process the driver's JVM starts on the same machine): a file per source, named after
# its options, claimed once by the reader that plans the query's one batch.
_HANDOFF = "spark-chkpt-available-now"
_HANDOFF_SECONDS = 600  # a query's readers start within seconds of start()
_ONE_BATCH_TRIGGERS = frozenset({"availableNow", "once"})


def options_key(options: Mapping[str, str]) -> str:
    """One source's options as a file name (names lower-cased, as Spark hands them)."""
    text = "\n".join(
        f"{k.lower()}={v}" for k, v in sorted((k.lower(), v) for k, v in options.items())
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _handoff_file(key: str) -> Path:
    return Path(tempfile.gettempdir()) / _HANDOFF / key


def claim_available_now(options: Mapping[str, str]) -> bool:
    """Whether the query this source's reader serves was started with a one-batch
    trigger (``availableNow``, ``once``) on a Spark without admission control: its one
    batch then takes everything, not ``maxOffsetsPerTrigger``. Claimed once."""
    path = _handoff_file(options_key(options))
    try:
        fresh = time.time() - path.stat().st_mtime < _HANDOFF_SECONDS
        path.unlink()
    except OSError:
        return False
    return fresh


def _hand_off(writer: Any, source: str) -> None:
    """At start(): a file for each ``source`` of the writer's query (classic PySpark:
    the sources' options read from the JVM's logical plan)."""
    plan = writer._df._jdf.queryExecution().logical()
    pending = [plan]
    while pending:
        node = pending.pop()
        if node.nodeName() == "StreamingRelationV2" and str(node.sourceName()).lower() == source:
            options = dict(node.extraOptions().asCaseSensitiveMap())
            path = _handoff_file(options_key(options))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{os.getpid()}\n")
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))


def install_available_now_handoff(*, source: str) -> None:
    """Before Spark 4.2: make ``DataStreamWriter.start()`` / ``toTable()`` of a query
    with ``trigger(availableNow=True)`` or ``trigger(once=True)`` tell its readers of
    format ``source`` (:func:`claim_available_now`). Installed once, on classic PySpark."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    if has_admission_control() or getattr(DataStreamWriter, "_spark_chkpt_handoff", False):
        return
    original_trigger = DataStreamWriter.trigger
    original_start = DataStreamWriter.start
    original_to_table = DataStreamWriter.toTable

    @functools.wraps(original_trigger)
    def trigger(self: Any, *args: Any, **kwargs: Any) -> Any:
        chosen = {k for k, v in kwargs.items() if v not in (None, False)}
        self.__dict__["_chkpt_one_batch"] = bool(chosen & _ONE_BATCH_TRIGGERS)
        return original_trigger(self, *args, **kwargs)

    def starting(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.__dict__.get("_chkpt_one_batch") and hasattr(self._df, "_jdf"):
                _hand_off(self, source)
            return method(self, *args, **kwargs)

        return wrapped

    DataStreamWriter.trigger = trigger  # type: ignore[method-assign]
    DataStreamWriter.start = starting(original_start)  # type: ignore[method-assign]
    DataStreamWriter.toTable = starting(original_to_table)  # type: ignore[method-assign]
    DataStreamWriter._spark_chkpt_handoff = True  # type: ignore[attr-defined]
