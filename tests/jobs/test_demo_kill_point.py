"""The demo's kill point (jobs/demo.py): a batch planned and not committed, or None
when the wait ran out or the batch committed first; the demo then says the kill point
was missed and tries again, instead of reporting "batch None" (issue 39)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.jobs import demo


class _Running:
    def poll(self) -> Any:
        return None


def _checkpoint(tmp_path: Path, *, planned: list[int], committed: list[int]) -> Path:
    checkpoint = tmp_path / "chk"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    for n in planned:
        (checkpoint / "offsets" / str(n)).write_text("v1\n")
    for n in committed:
        (checkpoint / "commits" / str(n)).write_text("v1\n")
    return checkpoint


def test_a_batch_planned_and_not_committed_is_the_kill_point(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, planned=[0, 1, 2], committed=[0, 1])
    table = tmp_path / "table"
    table.mkdir()
    (table / "part-b00002-x.parquet").write_bytes(b"")  # staged: strike now
    got = demo._wait_for_batch_in_flight(_Running(), checkpoint, table, after=1)  # type: ignore[arg-type]
    assert got == 2


def test_no_batch_in_flight_before_the_wait_ran_out_is_a_missed_kill_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "IN_FLIGHT_WAIT_S", 0.2)
    checkpoint = _checkpoint(tmp_path, planned=[0, 1, 2], committed=[0, 1, 2])
    got = demo._wait_for_batch_in_flight(_Running(), checkpoint, tmp_path, after=1)  # type: ignore[arg-type]
    assert got is None
