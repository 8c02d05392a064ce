"""The one retry loop, ``deadline.retry``: tried again while the error is retriable, until
the deadline or the last try, paused between tries, the error left as raised."""

from __future__ import annotations

import pytest

from spark_chkpt.deadline import Deadline, retry


class Refused(Exception):
    pass


def test_a_retriable_error_is_tried_again_after_its_pause() -> None:
    tries: list[int] = []
    pauses: list[float] = []

    def call(n: int) -> str:
        tries.append(n)
        if n < 2:
            raise Refused(f"try {n}")
        return "answered"

    retried: list[str] = []
    got = retry(
        call,
        deadline=Deadline.after(seconds=60),
        retriable=lambda e: isinstance(e, Refused),
        pause_s=lambda n: 0.5 * (n + 1),
        before_retry=lambda e: retried.append(str(e)),
        sleep=pauses.append,
    )
    assert got == "answered"
    assert tries == [0, 1, 2]
    assert pauses == [0.5, 1.0]
    assert retried == ["try 0", "try 1"]


def test_other_errors_leave_at_once() -> None:
    tries: list[int] = []

    def call(n: int) -> None:
        tries.append(n)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        retry(
            call,
            deadline=Deadline.after(seconds=60),
            retriable=lambda e: isinstance(e, Refused),
            pause_s=lambda n: 0.0,
            sleep=lambda s: None,
        )
    assert tries == [0]


def test_the_last_try_leaves_with_its_error() -> None:
    def call(n: int) -> None:
        raise Refused(f"try {n}")

    with pytest.raises(Refused, match="try 2"):
        retry(
            call,
            deadline=Deadline.never(),
            retriable=lambda e: isinstance(e, Refused),
            pause_s=lambda n: 0.0,
            tries=3,
            sleep=lambda s: None,
        )


def test_a_passed_deadline_leaves_with_the_error_and_no_pause_outlasts_it() -> None:
    pauses: list[float] = []

    def call(n: int) -> None:
        raise Refused(f"try {n}")

    with pytest.raises(Refused, match="try 0"):
        retry(
            call,
            deadline=Deadline(at=0.0),  # long passed on the monotonic clock
            retriable=lambda e: isinstance(e, Refused),
            pause_s=lambda n: 5.0,
            sleep=pauses.append,
        )
    assert pauses == []
