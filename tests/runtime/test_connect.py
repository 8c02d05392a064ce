"""Spark Connect sessions told apart, and ``register()`` on one: the server's Python
workers asked whether they import spark_chkpt (the client cannot see the server's
interpreter), on a server of its own whose workers' Python hides the package."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HIDE = """
import sys


class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "spark_chkpt" or name.startswith("spark_chkpt."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Hide())
"""


@pytest.fixture
def python_without_the_package(tmp_path: Path) -> Iterator[str]:
    """This interpreter, started so that ``import spark_chkpt`` fails (a
    ``sitecustomize`` on its ``PYTHONPATH`` refuses it), as a server's Python that lacks
    the package."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE)
    python = tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\nPYTHONPATH="{hide}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    saved = {k: os.environ.get(k) for k in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    yield str(python)
    for key, value in saved.items():  # the Connect client switched the process to Connect
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


class _Rows:
    """A Connect session's ``range(1).select(probe).first()``, answering ``answer``."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def range(self, n: int) -> _Rows:
        return self

    def select(self, *columns: object) -> _Rows:
        return self

    def first(self) -> tuple[str]:
        return (self.answer,)


def test_sessions_queries_and_frames_of_spark_connect_are_told_apart() -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    from pyspark.sql.connect.streaming.query import StreamingQuery as ConnectQuery

    from spark_chkpt.runtime.connect import is_connect

    assert is_connect(object.__new__(ConnectSession))
    assert is_connect(object.__new__(ConnectQuery))
    assert not is_connect(object())


def test_the_probe_reports_this_interpreter_and_version() -> None:
    import spark_chkpt
    from spark_chkpt.runtime.connect import _probe

    assert _probe()(0) == f"{sys.executable}\t{spark_chkpt.__version__}\t"


def test_a_worker_on_another_version_is_named_with_both() -> None:
    import spark_chkpt
    from spark_chkpt.errors import WorkerPythonError
    from spark_chkpt.runtime.connect import check_server_python

    with pytest.raises(WorkerPythonError) as raised:
        check_server_python(_Rows("/opt/py/bin/python\t0.0.1\t"))
    message = str(raised.value)
    assert "'/opt/py/bin/python', which has spark-chkpt 0.0.1" in message
    assert f"this client runs {spark_chkpt.__version__}" in message


def test_a_savepoint_stop_of_a_connect_query_asks_for_its_checkpoint() -> None:
    from pyspark.sql.connect.streaming.query import StreamingQuery as ConnectQuery

    from spark_chkpt.savepoint.manifest import SavepointError
    from spark_chkpt.savepoint.stop import checkpoint_of

    with pytest.raises(SavepointError, match=r"Spark Connect query.*pass checkpoint_location="):
        checkpoint_of(object.__new__(ConnectQuery))


def test_planning_a_connect_job_against_a_savepoint_is_refused_naming_the_way() -> None:
    from pyspark.sql.connect.streaming.readwriter import DataStreamWriter as ConnectWriter

    from spark_chkpt.errors import ChkptError
    from spark_chkpt.savepoint.plan import plan_writer

    with pytest.raises(ChkptError, match=r"job j: .*Spark Connect.*savepoint check"):
        plan_writer(writer=object.__new__(ConnectWriter), job="j")


@pytest.mark.integration
def test_a_server_whose_python_lacks_the_package_is_named_at_register(
    python_without_the_package: str,
) -> None:
    import spark_chkpt
    from spark_chkpt.errors import WorkerPythonError
    from spark_chkpt.testing.connect_server import ConnectServer

    with ConnectServer(python=python_without_the_package) as server:
        spark = server.session()
        try:
            with pytest.raises(WorkerPythonError) as raised:
                spark_chkpt.register(spark)
        finally:
            spark.stop()
    message = str(raised.value)
    assert "\n" not in message
    # The wrapper execs this interpreter: the worker names the executable it runs.
    assert f"Python workers run {sys.executable!r}, which cannot import spark_chkpt" in message
    assert "No module named 'spark_chkpt'" in message
    assert f"pip install spark-chkpt=={spark_chkpt.__version__}" in message
    assert "PYSPARK_PYTHON" in message
