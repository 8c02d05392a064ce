"""Fault injection for the exactly-once tests: SIGKILL the whole driver at a named step.

Set ``SPARK_CHKPT_KILL_AT=<point>[@<batchId>]`` in the driver's environment (it reaches
Spark's Python workers, where the sink's commit runs). At that point the process kills
its session's process group (the driver started with ``start_new_session=True``: the
Python driver and its JVM) and then itself, like ``kill -9`` of the driver. Never set it
outside tests. ``SPARK_CHKPT_FAIL_AT=in-write@<batchId>`` (or ``in-commit@<batchId>``)
makes the first write task (or the coordinator) raise instead, so Spark aborts the batch.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from enum import Enum

ENV = "SPARK_CHKPT_KILL_AT"
FAIL_ENV = "SPARK_CHKPT_FAIL_AT"
STALL_ENV = "SPARK_CHKPT_STALL_AT"  # <point>@<batchId>: pause there (see maybe_kill)
STALL_SIGNAL_ENV = "SPARK_CHKPT_STALL_SIGNAL"  # a file created when the stall begins
STALL_SECONDS_ENV = "SPARK_CHKPT_STALL_SECONDS"  # how long it lasts (default 10)


class FaultPoint(str, Enum):
    AFTER_STAGING = "after-staging"  # coordinator entered; nothing committed yet
    AFTER_DEAD_LETTERS = "after-dead-letters"  # dead letters committed; the table not yet
    AFTER_DELTA_COMMIT = "after-delta-commit"  # data visible; snapshot record not written
    AFTER_SNAPSHOT = "after-snapshot"  # snapshot record written; Spark's commit log not yet
    AFTER_COMMIT_LOG = "after-commit-log"  # Spark's commits/N written (progress event seen)
    IN_ABORT = "in-abort"  # abort entered; staged files not deleted yet
    AFTER_INTENT = "after-intent"  # Kafka sink: intent entry written, no barrier yet
    BETWEEN_BARRIERS = "between-barriers"  # Kafka sink: barrier in the first partition only
    AFTER_BARRIERS = "after-barriers"  # Kafka sink: barrier records written, index not yet
    AFTER_COMPLETE = "after-complete"  # Kafka sink: complete entry written, store not yet
    IN_WRITE = "in-write"  # a task fails (or the driver is killed) after staging part of
    # its output: in a stateful query, while the batch's state store versions are written
    IN_COMMIT = "in-commit"  # the coordinator fails before committing (Spark then aborts)
    IN_SAVEPOINT = "in-savepoint"  # savepoint create: half its files copied, no manifest


class InjectedFailure(RuntimeError):
    """Raised by :func:`maybe_fail`: a test's stand-in for a failing executor task."""


def armed(point: FaultPoint, batch_id: int, *, env: str = ENV) -> bool:
    spec = os.environ.get(env)
    if not spec:
        return False
    name, _, batch = spec.partition("@")
    return name == point.value and (not batch or int(batch) == batch_id)


def maybe_kill(point: FaultPoint, batch_id: int) -> None:
    """SIGKILL the driver's process group and this process if ``point`` is armed.

    ``SPARK_CHKPT_STALL_AT`` instead pauses at the point: it creates the file named by
    ``SPARK_CHKPT_STALL_SIGNAL`` and sleeps ``SPARK_CHKPT_STALL_SECONDS``, so that a test
    can inject a fault of its own (freeze the broker) exactly there."""
    if armed(point, batch_id, env=STALL_ENV):
        signal_file = os.environ.get(STALL_SIGNAL_ENV)
        if signal_file:
            with open(signal_file, "w") as out:
                out.write(f"{point.value}@{batch_id}\n")
        time.sleep(float(os.environ.get(STALL_SECONDS_ENV, "10")))
    if not armed(point, batch_id):
        return
    sys.stderr.write(f"spark-chkpt fault injection: SIGKILL at {point.value} of batch {batch_id}\n")
    sys.stderr.flush()
    try:
        os.killpg(os.getsid(0), signal.SIGKILL)
    finally:
        os.kill(os.getpid(), signal.SIGKILL)


def maybe_fail(point: FaultPoint, batch_id: int | None) -> None:
    """Raise :class:`InjectedFailure` if ``SPARK_CHKPT_FAIL_AT`` names ``point``."""
    if batch_id is not None and armed(point, batch_id, env=FAIL_ENV):
        raise InjectedFailure(
            f"spark-chkpt fault injection: failing {point.value} of batch {batch_id}"
        )
