"""The servers the project starts for tests and local use (the Kafka broker, Tansu, the S3
server) as child processes: a free loopback port, the launch with its log, the stop; and
:func:`kill_tree`, the ``kill -9`` of a whole job (its Python, its JVM, PySpark's daemon
and workers, which leave the job's process group)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from spark_chkpt.errors import BrokerError

log = logging.getLogger(__name__)

LOG_TAIL = 3000  # characters of a server's log an error quotes

_Started = TypeVar("_Started", bound="Started")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def launch(
    command: Sequence[str], *, log_path: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a session of its own, its output appended to ``log_path``
    (``env``: its whole environment; default this process's). Started from the main
    thread on Linux, it is killed when this process dies, even by SIGKILL (a pytest run
    killed by a timeout left its brokers running); a thread's start is not (the kernel's
    signal follows the thread that started it)."""
    on_death = None
    if sys.platform == "linux" and threading.current_thread() is threading.main_thread():
        on_death = functools.partial(_die_with_parent, os.getpid())
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            list(command),
            env=dict(env) if env is not None else None,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=on_death,
        )


def _die_with_parent(parent: int) -> None:
    """In the child before its exec: SIGKILL when ``parent`` dies (``PR_SET_PDEATHSIG``),
    and no exec at all if it died already, between the fork and this call."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def halt(process: subprocess.Popen[bytes] | None, *, timeout_s: float = 10.0, what: str) -> None:
    """SIGTERM (after SIGCONT: a paused server must see it), then SIGKILL after
    ``timeout_s``; nothing if ``process`` is gone already."""
    if process is None or process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGCONT)
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop in %ss: killed", what, timeout_s)
        process.kill()
        process.wait(timeout=10)


def _children() -> dict[int, list[int]]:
    """Every live process's children, from ``/proc/<pid>/stat`` (field 4, the parent)."""
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                text = stat.read().decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 1:
            found.setdefault(int(fields[1]), []).append(int(entry))
    return found


def _descendants(pid: int) -> list[int]:
    children = _children()
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process descended from it, as a machine crash kills a
    whole job.

    ``os.killpg`` of a job's process group is not enough: PySpark's daemon and its
    workers call ``os.setpgid(0, 0)``, and a Python sink's driver-side commit runs in such
    a worker, which would go on committing after the "kill". The tree is found by
    walking ``/proc``; each process is stopped (SIGSTOP) before its children are looked
    for, so none forks a child the walk misses, until a walk finds nothing new; then all
    are killed. The calling process, if it is in the tree, is neither stopped nor
    spared: it is killed last."""
    me = os.getpid()
    stopped: list[int] = []
    if pid != me:
        _signal(pid, signal.SIGSTOP)
    stopped.append(pid)
    while True:
        new = [p for p in _descendants(pid) if p not in stopped]
        if not new:
            break
        for child in new:
            if child != me:
                _signal(child, signal.SIGSTOP)
            stopped.append(child)
        time.sleep(0.001)  # a stop is delivered asynchronously; a fork may be under way
    for victim in stopped:
        if victim != me:
            _signal(victim, signal.SIGKILL)
    if me in stopped:
        os.kill(me, signal.SIGKILL)


class Started:
    """Something started and stopped, used as a context manager: ``start()`` on entry,
    ``stop()`` on exit."""

    def start(self: _Started) -> _Started:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Started) -> _Started:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ServerProcess(Started):
    """What every server here shares: a :class:`Started`, and the end of its log quoted
    when it fails to start."""

    log_path: Path

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL:]
        except OSError:
            return "(no log)"


class PausableBroker(ServerProcess):
    """A broker process that can be frozen: connections stay open and nothing answers,
    as in a long GC pause or a network partition (its data survives, unlike a restart)."""

    _process: subprocess.Popen[bytes] | None

    @property
    def bootstrap_servers(self) -> str:
        raise NotImplementedError

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused broker go on (SIGCONT)."""
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        if self._process is None or self._process.poll() is not None:
            raise BrokerError(f"the broker at {self.bootstrap_servers} is not running")
        os.kill(self._process.pid, sig)


def port_open(host: str, port: int) -> bool:
    """Whether ``host:port`` accepts a TCP connection (within a second)."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
