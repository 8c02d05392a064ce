"""The exactly-once kill suite, at a reduced size, on real multi-process clusters:
``local-cluster[2,1,1024]`` (two executor JVMs, each with its own Python workers) and a
standalone master with two workers started through ``spark-class`` on loopback. Nothing
may rely on the driver and the executors sharing a Python process or memory."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spark_chkpt.testing.generator import produce_page_views
from spark_chkpt.testing.processes import kill_tree
from tests.chains.test_exactly_once import (
    EVENTS,
    _killed,
    assert_exactly_once,
    job_command,
    referenced,
    run_job,
    staged_files,
    txn_version,
)
from tests.helpers import user_env

pytestmark = pytest.mark.fault

LOCAL_CLUSTER = "local-cluster[2,1,1024]"


@pytest.fixture
def topic(make_topic: Callable[..., str], bootstrap_servers: str) -> str:
    name = make_topic(partitions=3)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=name, first=0, count=EVENTS)
    return name


def _executors(session: int) -> list[int]:
    """Executor JVMs in the driver's session (local-cluster starts them as its children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if b"CoarseGrainedExecutorBackend" in cmdline and os.getsid(int(entry.name)) == session:
                found.append(int(entry.name))
        except (OSError, ProcessLookupError):
            continue
    return found


def test_driver_then_an_executor_killed_on_a_local_cluster(
    tmp_path: Path, bootstrap_servers: str, topic: str
) -> None:
    """The driver killed after batch 1's Delta commit; its restart replays batch 1 (in
    the table: nothing committed again) and, while batch 2 runs, one executor JVM is
    SIGKILLed: Spark runs its tasks elsewhere (or on the executor the master starts in
    its place). The table holds every event once. The killed attempt's staged files may
    stay on disk (its abort never ran): they are batch 2's, never part of the table.
    (One chain: the two kills used to be two tests, a local-cluster run more.)"""
    _killed(
        run_job(
            tmp_path,
            bootstrap_servers,
            topic,
            kill_at="after-delta-commit@1",
            master=LOCAL_CLUSTER,
        )
    )
    assert txn_version(tmp_path) == 1
    log = open(tmp_path / "job.log", "w")  # noqa: SIM115 - the child's output
    job = subprocess.Popen(
        job_command(tmp_path, bootstrap_servers, topic, master=LOCAL_CLUSTER),
        cwd=tmp_path,
        env=user_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    killed = None
    try:
        deadline = time.monotonic() + 300
        while job.poll() is None and time.monotonic() < deadline:
            planned = (tmp_path / "chk" / "offsets" / "2").exists()
            done = (tmp_path / "chk" / "commits" / "2").exists()
            executors = _executors(job.pid)
            if planned and not done and executors:
                killed = executors[0]
                os.kill(killed, signal.SIGKILL)
                break
            time.sleep(0.05)
        assert job.wait(timeout=400) == 0, (tmp_path / "job.log").read_text()[-4000:]
    finally:
        if job.poll() is None:
            kill_tree(job.pid)
    assert killed is not None, "batch 2 finished before an executor could be killed"
    assert txn_version(tmp_path) == 2
    orphans = staged_files(tmp_path / "table") - referenced(tmp_path / "table")
    assert all("part-b00002-" in f for f in orphans), sorted(orphans)
    assert_exactly_once(tmp_path, unreferenced=orphans)


# -- a standalone cluster ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """A standalone master and two one-core workers on loopback, as ``spark-class``
    starts them; yields the master URL."""
    import pyspark

    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    env = {**user_env(), "SPARK_LOCAL_IP": "127.0.0.1"}
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    logs = tmp_path / "cluster"
    logs.mkdir()
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        processes.append(
            subprocess.Popen(
                [spark_class, *args],
                env=env,
                stdout=open(logs / f"{name}.log", "w"),  # noqa: SIM115 - the child's output
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def wait_for(what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 90
        while not ready():
            assert time.monotonic() < deadline, (
                f"{what}: " + (logs / "master.log").read_text()[-2000:]
            )
            time.sleep(0.3)

    def registered() -> int:
        return (logs / "master.log").read_text().count("Registering worker")

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port())),
        )
        wait_for(
            "master", lambda: "I have been elected leader" in (logs / "master.log").read_text()
        )
        for n in range(2):
            start(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                url,
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
                *("--webui-port", str(_free_port()), "--work-dir", str(logs / f"work-{n}")),
            )
        wait_for("two workers", lambda: registered() >= 2)
        yield url
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                kill_tree(process.pid)
            process.wait(timeout=30)


def test_driver_killed_on_a_standalone_cluster(
    tmp_path: Path, bootstrap_servers: str, topic: str, standalone: str
) -> None:
    # The cluster's python3 lacks the package: one error at register(), before any
    # worker traceback, naming the interpreter and the setting to change.
    unset = run_job(tmp_path, bootstrap_servers, topic, master=standalone)
    assert unset.returncode == 1
    assert "WorkerPythonError" in unset.stderr and "PYSPARK_PYTHON" in unset.stderr
    assert "ModuleNotFoundError" not in unset.stderr.split("WorkerPythonError")[0]
    # The cluster's setting: workers run the interpreter that has spark-chkpt.
    python = {"PYSPARK_PYTHON": sys.executable}
    _killed(
        run_job(
            tmp_path,
            bootstrap_servers,
            topic,
            kill_at="after-staging@1",
            master=standalone,
            extra_env=python,
        )
    )
    result = run_job(tmp_path, bootstrap_servers, topic, master=standalone, extra_env=python)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_exactly_once(tmp_path)
