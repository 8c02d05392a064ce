"""What failed, told from the error a query or a start ended with.

Spark hands the driver one :class:`~pyspark.errors.StreamingQueryException` for any
failure of a query; its text carries the Python traceback. A **snapshot failure** is an
error of the sink's commit on the driver (phase 2): Spark reports the ``chkpt-delta`` and
``chkpt-kafka`` commits as ``PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR ... perform
commit``, and the coordinators raise :class:`~spark_chkpt.errors.CommitError` (with its
:class:`~spark_chkpt.errors.CommitFailureReason`; a commit past ``snapshotTimeout``
raises :class:`~spark_chkpt.errors.SnapshotTimeoutError`), also from ``DeltaUpsert`` in
``foreachBatch``. Every other query failure is a **task failure** (executors, or the
query's own driver work). A failure that a restart from the same checkpoint cannot fix
(a fenced writer, another query's checkpoint, a bad option, a schema the table refuses)
is **fatal**; an error that is no query's (the JVM or its gateway is gone) is a
**driver** failure: only a new driver can go on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from spark_chkpt.errors import ConfigError, FencedError, QueryIdentityError, SchemaMismatchError
from spark_chkpt.runtime.report import explain

FATAL_ERRORS = (FencedError, QueryIdentityError, ConfigError, SchemaMismatchError)
_FATAL = re.compile(r"\b(" + "|".join(e.__name__ for e in FATAL_ERRORS) + r")\b")
# Spark's wrapper of an error in a Python sink's driver-side commit, and the coordinators'.
_SNAPSHOT = re.compile(r"data source perform commit\b|\b(CommitError|SnapshotTimeoutError)\b")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b.*")
MAX_CAUSE = 500


class FailureKind(str, Enum):
    """The kinds of failure the supervisor tells apart."""

    TASK = "task failure"
    SNAPSHOT = "snapshot failure"
    FATAL = "failure no restart can fix"
    DRIVER = "driver failure"


@dataclass(frozen=True)
class Failure:
    """One failure: its kind and its cause in one line (the exception the traceback ends
    with)."""

    kind: FailureKind
    cause: str


def classify(error: BaseException, *, starting: bool = False) -> Failure:
    """The :class:`Failure` of ``error``, raised by a query (a
    ``StreamingQueryException``) or, with ``starting``, by the user's start function."""
    from pyspark.errors import StreamingQueryException

    text = str(error)
    cause = summary(text) or type(error).__name__
    if isinstance(error, FATAL_ERRORS):
        return Failure(FailureKind.FATAL, f"{type(error).__name__}: {cause}")
    if isinstance(error, StreamingQueryException):
        if _FATAL.search(_traceback_of(text)):
            return Failure(FailureKind.FATAL, cause)
        if _SNAPSHOT.search(text):
            return Failure(FailureKind.SNAPSHOT, cause)
        return Failure(FailureKind.TASK, cause)
    if _is_gateway_error(error):
        return Failure(FailureKind.DRIVER, f"{type(error).__name__}: {cause}")
    if starting:  # a source or sink that could not start (a broker not answering yet)
        return Failure(FailureKind.TASK, f"{type(error).__name__}: {cause}")
    return Failure(FailureKind.DRIVER, f"{type(error).__name__}: {cause}")


def summary(text: str) -> str:
    """The line of a query's error that names it: the last ``...Error: message`` of the
    Python traceback, else the first line; without Spark's query description. Spark's
    "Python worker failed to connect back" is told with what it means and what to do
    (:func:`spark_chkpt.runtime.report.explain`)."""
    said = explain(text)
    if said is not None:
        return said
    head = _traceback_of(text)
    lines = [line.strip() for line in head.splitlines() if line.strip()]
    named = [line for line in lines if _EXCEPTION_LINE.match(line)]
    line = named[-1] if named else (lines[0] if lines else "")
    return line[:MAX_CAUSE]


def _traceback_of(text: str) -> str:
    return text.split("=== Streaming Query ===", 1)[0]


def _is_gateway_error(error: BaseException) -> bool:
    """Py4J's errors: the driver's JVM is gone or does not answer."""
    return type(error).__module__.startswith("py4j")
