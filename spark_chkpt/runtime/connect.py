"""Spark Connect sessions: told apart from classic ones, and their server's Python checked.

A Spark Connect client (``SparkSession.builder.remote("sc://...")``, Databricks
serverless compute and standard-access-mode clusters) has no SparkContext and no JVM:
``spark.sparkContext``, ``_jvm``, ``_jsc`` and ``_jdf`` raise
``JVM_ATTRIBUTE_NOT_SUPPORTED``. The server's Python workers run an interpreter the
server chose (its ``PYSPARK_PYTHON``), which the client cannot see or choose, so
``register()`` asks one: :func:`check_server_python` runs a one-row Python UDF that
imports spark_chkpt in a worker and names the interpreter that could not.

More: docs/concepts/runtime.md (spark_chkpt/runtime/connect.py).
"""

from __future__ import annotations

import logging
from typing import Any

from spark_chkpt.errors import WorkerPythonError
from spark_chkpt.version import __version__

log = logging.getLogger(__name__)

# Defined from source in a namespace of its own, so cloudpickle sends the function by
# value: a function of an importable module would be unpickled by importing
# spark_chkpt in the worker, the very thing the probe must report, not fail on.
_PROBE_SOURCE = """
def probe(_):
    import sys
    try:
        import importlib.util
        import spark_chkpt
        if importlib.util.find_spec("spark_chkpt.connectors") is None:
            raise ModuleNotFoundError("No module named 'spark_chkpt.connectors'")
        return sys.executable + "\\t" + spark_chkpt.__version__ + "\\t"
    except Exception as e:
        return sys.executable + "\\t\\t" + type(e).__name__ + ": " + str(e)
"""
_checked: set[str] = set()  # session ids whose server passed the probe


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session, or a query or DataFrame of one (no
    SparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _probe() -> Any:
    namespace: dict[str, Any] = {"__name__": "spark_chkpt_connect_probe"}
    exec(compile(_PROBE_SOURCE, "<spark-chkpt probe>", "exec"), namespace)
    return namespace["probe"]


def check_server_python(spark: Any) -> None:
    """Raise :class:`WorkerPythonError` unless the Python workers of ``spark``'s Spark
    Connect server import this spark_chkpt (once per session)."""
    session_id = str(getattr(spark, "session_id", id(spark)))
    if session_id in _checked:
        return
    from pyspark.sql.connect.functions import col, udf
    from pyspark.sql.types import StringType

    try:
        probe: Any = udf(f=_probe(), returnType=StringType())
        row = spark.range(1).select(probe(col("id"))).first()
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise WorkerPythonError(
            "the Spark Connect server could not run a Python UDF, which spark-chkpt's "
            f"formats need its Python workers for: {first}"
        ) from e
    python, version, problem = str(row[0]).split("\t", 2)
    if not version:
        _fail(python, f"cannot import spark_chkpt ({problem})")
    if version != __version__:
        _fail(python, f"has spark-chkpt {version}, but this client runs {__version__}")
    _checked.add(session_id)
    log.info("Spark Connect server's Python workers: %s, spark-chkpt %s", python, version)


def _fail(python: str, problem: str) -> None:
    raise WorkerPythonError(
        f"the Spark Connect server's Python workers run {python!r}, which {problem}. "
        f"Install spark-chkpt {__version__} on the server ('{python} -m pip install "
        f"spark-chkpt=={__version__}'; on Databricks a library of the cluster, or a "
        "dependency of the serverless environment), or start the server with "
        "PYSPARK_PYTHON pointing at an interpreter that has it"
    )
