"""The interpreter Spark's Python workers run, chosen and checked on the driver.

Spark starts a Python worker for every Python data source step (planning on the driver,
reads and writes on executors) with ``sc.pythonExec``. PySpark sets it once, when the
SparkContext starts, from ``PYSPARK_PYTHON``, else ``python3`` from PATH. A script run
with a virtual environment's interpreter (``.venv/bin/python my_job.py``) therefore gets
workers that cannot import spark_chkpt, and the failure arrives as a worker traceback
inside a JVM stack trace.

More: docs/concepts/runtime.md (spark_chkpt/runtime/interpreter.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from spark_chkpt.errors import WorkerPythonError
from spark_chkpt.version import __version__

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SPARK_DEFAULT = "python3"
_CHECK = (
    "import importlib.util, spark_chkpt\n"
    "if importlib.util.find_spec('spark_chkpt.connectors') is None:\n"
    "    raise ModuleNotFoundError(\"No module named 'spark_chkpt.connectors'\")\n"
    "print(spark_chkpt.__version__)\n"
)
_checked: dict[str, str] = {}  # interpreter path -> version it reported


@dataclass(frozen=True)
class WorkerPython:
    """The interpreter workers run, and the setting that chose it."""

    executable: str
    setting: str  # "PYSPARK_PYTHON", "spark.pyspark.python", ... or "default"


def is_local_master(master: str) -> bool:
    """True when every executor runs on this machine and can start this interpreter."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def chosen_python(
    *, env_value: str | None, conf_value: str | None, context_exec: str
) -> WorkerPython | None:
    """The interpreter the user chose, in PySpark's order of precedence, or None."""
    if env_value:
        return WorkerPython(executable=env_value, setting="PYSPARK_PYTHON")
    if conf_value:
        return WorkerPython(executable=conf_value, setting="spark.pyspark.python")
    if context_exec and context_exec != SPARK_DEFAULT:
        return WorkerPython(executable=context_exec, setting="SparkContext.pythonExec")
    return None


def choose_worker_python(spark: SparkSession) -> WorkerPython | None:
    """Point ``spark``'s Python workers at an interpreter that imports spark_chkpt.

    Returns the interpreter chosen, or None for a Spark Connect session: the server's
    interpreter is not this process's to choose (``register()`` asks the server's
    workers instead, :func:`spark_chkpt.runtime.connect.check_server_python`).
    """
    from spark_chkpt.runtime.connect import is_connect

    if is_connect(spark):
        return None
    sc = spark.sparkContext
    chosen = chosen_python(
        env_value=os.environ.get("PYSPARK_PYTHON"),
        conf_value=sc.getConf().get("spark.pyspark.python"),
        context_exec=sc.pythonExec,
    )
    local = is_local_master(sc.master or "")
    if chosen is None:
        if not local:
            # Spark runs the data sources' driver-side steps (schema, planning, commits)
            # in a Python worker on the driver with the same interpreter: it is checked
            # below when it exists here.
            log.info(
                "master %s: Spark's Python workers run the executors' %r; spark-chkpt %s "
                "must be installed there and on the driver",
                sc.master,
                sc.pythonExec,
                _version(),
            )
            chosen = WorkerPython(executable=sc.pythonExec, setting="default")
        else:
            chosen = WorkerPython(executable=sys.executable, setting="default")
    if local or _resolve(chosen.executable) is not None:
        check_worker_python(chosen)
    else:
        log.info(
            "master %s: not checking %s=%r, which does not exist on the driver",
            sc.master,
            chosen.setting,
            chosen.executable,
        )
    sc.pythonExec = chosen.executable
    return chosen


def check_worker_python(python: WorkerPython) -> None:
    """Raise :class:`WorkerPythonError` unless ``python`` imports this spark_chkpt."""
    resolved = _resolve(python.executable)
    if resolved is None:
        _fail(python, "is not an executable file, nor a command on PATH")
    if os.path.abspath(resolved) == os.path.abspath(sys.executable):
        return  # the interpreter running this code imports spark_chkpt by definition
    # (Compared as paths, not real paths: a venv's python links to the base interpreter,
    # whose site-packages differ.)
    if resolved not in _checked:
        try:
            result = subprocess.run(
                [resolved, "-c", _CHECK],
                capture_output=True,
                text=True,
                timeout=120,
                env={k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"},
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            _fail(python, f"could not be started ({e})")
        if result.returncode != 0:
            lines = result.stderr.strip().splitlines()
            _fail(python, f"cannot import spark_chkpt ({lines[-1] if lines else 'no output'})")
        _checked[resolved] = result.stdout.strip()
    if _checked[resolved] != _version():
        _fail(
            python,
            f"has spark-chkpt {_checked[resolved]}, but the driver runs {_version()}",
        )


def _resolve(executable: str) -> str | None:
    if os.sep in executable:
        return executable if os.access(executable, os.X_OK) else None
    return shutil.which(executable)


def _version() -> str:
    return __version__


def _fail(python: WorkerPython, problem: str) -> NoReturn:
    how = (
        "Spark's default when PYSPARK_PYTHON is not set"
        if python.setting == "default"
        else f"set by {python.setting}"
    )
    raise WorkerPythonError(
        f"Spark's Python workers would run {python.executable!r} ({how}), which {problem}. "
        f"Install spark-chkpt {_version()} into that interpreter "
        f"('{python.executable} -m pip install spark-chkpt=={_version()}'), or point "
        f"{'PYSPARK_PYTHON' if python.setting == 'default' else python.setting} at an "
        f"interpreter that has it, such as this one: {sys.executable}"
    )
