"""The first line of a failure a user sees: the project's one-line message.

A mistake the driver-side code of a format refuses (an option, a missing topic, a
commit) surfaces in the user's script as Spark's error: a log4j ``ERROR
MicroBatchExecution`` dump, then a ``StreamingQueryException`` whose message starts
with ``[STREAM_FAILED] ... Traceback`` and carries the project's message somewhere in
the middle. Spark runs those methods in a Python worker whose stderr it copies to the driver's:
:func:`reported` writes the project's message there, one line, the moment the error is
raised, and (:func:`say`) waits until Spark has taken it, so it comes before Spark's report.

Two failures are not the project's and need saying what they mean. Spark's own, common
on a loaded machine: ``Python worker failed to connect back``. And an S3 request refused
by a store that does not take the newer AWS SDKs' request checksums (pyarrow and boto3
fail there naming a header or a failed stream, never the settings). :func:`explain`
turns each into what happened and what to do; :func:`reported` writes it first where
a format's driver-side method fails with it, and the restart supervisor's lines and, through
:func:`install_excepthook` (installed by ``register()``), an uncaught error in the
user's script start with that explanation. A ``query.stop()`` while a batch commits makes
PySpark print an accumulator ``EOFError`` traceback: :func:`explain_stopped_commit`
(installed by ``register()``) prints :data:`STOPPED_MID_COMMIT`, one line, instead.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import struct
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import ParamSpec, TypeVar

from spark_chkpt.errors import ChkptError

_P = ParamSpec("_P")
_R = TypeVar("_R")

PREFIX = "spark-chkpt: "
_CONNECT_BACK = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)
CONNECT_BACK_EXPLAINED = (
    "Spark started a Python worker that did not connect back to its JVM in time (Spark "
    "4.2 waits a fixed 10 s for a new worker, 60 s through its daemon): the machine was "
    "too loaded to start Python, not a fault of the query's data; nothing of the "
    "unfinished batch was committed. Spark has no setting for that wait; "
    "spark.python.authenticate.socketTimeout (default 15s) gives a started worker longer "
    "for its handshake, and spark.python.worker.reuse=true (the default) keeps workers "
    "so fewer start. Run the query under a restart strategy "
    "(restart-strategy.type=fixed-delay with spark_chkpt.run_supervised, or a job's "
    "--set restart-strategy.type=...) to restart it from its checkpoint, exactly once"
)


# What an S3 client says when the store refused the newer SDKs' checksums: the headers
# and the trailer they ride in, the codes stores answer them with, and pyarrow's
# (the AWS C++ SDK's) failed read of a response it could not validate.
_CHECKSUM_WALL = re.compile(
    r"x-amz-checksum-|x-amz-sdk-checksum-algorithm|x-amz-trailer"
    r"|STREAMING-UNSIGNED-PAYLOAD-TRAILER|XAmzContentSHA256Mismatch|MissingContentLength"
    r"|x-amz-content-sha256 must be|AWS Error [A-Z_]+ during \w+ operation: Failed to flush"
    r" response stream",
    re.IGNORECASE,
)
CHECKSUMS_EXPLAINED = (
    "the S3 store refused a request the way stores that do not take the newer AWS SDKs' "
    "request checksums refuse it (Backblaze B2, older Ceph RGW, s3proxy 2.6.0: see the "
    "cluster how-to): set AWS_REQUEST_CHECKSUM_CALCULATION=when_required and "
    "AWS_RESPONSE_CHECKSUM_VALIDATION=when_required in the environment of the driver and "
    "of the executors (spark.executorEnv.*): pyarrow's and boto3's AWS SDKs read them. "
    "Hadoop's s3a:// takes spark.hadoop.fs.s3a.checksum.generation=false and "
    "spark.hadoop.fs.s3a.checksum.validation=false (its defaults); delta-rs sends none "
    "unless storage.aws_checksum_algorithm is set: leave it unset"
)


# How long a worker waits for Spark's copying thread to take its line from the stderr
# pipe before it raises anyway (a reader that is gone, or a pipe other writers keep full).
DRAIN_WAIT_S = 2.0


def _pending(fd: int) -> int | None:
    """Bytes written to the pipe ``fd`` and not yet read, or None where that cannot be
    asked (not a pipe, no ``FIONREAD`` on this platform)."""
    try:
        import fcntl
        import termios

        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        answer = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except (ImportError, OSError, ValueError):
        return None
    return int(struct.unpack("i", answer)[0])


def say(line: str) -> None:
    """Write ``line`` to stderr and, where stderr is a pipe (a Spark worker's), wait at
    most :data:`DRAIN_WAIT_S` until its reader has taken it. Spark copies a worker's
    stderr to the driver's with a thread of its own, so a line written just before an
    error is raised could otherwise still sit in the pipe while the JVM logs the error."""
    print(line, file=sys.stderr, flush=True)
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return
    deadline = time.monotonic() + DRAIN_WAIT_S
    while True:
        pending = _pending(fd)
        if not pending or time.monotonic() >= deadline:
            return
        time.sleep(0.005)


def one_line(error: BaseException) -> str:
    """``spark-chkpt: <Class>: <the message's first line>``."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{PREFIX}{type(error).__name__}: {first}"


def explain(text: str) -> str | None:
    """What to tell a user about an error of Spark's own (by its text), or None."""
    if any(marker in text for marker in _CONNECT_BACK):
        return f"Python worker failed to connect back: {CONNECT_BACK_EXPLAINED}"
    wall = _CHECKSUM_WALL.search(text)
    if wall is not None:
        return f"S3 checksums ({wall.group(0).strip()}): {CHECKSUMS_EXPLAINED}"
    return None


def reported(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """A driver-side DataSource method whose project error is written to stderr, one
    line, before it propagates to Spark (which reports it after its own dump); an error
    :func:`explain` knows (an S3 store refusing checksums) is written as its
    explanation first."""

    @functools.wraps(method)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except Exception as e:
            said = explain(str(e))
            if said is not None:
                say(PREFIX + said)
            if isinstance(e, ChkptError) and not getattr(e, REPORTED, False):
                say(one_line(e))
            raise

    return call


REPORTED = "_spark_chkpt_reported"


def report_now(error: ChkptError) -> ChkptError:
    """Write ``error``'s line to stderr now, where it is raised (an executor's Python
    worker: the driver's stderr in local mode, the executor's log on a cluster), before
    Spark's report of the failed task; the driver's :func:`reported` does not repeat it."""
    if not getattr(error, REPORTED, False):
        say(one_line(error))
        setattr(error, REPORTED, True)
    return error


def install_excepthook() -> None:
    """An uncaught error whose text names Spark's connect-back failure is reported with
    the explanation as its first line, then as Python reports it. Installed once."""
    previous = sys.excepthook
    if getattr(previous, "_spark_chkpt", False):
        return

    def hook(
        kind: type[BaseException], error: BaseException, traceback: TracebackType | None
    ) -> None:
        said = explain(str(error))
        if said is not None:
            print(PREFIX + said, file=sys.stderr, flush=True)
        previous(kind, error, traceback)

    hook._spark_chkpt = True  # type: ignore[attr-defined]
    sys.excepthook = hook


STOPPED_MID_COMMIT = (
    "Spark closed its accumulator connection to this driver mid-update: a query was "
    "stopped (query.stop()) while a batch was committing. If Spark then logs that the "
    "batch's write 'is aborting' and 'failed to abort', nothing is lost or doubled: a "
    "chkpt sink's commit either completed (the next start finds the batch in the sink "
    "and skips it) or made nothing visible (the batch runs again)."
)


def explain_stopped_commit(spark: object) -> None:
    """PySpark's accumulator server (``spark.sparkContext._accumulatorServer``) reports
    an ``EOFError`` from the JVM's connection as :data:`STOPPED_MID_COMMIT`, one line on
    standard error, instead of a traceback; any other error as before. Nothing on Spark
    Connect, which has no such server. Installed once per server."""
    context = getattr(spark, "_sc", None)
    server = getattr(context, "_accumulatorServer", None)
    if server is None or getattr(server, "_spark_chkpt", False):
        return
    previous = server.handle_error

    def handle_error(request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], EOFError):
            print(PREFIX + STOPPED_MID_COMMIT, file=sys.stderr, flush=True)
            return
        previous(request, client_address)

    server.handle_error = handle_error
    server._spark_chkpt = True
