"""A server the project starts dies with the process that started it, even when that
process is killed with SIGKILL and cannot stop it (a pytest run killed by CI's timeout
left its Kafka brokers running with parent pid 1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# The starter: launches a long-lived server (a sleep), prints its pid, then waits.
STARTER = """
import sys, time
from pathlib import Path
from spark_chkpt.testing.processes import launch
server = launch(["sleep", "600"], log_path=Path(sys.argv[1]))
print(server.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_launched_server_dies_with_its_starter_killed_by_sigkill(tmp_path: Path) -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None
    server = int(starter.stdout.readline())
    try:
        assert _alive(server)
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait(timeout=30)
        ends = time.monotonic() + 10
        while _alive(server) and time.monotonic() < ends:
            time.sleep(0.05)
        assert not _alive(server), f"server {server} outlived its starter"
    finally:
        if _alive(server):
            os.kill(server, signal.SIGKILL)
