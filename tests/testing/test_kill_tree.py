"""``kill_tree`` (spark_chkpt.testing.processes): the kill -9 of a whole job, whose
PySpark daemon and workers leave the job's process group (``os.setpgid(0, 0)``), as a
real one does. Real processes, no JVM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from spark_chkpt.testing.processes import kill_tree

# A job as Spark's makes one: the driver, a child (the JVM), under it a daemon in a
# process group of its own whose worker forks again (a commit worker) and keeps writing.
JOB = """
import os, sys, time
out = sys.argv[1]
def beat(name):
    while True:
        with open(os.path.join(out, name), "a") as f:
            f.write("x")
        time.sleep(0.02)
if os.fork() == 0:            # "the JVM"
    if os.fork() == 0:        # "the daemon": a process group of its own
        os.setpgid(0, 0)
        if os.fork() == 0:    # "the commit worker"
            os.setpgid(0, 0)
            beat("worker")
        beat("daemon")
    beat("jvm")
beat("driver")
"""


def _alive(path: Path) -> bool:
    before = path.stat().st_size
    time.sleep(0.3)
    return path.stat().st_size > before


def _start(tmp_path: Path) -> subprocess.Popen[bytes]:
    job = subprocess.Popen([sys.executable, "-c", JOB, str(tmp_path)], start_new_session=True)
    deadline = time.monotonic() + 10
    names = ("driver", "jvm", "daemon", "worker")
    while not all((tmp_path / n).exists() for n in names) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all((tmp_path / n).exists() for n in names)
    return job


def test_killpg_leaves_the_workers_that_left_the_group(tmp_path: Path) -> None:
    """Why kill_tree exists: the process group's kill misses the daemon and its worker."""
    job = _start(tmp_path)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=10)
    try:
        assert _alive(tmp_path / "worker") and _alive(tmp_path / "daemon")
    finally:
        _kill_leftovers(tmp_path)


def _kill_leftovers(tmp_path: Path) -> None:
    """The orphans of the test above, found by their command line."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if str(tmp_path).encode() in cmdline:
            os.kill(int(entry), signal.SIGKILL)


def test_kill_tree_kills_every_descendant(tmp_path: Path) -> None:
    job = _start(tmp_path)
    kill_tree(job.pid)
    assert job.wait(timeout=10) == -signal.SIGKILL
    for name in ("driver", "jvm", "daemon", "worker"):
        assert not _alive(tmp_path / name), name


def test_kill_tree_of_a_process_gone_already_is_nothing(tmp_path: Path) -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(timeout=10)
    kill_tree(done.pid)  # no error
