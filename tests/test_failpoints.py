"""The fail points' registry: switched on by a test in this process or by the
environment, for one batch or every batch; nothing happens where nothing is switched on.
(No test here arms a kill: it would SIGKILL the test run.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_chkpt import failpoints
from spark_chkpt.errors import InjectedFailureError
from spark_chkpt.failpoints import FaultPoint, armed, enabled, failpoint


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in (failpoints.ENV, failpoints.FAIL_ENV, failpoints.STALL_ENV):
        monkeypatch.delenv(env, raising=False)


def test_nothing_happens_where_nothing_is_switched_on() -> None:
    for point in FaultPoint:
        failpoint(point, 3)
        assert not armed(point, 3)


def test_fail_at_raises_at_its_point_and_batch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.FAIL_ENV, "in-write@3")
    failpoint(FaultPoint.IN_WRITE, 2)  # another batch
    failpoint(FaultPoint.IN_COMMIT, 3)  # another point
    failpoint(FaultPoint.IN_WRITE, 3, can_fail=False)  # a task that only stalls or dies
    failpoint(FaultPoint.IN_WRITE, None)  # outside a streaming batch
    with pytest.raises(InjectedFailureError, match="failing in-write of batch 3"):
        failpoint(FaultPoint.IN_WRITE, 3)


def test_fail_at_a_point_that_only_kills_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.FAIL_ENV, "after-staging@1")
    failpoint(FaultPoint.AFTER_STAGING, 1)


def test_stall_writes_the_signal_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    signal_file = tmp_path / "stalled"
    monkeypatch.setenv(failpoints.STALL_ENV, "after-intent@4")
    monkeypatch.setenv(failpoints.STALL_SIGNAL_ENV, str(signal_file))
    monkeypatch.setenv(failpoints.STALL_SECONDS_ENV, "0")
    failpoint(FaultPoint.AFTER_INTENT, 4)
    assert signal_file.read_text() == "after-intent@4\n"


def test_a_test_switches_a_point_on_in_process() -> None:
    seen: list[tuple[FaultPoint, int]] = []
    with enabled(FaultPoint.AFTER_BARRIERS, lambda p, b: seen.append((p, b)), batch_id=7):
        failpoint(FaultPoint.AFTER_BARRIERS, 6)
        failpoint(FaultPoint.AFTER_BARRIERS, 7)
        assert armed(FaultPoint.AFTER_BARRIERS, 7)
    failpoint(FaultPoint.AFTER_BARRIERS, 7)  # switched off again
    assert seen == [(FaultPoint.AFTER_BARRIERS, 7)]
    with enabled(FaultPoint.IN_SAVEPOINT, "fail"), pytest.raises(InjectedFailureError):
        failpoint(FaultPoint.IN_SAVEPOINT, 0)


def test_named_is_any_batch_of_a_kill_or_a_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not failpoints.named(FaultPoint.AFTER_COMMIT_LOG)
    monkeypatch.setenv(failpoints.FAIL_ENV, "after-commit-log@1")  # cannot fail there
    assert not failpoints.named(FaultPoint.AFTER_COMMIT_LOG)
    monkeypatch.setenv(failpoints.ENV, "after-commit-log@4")
    assert failpoints.named(FaultPoint.AFTER_COMMIT_LOG)
    assert not failpoints.named(FaultPoint.AFTER_SNAPSHOT)
    monkeypatch.setenv(failpoints.ENV, "after-staging")
    monkeypatch.setenv(failpoints.STALL_ENV, "after-commit-log")
    assert failpoints.named(FaultPoint.AFTER_COMMIT_LOG)


def test_register_listens_for_after_commit_log_only_when_the_environment_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain foreachBatch script has no SnapshotReporter: the listener that reaches
    after-commit-log is attached once per session, and only when it is switched on."""
    from types import SimpleNamespace

    from spark_chkpt.metrics.reporter import CommitLogFailpoint, arm_commit_log_failpoint

    listeners: list[object] = []
    session = SimpleNamespace(streams=SimpleNamespace(addListener=listeners.append))
    assert not arm_commit_log_failpoint(session)  # type: ignore[arg-type]
    assert listeners == []
    monkeypatch.setenv(failpoints.ENV, "after-commit-log@2")
    assert arm_commit_log_failpoint(session)  # type: ignore[arg-type]
    assert arm_commit_log_failpoint(session)  # type: ignore[arg-type]
    assert len(listeners) == 1 and isinstance(listeners[0], CommitLogFailpoint)
    seen: list[tuple[FaultPoint, int]] = []
    with enabled(FaultPoint.AFTER_COMMIT_LOG, lambda p, b: seen.append((p, b))):
        listeners[0].onQueryProgress(SimpleNamespace(progress=SimpleNamespace(batchId=2)))
    assert seen == [(FaultPoint.AFTER_COMMIT_LOG, 2)]


# A job's session leader whose child, with its stderr a pipe nobody reads (a Python
# worker's, which Spark's JVM copies with a thread the kill may stop first), is killed at
# a fail point: the child's kill takes the whole session, the leader included.
_LEADER = """
import subprocess, sys
child = subprocess.Popen(
    [sys.executable, "-c", "from spark_chkpt.failpoints import FaultPoint, failpoint; "
     "failpoint(FaultPoint.AFTER_SNAPSHOT, 1)"],
    stderr=subprocess.PIPE,
)
child.wait()
print("the kill did not take the leader", file=sys.stderr)
"""


def test_a_kill_says_so_on_the_jobs_stderr_not_only_in_a_pipe_nobody_copied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI of stop 66: a sink runner killed at after-delta-commit had written its line into
    the pipe Spark's JVM copies; the kill stopped the JVM before it copied, and the job's
    stderr never had the line."""
    import subprocess
    import sys

    monkeypatch.setenv(failpoints.ENV, "after-snapshot@1")
    leader = subprocess.run(
        [sys.executable, "-c", _LEADER],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    assert leader.returncode == -9, leader.stderr
    assert leader.stderr.count("SIGKILL at after-snapshot of batch 1") == 1, leader.stderr
