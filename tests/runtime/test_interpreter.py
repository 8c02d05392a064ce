"""Choosing and checking the interpreter of Spark's Python workers."""

from __future__ import annotations

import sys
import venv
from pathlib import Path

import pytest

from spark_chkpt.errors import WorkerPythonError
from spark_chkpt.runtime.interpreter import (
    WorkerPython,
    check_worker_python,
    chosen_python,
    is_local_master,
)


def test_precedence_env_then_conf_then_context() -> None:
    assert chosen_python(env_value="/a", conf_value="/b", context_exec="/c") == WorkerPython(
        executable="/a", setting="PYSPARK_PYTHON"
    )
    assert chosen_python(env_value=None, conf_value="/b", context_exec="/c") == WorkerPython(
        executable="/b", setting="spark.pyspark.python"
    )
    assert chosen_python(env_value="", conf_value=None, context_exec="/c") == WorkerPython(
        executable="/c", setting="SparkContext.pythonExec"
    )
    assert chosen_python(env_value=None, conf_value=None, context_exec="python3") is None


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local-cluster[2,1,1024]", True),
        ("spark://host:7077", False),
        ("yarn", False),
        ("k8s://https://host", False),
        ("localhost", False),
    ],
)
def test_local_masters(master: str, local: bool) -> None:
    assert is_local_master(master) is local


def test_this_interpreter_passes() -> None:
    check_worker_python(WorkerPython(executable=sys.executable, setting="default"))


def test_missing_interpreter_names_it_and_the_setting() -> None:
    with pytest.raises(WorkerPythonError) as error:
        check_worker_python(
            WorkerPython(executable="/nowhere/bin/python", setting="spark.pyspark.python")
        )
    message = str(error.value)
    assert "'/nowhere/bin/python' (set by spark.pyspark.python)" in message
    assert "is not an executable file" in message
    assert "point spark.pyspark.python at an interpreter that has it" in message
    assert message.endswith(f"such as this one: {sys.executable}")


def test_interpreter_without_the_package_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not the repo root, whose spark_chkpt folder is importable
    venv.create(tmp_path / "bare", with_pip=False, symlinks=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    with pytest.raises(WorkerPythonError) as error:
        check_worker_python(WorkerPython(executable=bare, setting="default"))
    message = str(error.value)
    assert "(Spark's default when PYSPARK_PYTHON is not set)" in message
    assert "No module named 'spark_chkpt'" in message
    assert f"'{bare} -m pip install spark-chkpt==" in message
