"""The first line of a failure a user sees: the project's one-line message.

A mistake the driver-side code of a format refuses (an option, a missing topic, a
commit) surfaces in the user's script as Spark's error: a log4j ``ERROR
MicroBatchExecution`` dump, then a ``StreamingQueryException`` whose message starts
with ``[STREAM_FAILED] ... Traceback`` and carries the project's message somewhere in
the middle. Spark runs those methods in a Python worker whose stderr is the driver's:
:func:`reported` writes the project's message there, one line, the moment the error is
raised, so it comes before Spark's report of it.

One failure is Spark's own and common on a loaded machine: ``Python worker failed to
connect back``. :func:`explain` turns it into what happened and what to do; the
restart supervisor's lines and, through :func:`install_excepthook` (installed by
``register()``), an uncaught error in the user's script start with that explanation.
"""

from __future__ import annotations

import functools
import sys
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


def one_line(error: BaseException) -> str:
    """``spark-chkpt: <Class>: <the message's first line>``."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{PREFIX}{type(error).__name__}: {first}"


def explain(text: str) -> str | None:
    """What to tell a user about an error of Spark's own (by its text), or None."""
    if any(marker in text for marker in _CONNECT_BACK):
        return f"Python worker failed to connect back: {CONNECT_BACK_EXPLAINED}"
    return None


def reported(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """A driver-side DataSource method whose project error is written to stderr, one
    line, before it propagates to Spark (which reports it after its own dump)."""

    @functools.wraps(method)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except ChkptError as e:
            if not getattr(e, REPORTED, False):
                print(one_line(e), file=sys.stderr, flush=True)
            raise

    return call


REPORTED = "_spark_chkpt_reported"


def report_now(error: ChkptError) -> ChkptError:
    """Write ``error``'s line to stderr now, where it is raised (an executor's Python
    worker: the driver's stderr in local mode, the executor's log on a cluster), before
    Spark's report of the failed task; the driver's :func:`reported` does not repeat it."""
    if not getattr(error, REPORTED, False):
        print(one_line(error), file=sys.stderr, flush=True)
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
