"""The commit template's one retry loop: conflicts retried from the idempotency check,
at most ``retries`` times; other errors pass unchanged."""

from __future__ import annotations

import pytest

from spark_chkpt.errors import CommitConflictError, CommitError, CommitFailureReason
from spark_chkpt.snapshot.coordinator import retry_conflicts


def test_conflicts_are_retried_until_the_step_succeeds() -> None:
    calls: list[int] = []

    def step(retry: int) -> str:
        calls.append(retry)
        if retry < 2:
            raise CommitConflictError("t: lost the race")
        return "done"

    assert retry_conflicts(step, what="t") == "done"
    assert calls == [0, 1, 2]


def test_the_last_conflict_fails_naming_the_reason() -> None:
    def step(retry: int) -> None:
        raise CommitConflictError(f"sink could not commit batch 3 to t: conflict {retry}")

    with pytest.raises(CommitError, match="could not commit batch 3 to t: conflict 2") as e:
        retry_conflicts(step, what="t", retries=3)
    assert e.value.reason is CommitFailureReason.TOO_MANY_CONFLICTS


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def step(retry: int) -> None:
        calls.append(retry)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        retry_conflicts(step, what="t")
    assert calls == [0]
