"""A user's own script, run the way users run it: a subprocess started from a folder
outside the repo, with no ``PYSPARK_PYTHON`` or ``PYSPARK_DRIVER_PYTHON`` in its
environment. The script (``tests/user_scripts/usage_job.py``) follows the README's
Usage section and nothing else."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "usage_job.py"
EVENTS = 600


@pytest.fixture
def job_folder(tmp_path: Path) -> Path:
    """A folder outside the repo holding a copy of the user's script."""
    folder = tmp_path / "my-project"
    folder.mkdir()
    shutil.copy(SCRIPT, folder / "my_job.py")
    return folder


@pytest.fixture
def events_topic(bootstrap_servers: str, make_topic: Callable[..., str]) -> str:
    topic = make_topic(partitions=2)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=EVENTS)
    return topic


def start_script(
    folder: Path, servers: str, topic: str, workdir: str, *args: str, **env: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "my_job.py", servers, topic, workdir, *args],
        cwd=folder,
        env=user_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=300)
    return process.returncode, out, err


def test_readme_script_runs_from_any_folder_without_pyspark_python(
    job_folder: Path, bootstrap_servers: str, events_topic: str
) -> None:
    code, out, err = finish(start_script(job_folder, bootstrap_servers, events_topic, "run"))
    assert code == 0, err[-3000:]
    assert f"rows {EVENTS} ids {EVENTS}" in out
    assert "terminate called" not in err
    # The README's lag line, printed without any logging set up: all read, nothing behind.
    assert f"batch 0: {EVENTS} rows" in err and "lag 0 offsets over 2 partitions" in err


def test_script_exits_0_every_time_with_and_without_spark_stop(
    job_folder: Path, bootstrap_servers: str, events_topic: str
) -> None:
    """Two runs at a time, one ending with ``spark.stop()``; before the exit hook 5 of 6
    such runs died with SIGABRT (``terminate called without an active exception``) after
    printing their result. The race itself is repeated without Spark, twelve times, by
    tests/runtime/test_teardown.py (it needs no Spark, and eight Spark runs cost 7 minutes)."""
    results = []
    for round_ in range(1):
        pair = [
            start_script(job_folder, bootstrap_servers, events_topic, f"r{round_}-{i}", *stop)
            for i, stop in enumerate([(), ("--stop",)])
        ]
        results += [(round_, i, *finish(p)) for i, p in enumerate(pair)]
    for round_, i, code, out, err in results:
        assert code == 0, f"run {round_}-{i} exited {code}: {err[-2000:]}"
        assert "terminate called" not in err
        assert f"rows {EVENTS} ids {EVENTS}" in out


def test_query_stop_during_a_commit_says_what_happened_in_one_line(
    tmp_path: Path, bootstrap_servers: str, events_topic: str
) -> None:
    """Issue 51: ``query.stop()`` right after batch 1's Delta commit (the commit held
    there): PySpark's accumulator server printed an ``EOFError`` traceback in the script
    and Spark logs that the write is aborting and failed to abort. The script now says
    in one line that nothing is lost, and the table holds both batches."""
    from deltalake import DeltaTable

    from spark_chkpt.runtime.report import STOPPED_MID_COMMIT

    folder = tmp_path / "my-project"
    folder.mkdir()
    shutil.copy(SCRIPT.with_name("stop_mid_commit.py"), folder / "my_job.py")
    stalled = tmp_path / "stalled"
    rc, out, err = finish(
        start_script(
            folder,
            bootstrap_servers,
            events_topic,
            str(tmp_path / "work"),
            SPARK_CHKPT_STALL_AT="after-snapshot@1",
            SPARK_CHKPT_STALL_SIGNAL=str(stalled),
            SPARK_CHKPT_STALL_SECONDS="3",
        )
    )
    assert rc == 0 and "stopped" in out, err[-3000:]
    assert "Traceback" not in err and "EOFError" not in err, err[-3000:]
    assert "spark-chkpt: " + STOPPED_MID_COMMIT in err, err[-3000:]
    assert DeltaTable(str(tmp_path / "work" / "table")).to_pyarrow_table().num_rows == 400


def test_local_cluster_executors_run_the_script_interpreter(
    job_folder: Path, bootstrap_servers: str, events_topic: str
) -> None:
    """Two executor JVMs with Python workers of their own (``local-cluster``)."""
    process = start_script(
        job_folder,
        bootstrap_servers,
        events_topic,
        "cluster",
        "--master",
        "local-cluster[2,1,1024]",
    )
    code, out, err = finish(process)
    assert code == 0, out + err[:6000]
    assert f"rows {EVENTS} ids {EVENTS}" in out


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter without spark-chkpt (a venv with nothing installed)."""
    folder = tmp_path_factory.mktemp("bare-venv")
    venv.create(folder, with_pip=False, symlinks=True)
    return str(folder / "bin" / "python")


def test_chosen_interpreter_without_the_package_fails_at_register(
    job_folder: Path, bootstrap_servers: str, events_topic: str, bare_python: str
) -> None:
    code, _, err = finish(
        start_script(
            job_folder, bootstrap_servers, events_topic, "bare", PYSPARK_PYTHON=bare_python
        )
    )
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("spark_chkpt.errors.WorkerPythonError:"), err[-3000:]
    assert f"'{bare_python}' (set by PYSPARK_PYTHON)" in last
    assert "No module named 'spark_chkpt'" in last
    assert f"{bare_python} -m pip install spark-chkpt==" in last
    assert "at org.apache.spark" not in err  # on the driver: no worker ran, no JVM trace


def test_spark_submit_of_the_script_in_an_activated_venv(
    job_folder: Path, bootstrap_servers: str, events_topic: str
) -> None:
    """pip's spark-submit finds Spark and the driver interpreter through ``python3`` on
    PATH, so it runs in an activated venv (PATH starts with the venv's bin)."""
    bin_dir = Path(sys.executable).parent
    env = user_env()
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(bin_dir.parent)
    result = subprocess.run(
        [
            "spark-submit",
            "--master",
            "local[2]",
            "my_job.py",
            bootstrap_servers,
            events_topic,
            "submitted",
        ],
        cwd=job_folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"rows {EVENTS} ids {EVENTS}" in result.stdout
