"""The servers the project starts for tests and local use (the Kafka broker, Tansu, the S3
server) as child processes: a free loopback port, the launch with its log, the stop."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

log = logging.getLogger(__name__)

LOG_TAIL = 3000  # characters of a server's log an error quotes

_Server = TypeVar("_Server", bound="ServerProcess")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def launch(
    command: Sequence[str], *, log_path: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a session of its own, its output appended to ``log_path``
    (``env``: its whole environment; default this process's)."""
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            list(command),
            env=dict(env) if env is not None else None,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


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


class ServerProcess:
    """What every server here shares: used as a context manager (``start()`` on entry,
    ``stop()`` on exit), and the end of its log quoted when it fails to start."""

    log_path: Path

    def start(self: _Server) -> _Server:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL:]
        except OSError:
            return "(no log)"

    def __enter__(self: _Server) -> _Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
