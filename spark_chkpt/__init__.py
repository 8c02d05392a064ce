"""spark-chkpt: Flink-style aligned snapshots for PySpark Structured Streaming.

``register(spark)`` makes every format of the project available to a SparkSession:
``chkpt-kafka`` (source and sink) and ``chkpt-delta`` (sink). It also points Spark's
Python workers at an interpreter that can import this package (see
:mod:`spark_chkpt.runtime.interpreter`). Importing the package registers an exit hook that lets
pyarrow's thread pools finish before the interpreter finalizes (see
:mod:`spark_chkpt.runtime.teardown`), so scripts that read tables exit 0.

``spark_chkpt.DeltaUpsert`` (exactly-once upserts from ``foreachBatch``, see
:mod:`spark_chkpt.delta.upsert.front`) is imported on first use, so importing the package
stays light (no pyspark, pyarrow or deltalake). So are ``spark_chkpt.run_supervised``,
``RestartConfig`` and ``ExitCode``: a query restarted from its checkpoint by a Flink-style
restart strategy (see :mod:`spark_chkpt.restart`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_chkpt.errors import ChkptError, ConfigError, DataLossError, WorkerPythonError
from spark_chkpt.runtime import teardown
from spark_chkpt.version import __version__

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_chkpt.delta.upsert.front import DeltaUpsert
    from spark_chkpt.restart import ExitCode, RestartConfig, run_supervised

__all__ = [
    "ChkptError",
    "ConfigError",
    "DataLossError",
    "DeltaUpsert",
    "ExitCode",
    "RestartConfig",
    "WorkerPythonError",
    "__version__",
    "register",
    "run_supervised",
]

teardown.install()


def __getattr__(name: str) -> Any:
    """``spark_chkpt.DeltaUpsert`` and the supervisor's names, imported when first used."""
    if name == "DeltaUpsert":
        from spark_chkpt.delta.upsert.front import DeltaUpsert

        return DeltaUpsert
    if name in ("run_supervised", "RestartConfig", "ExitCode"):
        from spark_chkpt import restart

        return getattr(restart, name)
    raise AttributeError(f"module 'spark_chkpt' has no attribute {name!r}")


def register(spark: SparkSession) -> list[str]:
    """Register every spark-chkpt format with ``spark``, and the format of every sink
    plugin (entry point group ``spark_chkpt.sinks``); returns the format names.

    Raises :class:`WorkerPythonError` when the interpreter Spark's Python workers would
    run cannot import this package, naming the interpreter, the setting and the fix. On
    Spark Connect, whose server chose that interpreter, a one-row Python UDF asks it.
    """
    from spark_chkpt.runtime.connect import check_server_python, is_connect
    from spark_chkpt.runtime.interpreter import choose_worker_python
    from spark_chkpt.runtime.report import explain_stopped_commit, install_excepthook

    connect = is_connect(spark)
    if connect:
        check_server_python(spark)
    else:
        choose_worker_python(spark)
    from spark_chkpt.runtime.session_defaults import apply_register_defaults

    apply_register_defaults(spark)
    install_excepthook()  # Spark's "failed to connect back" explained first
    if not connect:  # query.stop() during a commit: one line, no traceback
        explain_stopped_commit(spark)
    from spark_chkpt.metrics.reporter import arm_commit_log_failpoint

    arm_commit_log_failpoint(spark)  # fault tests: SPARK_CHKPT_KILL_AT=after-commit-log@N
    from spark_chkpt.delta.table.catalog import install_table_option

    install_table_option()  # chkpt-delta's option("table", "db.events") and toTable
    from spark_chkpt.connectors import DATA_SOURCES, KafkaDataSource
    from spark_chkpt.runtime.spark_version import install_available_now_handoff

    # before Spark 4.2: Trigger.AvailableNow's one batch takes everything
    install_available_now_handoff(source=KafkaDataSource.name())

    from spark_chkpt.sinks import plugin_data_sources

    slots = None if connect else _task_slots(spark)
    speculation = False if connect else _speculation(spark)
    sources = [*DATA_SOURCES, *plugin_data_sources()]  # the sink plugins' formats too
    for source in sources:
        if source is KafkaDataSource:
            source = KafkaDataSource.for_session(task_slots=slots, speculation=speculation)
        spark.dataSource.register(source)
    return [source.name() for source in sources]


def _speculation(spark: SparkSession) -> bool:
    """``spark.speculation`` of ``spark``'s SparkContext (fixed when it starts); not
    asked on Spark Connect, which has no SparkContext (False)."""
    context = spark.sparkContext
    return (context.getConf().get("spark.speculation") or "false").strip().lower() == "true"


def _task_slots(spark: SparkSession) -> int | None:
    """How many tasks ``spark`` runs at once, when that is known at registration:
    ``spark.default.parallelism`` if set, else the cores of a ``local`` master.
    ``chkpt-kafka`` then reads a batch in at most that many tasks (one wave per batch).
    On a cluster, executors may not have registered yet, and Spark Connect has no
    SparkContext to ask: None, one partition per task."""
    context = spark.sparkContext
    configured = context.getConf().get("spark.default.parallelism")
    if configured:
        return int(configured)
    master = context.master or ""
    if master == "local" or master.startswith("local["):
        return int(context.defaultParallelism)
    return None
