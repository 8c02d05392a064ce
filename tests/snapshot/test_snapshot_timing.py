"""``snapshotTimeout`` and ``minPauseBetweenSnapshots`` in the commit template, on a clock
handed in: the deadline is checked only before anything is visible, a timed-out batch
is released as failed and recorded in the store, a batch already committed or one whose
deadline passes while it is made visible completes, and the pause follows the
completed snapshot. The options are parsed once, naming the option in errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.errors import CommitError, CommitFailureReason, ConfigError, SnapshotTimeoutError
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.metrics.reporter import summarize
from spark_chkpt.options import SnapshotTiming
from spark_chkpt.restart.failure import FailureKind, classify
from spark_chkpt.snapshot.checkpoint import BatchPlan
from spark_chkpt.snapshot.coordinator import Batch, Committed, SnapshotCoordinator
from spark_chkpt.snapshot.record import CommitOutcome, SnapshotRecord
from spark_chkpt.snapshot.settings import SnapshotSettings
from spark_chkpt.snapshot.store import SnapshotStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@dataclass
class FakeBatch(Batch):
    events: list[str] = field(default_factory=list)


class FakeSink(SnapshotCoordinator[FakeBatch]):
    """A sink whose steps take the time ``costs`` says (seconds on the fake clock)."""

    sink = "fake"

    def __init__(
        self,
        *,
        checkpoint: Path,
        timing: SnapshotTiming,
        clock: Clock,
        costs: dict[str, float],
        done: bool = False,
    ) -> None:
        super().__init__(
            snapshot=SnapshotSettings(
                checkpoint_location=str(checkpoint), app_id="app", timing=timing
            ),
            target="t",
        )
        self.clock = clock
        self.sleep = clock.sleep
        self.costs = costs
        self.done = done
        self.last: FakeBatch | None = None

    def _spend(self, batch: FakeBatch, step: str) -> None:
        batch.events.append(step)
        self.clock.now += self.costs.get(step, 0.0)

    def new_batch(self, *, batch_id: int, messages: Sequence[Any], **details: Any) -> FakeBatch:
        self.last = FakeBatch(batch_id=batch_id)
        return self.last

    def plan(self, batch_id: int) -> BatchPlan:
        return BatchPlan(batch_id=batch_id, sources=({"t": {"0": 1}},), metadata={})

    def begin(self, batch: FakeBatch) -> None:
        self._spend(batch, "begin")

    def prepare(self, batch: FakeBatch, plan: BatchPlan) -> None:
        self._spend(batch, "prepare")

    def already_committed(self, batch: FakeBatch, plan: BatchPlan) -> Committed | None:
        self._spend(batch, "check")
        return Committed(record=lambda: None) if self.done else None

    def make_visible(self, batch: FakeBatch, plan: BatchPlan, *, retry: int) -> SnapshotRecord:
        self._spend(batch, "visible")
        return self.record(
            batch_id=batch.batch_id,
            sources=plan.sources,
            outcome=CommitOutcome.COMMITTED,
            started=batch.started,
        )

    def release(self, batch: FakeBatch, *, failed: bool) -> None:
        batch.events.append(f"release failed={failed}")


def sink(tmp_path: Path, *, timeout_ms: int | None, pause_ms: int = 0, **kw: Any) -> FakeSink:
    return FakeSink(
        checkpoint=tmp_path / "chk",
        timing=SnapshotTiming(timeout_ms=timeout_ms, min_pause_ms=pause_ms),
        clock=Clock(),
        **kw,
    )


def test_a_commit_past_the_timeout_fails_before_anything_is_visible(tmp_path: Path) -> None:
    s = sink(tmp_path, timeout_ms=1000, pause_ms=500, costs={"begin": 0.4, "prepare": 0.7})
    with pytest.raises(SnapshotTimeoutError, match="snapshotTimeout = 1000 ms passed") as e:
        s.commit(batch_id=3)
    assert isinstance(e.value, CommitError) and e.value.reason is CommitFailureReason.TIMEOUT
    assert "fake batch 3 to t" in str(e.value) and "nothing of the batch" in str(e.value)
    assert s.last is not None
    assert s.last.events == ["begin", "prepare", "check", "release failed=True"]
    assert s.clock.slept == []  # no pause after a failed snapshot
    store = SnapshotStore(checkpoint_location=str(tmp_path / "chk"))
    assert store.get(3) is None
    [failure] = store.failures()
    assert failure["batch_id"] == 3 and failure["reason"] == "timeout"
    assert summarize([], failures=store.failures())["timed_out"] == 1


def test_a_commit_within_the_timeout_completes_and_then_pauses(tmp_path: Path) -> None:
    s = sink(tmp_path, timeout_ms=1000, pause_ms=500, costs={"begin": 0.4, "prepare": 0.5})
    record = s.commit(batch_id=0)
    assert record.batch_id == 0
    assert s.last is not None and s.last.events[-2:] == ["visible", "release failed=False"]
    assert s.clock.slept == [0.5]
    assert SnapshotStore(checkpoint_location=str(tmp_path / "chk")).failures() == []


def test_a_deadline_passing_while_the_batch_is_made_visible_does_not_interrupt_it(
    tmp_path: Path,
) -> None:
    s = sink(tmp_path, timeout_ms=1000, costs={"begin": 0.9, "visible": 5.0})
    assert s.commit(batch_id=1).batch_id == 1
    assert SnapshotStore(checkpoint_location=str(tmp_path / "chk")).get(1) is not None


def test_a_batch_already_committed_is_never_failed_by_the_timeout(tmp_path: Path) -> None:
    s = sink(tmp_path, timeout_ms=1000, costs={"begin": 3.0}, done=True)
    record = s.commit(batch_id=2)
    assert record.outcome == CommitOutcome.DUPLICATE.value


def test_no_timeout_and_no_pause_by_default(tmp_path: Path) -> None:
    s = sink(tmp_path, timeout_ms=None, costs={"begin": 3600.0})
    s.commit(batch_id=0)
    assert s.clock.slept == []


def test_the_options_are_parsed_once_for_both_sinks() -> None:
    delta = DeltaSinkConfig.from_options(
        {
            "path": "/t",
            "checkpointLocation": "/c",
            "snapshotTimeout": "60s",
            "minPauseBetweenSnapshots": "500ms",
        }
    )
    assert delta.timing == SnapshotTiming(timeout_ms=60_000, min_pause_ms=500)
    kafka = KafkaSinkConfig.from_options(
        {"kafka.bootstrap.servers": "h:9092", "checkpointLocation": "/c", "snapshottimeout": "2m"}
    )
    assert kafka.timing == SnapshotTiming(timeout_ms=120_000, min_pause_ms=0)
    with pytest.raises(ConfigError, match="option 'snapshotTimeout' = '0': must be a duration"):
        DeltaSinkConfig.from_options(
            {"path": "/t", "checkpointLocation": "/c", "snapshotTimeout": "0"}
        )
    with pytest.raises(ConfigError, match="option 'minPauseBetweenSnapshots' = 'soon'"):
        KafkaSinkConfig.from_options(
            {
                "kafka.bootstrap.servers": "h:9092",
                "checkpointLocation": "/c",
                "minPauseBetweenSnapshots": "soon",
            }
        )


def test_a_timeout_is_a_snapshot_failure_for_the_restart_strategy() -> None:
    from pyspark.errors import StreamingQueryException

    text = (
        "Traceback (most recent call last):\n  File x\n"
        "spark_chkpt.errors.SnapshotTimeoutError: delta-upsert batch 2 to /t: "
        "snapshotTimeout = 1000 ms passed (5 ms ago) before the MERGE"
    )
    failure = classify(StreamingQueryException(message=text))
    assert failure.kind is FailureKind.SNAPSHOT
    assert "SnapshotTimeoutError" in failure.cause


def test_the_reporter_counts_a_querys_timed_out_snapshots(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from spark_chkpt.metrics.reporter import SnapshotReporter

    s = sink(tmp_path, timeout_ms=1000, costs={"begin": 2.0})
    for batch_id in (0, 0):  # the batch, and its replay after the restart
        with pytest.raises(SnapshotTimeoutError):
            s.commit(batch_id=batch_id)
    reporter = SnapshotReporter()
    query = SimpleNamespace(id="q1")  # what track() and timed_out() read of a query
    assert reporter.timed_out(query) == 0  # type: ignore[arg-type]  # not tracked
    reporter.track(query, checkpoint_location=str(tmp_path / "chk"))  # type: ignore[arg-type]
    assert reporter.timed_out(query) == 2  # type: ignore[arg-type]
