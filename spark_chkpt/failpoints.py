"""Fail points: named places in the engine where a test makes it fail (fail-rs, FoundationDB's
buggify).

More: docs/concepts/runtime.md (spark_chkpt/failpoints.py).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from enum import Enum
from typing import Literal

from spark_chkpt.errors import InjectedFailureError

ENV = "SPARK_CHKPT_KILL_AT"
FAIL_ENV = "SPARK_CHKPT_FAIL_AT"
STALL_ENV = "SPARK_CHKPT_STALL_AT"  # <point>@<batchId>: pause there
STALL_SIGNAL_ENV = "SPARK_CHKPT_STALL_SIGNAL"  # a file created when the stall begins
STALL_SECONDS_ENV = "SPARK_CHKPT_STALL_SECONDS"  # how long it lasts (default 10)
STALL_RELEASE_ENV = "SPARK_CHKPT_STALL_RELEASE"  # a file that ends the stall sooner


class FaultPoint(str, Enum):
    """The registry: every fail point of the engine."""

    AFTER_STAGING = "after-staging"  # coordinator entered; nothing committed yet
    AFTER_DEAD_LETTERS = "after-dead-letters"  # dead letters committed; the table not yet
    AFTER_OWN_COMMIT = "after-own-commit"  # own Delta commit: _delta_log/<v>.json created;
    # log upkeep, the snapshot record and the rest of the coordinator's steps not yet
    AFTER_DELTA_COMMIT = "after-delta-commit"  # data visible; snapshot record not written
    AFTER_SNAPSHOT = "after-snapshot"  # snapshot record written; Spark's commit log not yet
    AFTER_COMPACTION = "after-compaction"  # chkpt-delta: an auto compaction's commit landed
    # after the batch's own commit and record; the kept table not refreshed, Spark's
    # commits/N not written
    AFTER_COMMIT_LOG = "after-commit-log"  # Spark's commits/N written (progress event seen)
    IN_ABORT = "in-abort"  # abort entered; staged files not deleted yet
    AFTER_INTENT = "after-intent"  # Kafka sink: intent entry written, no barrier yet
    BETWEEN_BARRIERS = "between-barriers"  # Kafka sink: barrier in the first partition only
    BETWEEN_TRANSACTIONS = "between-transactions"  # Kafka transactions: the first committed
    AFTER_TRANSACTIONS = "after-transactions"  # Kafka transactions: all committed, no barrier
    AFTER_BARRIERS = "after-barriers"  # Kafka sink: barrier records written, index not yet
    AFTER_COMPLETE = "after-complete"  # Kafka sink: complete entry written, store not yet
    IN_WRITE = "in-write"  # a task fails (or the driver is killed) after staging part of
    # its output: in a stateful query, while the batch's state store versions are written
    IN_COMMIT = "in-commit"  # the coordinator fails before committing (Spark then aborts)
    IN_SAVEPOINT = "in-savepoint"  # savepoint create: half its files copied, no manifest
    IN_PIPELINE_RESTORE = "in-pipeline-restore"  # pipeline restore: job <id> (0: the first) done


# The points SPARK_CHKPT_FAIL_AT can fail (the others only kill or stall), and the one
# SPARK_CHKPT_KILL_AT cannot kill (it fails a commit so that Spark aborts the batch).
FAILABLE = frozenset({FaultPoint.IN_WRITE, FaultPoint.IN_COMMIT})
KILLABLE = frozenset(FaultPoint) - {FaultPoint.IN_COMMIT}

Action = Literal["kill", "fail", "stall"] | Callable[[FaultPoint, int], None]
_ENABLED: dict[FaultPoint, tuple[Action, int | None]] = {}


def failpoint(point: FaultPoint, batch_id: int | None, *, can_fail: bool = True) -> None:
    """The engine passes ``point`` of batch ``batch_id``: run what is switched on there.
    ``can_fail=False``: this caller only stalls or kills (of ``in-write``'s tasks, only
    the first fails)."""
    if batch_id is None:
        return
    action = _action(point, batch_id)
    if action is not None:
        _run(action, point, batch_id)
        return
    if point in KILLABLE:
        if armed(point, batch_id, env=STALL_ENV):
            _run("stall", point, batch_id)
        if armed(point, batch_id):
            _run("kill", point, batch_id)
    if can_fail and point in FAILABLE and armed(point, batch_id, env=FAIL_ENV):
        _run("fail", point, batch_id)


def armed(point: FaultPoint, batch_id: int, *, env: str = ENV) -> bool:
    """Whether the environment variable ``env`` switches ``point`` on for ``batch_id``,
    or a test did (:func:`enable`)."""
    if _action(point, batch_id) is not None and env == ENV:
        return True
    spec = os.environ.get(env)
    if not spec:
        return False
    name, _, batch = spec.partition("@")
    return name == point.value and (not batch or int(batch) == batch_id)


def named(point: FaultPoint) -> bool:
    """Whether ``SPARK_CHKPT_KILL_AT`` or ``SPARK_CHKPT_STALL_AT`` names ``point`` (for
    any batch): a point that only a listener reaches is then listened for."""
    return any(os.environ.get(env, "").partition("@")[0] == point.value for env in (ENV, STALL_ENV))


def enable(point: FaultPoint, action: Action, *, batch_id: int | None = None) -> None:
    """Switch ``point`` on in this process (for ``batch_id``, or every batch)."""
    _ENABLED[point] = (action, batch_id)


def disable(point: FaultPoint) -> None:
    _ENABLED.pop(point, None)


@contextmanager
def enabled(point: FaultPoint, action: Action, *, batch_id: int | None = None) -> Iterator[None]:
    """``with enabled(FaultPoint.AFTER_INTENT, "fail", batch_id=2): ...``"""
    enable(point, action, batch_id=batch_id)
    try:
        yield
    finally:
        disable(point)


def _action(point: FaultPoint, batch_id: int) -> Action | None:
    found = _ENABLED.get(point)
    if found is None or (found[1] is not None and found[1] != batch_id):
        return None
    return found[0]


def _run(action: Action, point: FaultPoint, batch_id: int) -> None:
    if callable(action):
        action(point, batch_id)
    elif action == "stall":
        signal_file = os.environ.get(STALL_SIGNAL_ENV)
        if signal_file:
            with open(signal_file, "w") as out:
                out.write(f"{point.value}@{batch_id}\n")
        seconds = float(os.environ.get(STALL_SECONDS_ENV, "10"))
        release = os.environ.get(STALL_RELEASE_ENV)
        if not release:
            time.sleep(seconds)
            return
        ends = time.monotonic() + seconds
        while not os.path.exists(release) and time.monotonic() < ends:
            time.sleep(0.1)
    elif action == "fail":
        raise InjectedFailureError(
            f"spark-chkpt fault injection: failing {point.value} of batch {batch_id}"
        )
    else:
        _say_before_kill(
            f"spark-chkpt fault injection: SIGKILL at {point.value} of batch {batch_id}\n"
        )
        try:
            _kill_session()
        finally:
            os.kill(os.getpid(), signal.SIGKILL)


def _say_before_kill(line: str) -> None:
    """Write ``line`` where the job's own stderr is: the session leader's (the driver's,
    or spark-submit's JVM). A Python worker's stderr is a pipe Spark's JVM copies with a
    thread of its own, which the kill may stop before it copied the line."""
    sys.stderr.flush()
    leader = f"/proc/{os.getsid(0)}/fd/2"
    try:
        if not os.path.samestat(os.stat(leader), os.fstat(2)):
            fd = os.open(leader, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
            return
    except OSError:  # no /proc, another user's leader, a socket: this stderr then
        pass
    sys.stderr.write(line)
    sys.stderr.flush()


def _kill_session() -> None:
    """SIGKILL every process of this process's session but this one (killed last by the
    caller): the driver, its JVM, and PySpark's daemon and workers, which moved to process
    groups of their own (``os.setpgid(0, 0)``), so a kill of the session's process group
    would miss a commit worker. Stopped first (SIGSTOP), so none goes on meanwhile.
    (:func:`spark_chkpt.testing.processes.kill_tree` does the same from outside a job.)"""
    session, me = os.getsid(0), os.getpid()
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                text = stat.read().decode(errors="replace")
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()  # state ppid pgrp session ...
        if len(fields) > 3 and int(fields[3]) == session:
            members.append(int(entry))
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in members:
            with suppress(OSError):
                os.kill(pid, sig)
