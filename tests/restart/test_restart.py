"""Restart strategies: each strategy's decisions with the time handed in (no sleeping),
the settings' errors, the kinds of failure, and the supervisor's loop over fake queries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from spark_chkpt.errors import ConfigError
from spark_chkpt.metrics.restarts import RestartMetrics
from spark_chkpt.restart import (
    ExitCode,
    ExponentialDelay,
    FailureRate,
    FixedDelay,
    NoRestart,
    RestartConfig,
    run_supervised,
)
from spark_chkpt.restart.failure import Failure, FailureKind, classify, summary
from spark_chkpt.restart.strategy import RestartPolicy, Verdict

TASK = Failure(FailureKind.TASK, "RuntimeError: boom")
SNAPSHOT = Failure(FailureKind.SNAPSHOT, "CommitError: refused")


def delays(policy: RestartPolicy, times: list[float], failure: Failure = TASK) -> list[object]:
    """Each failure's delay, or its verdict when it is not a restart."""
    out: list[object] = []
    for now in times:
        d = policy.on_failure(failure, now=now, progressed=False)
        out.append(d.delay_s if d.verdict is Verdict.RESTART else d.verdict)
    return out


# -- the strategies ------------------------------------------------------------------------


def test_none_never_restarts() -> None:
    assert delays(RestartPolicy(RestartConfig()), [0.0]) == [Verdict.NO_RESTART]


def test_fixed_delay_restarts_attempts_times_then_is_exhausted() -> None:
    policy = RestartPolicy(RestartConfig(strategy=FixedDelay(attempts=2, delay_ms=500)))
    assert delays(policy, [0.0, 10.0, 10_000.0]) == [0.5, 0.5, Verdict.EXHAUSTED]


def test_exponential_delay_grows_to_the_max() -> None:
    strategy = ExponentialDelay(
        initial_backoff_ms=100, max_backoff_ms=1000, multiplier=2.0, jitter=0.0
    )
    policy = RestartPolicy(RestartConfig(strategy=strategy))
    assert delays(policy, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]) == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_exponential_delay_resets_after_a_healthy_period() -> None:
    strategy = ExponentialDelay(
        initial_backoff_ms=100,
        max_backoff_ms=10_000,
        multiplier=3.0,
        jitter=0.0,
        reset_backoff_threshold_ms=60_000,
        attempts=2,
    )
    policy = RestartPolicy(RestartConfig(strategy=strategy))
    # restarted at 0.1, failed at 5: not healthy long enough; restarted at 5.3
    assert delays(policy, [0.0, 5.0]) == [0.1, 0.3]
    # 59 s after the restart: still within the threshold, 2 attempts used up
    assert delays(policy, [64.0]) == [Verdict.EXHAUSTED]
    policy = RestartPolicy(RestartConfig(strategy=strategy))
    assert delays(policy, [0.0, 5.0, 5.3 + 60.0, 70.0]) == [0.1, 0.3, 0.1, 0.3]


def test_exponential_delay_jitter_stays_within_its_factor() -> None:
    strategy = ExponentialDelay(initial_backoff_ms=1000, max_backoff_ms=1000, jitter=0.1)
    low = RestartPolicy(RestartConfig(strategy=strategy), random=lambda: 0.0)
    high = RestartPolicy(RestartConfig(strategy=strategy), random=lambda: 1.0)
    assert delays(low, [0.0]) == [pytest.approx(0.9)]
    assert delays(high, [0.0]) == [1.0]  # capped at max-backoff


def test_failure_rate_counts_failures_within_the_interval() -> None:
    strategy = FailureRate(max_failures_per_interval=2, interval_ms=10_000, delay_ms=200)
    policy = RestartPolicy(RestartConfig(strategy=strategy))
    assert delays(policy, [0.0, 5.0, 9.0]) == [0.2, 0.2, Verdict.EXHAUSTED]
    policy = RestartPolicy(RestartConfig(strategy=strategy))
    # the failure at 0 is out of the window by 11: two failures within 10 s
    assert delays(policy, [0.0, 5.0, 11.0, 30.0, 45.0]) == [0.2, 0.2, 0.2, 0.2, 0.2]


def test_snapshot_failures_past_the_tolerable_number_end_the_job() -> None:
    config = RestartConfig(
        strategy=FixedDelay(attempts=100, delay_ms=0), tolerable_snapshot_failures=1
    )
    policy = RestartPolicy(config)
    assert delays(policy, [0.0], SNAPSHOT) == [0.0]
    assert delays(policy, [1.0], TASK) == [0.0]  # task failures are counted apart
    assert delays(policy, [2.0], SNAPSHOT) == [Verdict.SNAPSHOT_FAILURES_EXCEEDED]


def test_a_completed_snapshot_resets_the_snapshot_failures_in_a_row() -> None:
    config = RestartConfig(
        strategy=FixedDelay(attempts=100, delay_ms=0), tolerable_snapshot_failures=1
    )
    policy = RestartPolicy(config)
    for now in range(5):
        decision = policy.on_failure(SNAPSHOT, now=float(now), progressed=True)
        assert decision.verdict is Verdict.RESTART


def test_fatal_and_driver_failures_are_not_restarted() -> None:
    policy = RestartPolicy(RestartConfig(strategy=FixedDelay(attempts=5)))
    fatal = Failure(FailureKind.FATAL, "FencedError: older writer")
    assert policy.on_failure(fatal, now=0.0, progressed=False).verdict is Verdict.FATAL
    driver = Failure(FailureKind.DRIVER, "Py4JNetworkError")
    assert policy.on_failure(driver, now=0.0, progressed=False).verdict is Verdict.DRIVER


# -- the settings --------------------------------------------------------------------------


def test_flink_names_parse_into_the_config() -> None:
    config = RestartConfig.from_options(
        {
            "restart-strategy.type": "exponential-delay",
            "restart-strategy.exponential-delay.initial-backoff": "500ms",
            "restart-strategy.exponential-delay.max-backoff": "10 s",
            "restart-strategy.exponential-delay.backoff-multiplier": "2",
            "restart-strategy.exponential-delay.jitter-factor": "0",
            "restart-strategy.exponential-delay.reset-backoff-threshold": "5 min",
            "restart-strategy.exponential-delay.attempts-before-reset-backoff": "4",
            "execution.checkpointing.tolerable-failed-checkpoints": "2",
            "sink.path": "/data/t",  # a job's other settings are not the supervisor's
        }
    )
    assert config == RestartConfig(
        strategy=ExponentialDelay(
            initial_backoff_ms=500,
            max_backoff_ms=10_000,
            multiplier=2.0,
            jitter=0.0,
            reset_backoff_threshold_ms=300_000,
            attempts=4,
        ),
        tolerable_snapshot_failures=2,
    )
    fixed = RestartConfig.from_options(
        {"restart-strategy.type": "fixeddelay", "restart-strategy.fixed-delay.delay": "10 s"}
    )
    assert fixed.strategy == FixedDelay(attempts=1, delay_ms=10_000)
    rate = RestartConfig.from_options({"restart-strategy.type": "failure-rate"})
    assert rate.strategy == FailureRate()
    assert RestartConfig.from_options({}) == RestartConfig(strategy=NoRestart())


@pytest.mark.parametrize(
    ("settings", "option", "says"),
    [
        ({"restart-strategy.type": "forever"}, "restart-strategy.type", "one of none"),
        (
            {
                "restart-strategy.type": "fixed-delay",
                "restart-strategy.fixed-delay.attempts": "three",
            },
            "restart-strategy.fixed-delay.attempts",
            "whole number",
        ),
        (
            {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "soon"},
            "restart-strategy.fixed-delay.delay",
            "duration",
        ),
        (
            {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attemps": "3"},
            "restart-strategy.fixed-delay.attemps",
            "restart-strategy.fixed-delay.attempts",
        ),
        (
            {
                "restart-strategy.type": "exponential-delay",
                "restart-strategy.exponential-delay.jitter-factor": "2",
            },
            "restart-strategy.exponential-delay.jitter-factor",
            "from 0.0 to 1.0",
        ),
        (
            {
                "restart-strategy.type": "exponential-delay",
                "restart-strategy.exponential-delay.initial-backoff": "2 min",
            },
            "restart-strategy.exponential-delay.initial-backoff",
            "max-backoff",
        ),
        (
            {"execution.checkpointing.tolerable-failed-checkpoints": "-1"},
            "execution.checkpointing.tolerable-failed-checkpoints",
            "greater than 0",
        ),
    ],
)
def test_bad_settings_name_the_option(settings: dict[str, str], option: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        RestartConfig.from_options(settings)
    assert raised.value.option == option
    assert says in str(raised.value)


def test_a_setting_of_another_strategy_is_ignored() -> None:
    config = RestartConfig.from_options(
        {"restart-strategy.type": "none", "restart-strategy.fixed-delay.attempts": "3"}
    )
    assert config.strategy == NoRestart()


def test_the_config_is_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        FixedDelay(3, 100)  # type: ignore[misc]
    config = RestartConfig()
    with pytest.raises(AttributeError):
        config.tolerable_snapshot_failures = 3  # type: ignore[misc]


# -- the kinds of failure ------------------------------------------------------------------

COMMIT_TEXT = (
    "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source "
    'perform commit: Traceback (most recent call last):\n  File "x.py", line 1, in commit\n'
    "spark_chkpt.errors.InjectedFailureError: failing in-commit of batch 0\n SQLSTATE: 38000\n"
    "=== Streaming Query ===\nIdentifier: [id = 1]\n"
)
TASK_TEXT = (
    "An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
    'call last):\n  File "job.py", line 20, in fb\n    raise RuntimeError("boom")\n'
    "RuntimeError: boom\n\n=== Streaming Query ===\nCurrent Committed Offsets: {}\n"
)


def query_error(text: str) -> StreamingQueryException:
    return StreamingQueryException(message=text)


def test_a_failed_commit_is_a_snapshot_failure() -> None:
    failure = classify(query_error(COMMIT_TEXT))
    assert failure == Failure(
        FailureKind.SNAPSHOT,
        "spark_chkpt.errors.InjectedFailureError: failing in-commit of batch 0",
    )
    upsert = "Traceback\nspark_chkpt.errors.CommitError: too many conflicts\n"
    assert classify(query_error(upsert)).kind is FailureKind.SNAPSHOT


def test_other_query_failures_are_task_failures() -> None:
    assert classify(query_error(TASK_TEXT)) == Failure(FailureKind.TASK, "RuntimeError: boom")
    conflict = "Traceback\nspark_chkpt.errors.CommitConflictError: lost a race\n"
    assert classify(query_error(conflict)).kind is FailureKind.TASK


def test_failures_a_restart_cannot_fix_are_fatal() -> None:
    fenced = COMMIT_TEXT.replace("InjectedFailureError", "FencedError")
    assert classify(query_error(fenced)).kind is FailureKind.FATAL
    assert classify(ConfigError("x", "y", "z"), starting=True).kind is FailureKind.FATAL


def test_start_errors_and_gateway_errors() -> None:
    assert classify(OSError("broker down"), starting=True).kind is FailureKind.TASK
    assert classify(OSError("broker down")).kind is FailureKind.DRIVER


def test_summary_without_a_traceback_is_the_first_line() -> None:
    assert summary("the query stopped\nmore") == "the query stopped"


# -- the supervisor ------------------------------------------------------------------------


class FakeQuery:
    """A query that ends with ``error`` (None: cleanly), after ``batches`` batches."""

    name = "fake"
    id = "q1"

    def __init__(self, error: str | None, *, batches: int = 0) -> None:
        self.error = query_error(error) if error is not None else None
        self.recentProgress = [{"batchId": i} for i in range(batches)]

    def awaitTermination(self) -> None:
        if self.error is not None:
            raise self.error

    def exception(self) -> StreamingQueryException | None:
        return self.error

    def stop(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def starts(*queries: FakeQuery) -> tuple[list[int], object]:
    calls: list[int] = []
    it: Iterator[FakeQuery] = iter(queries)

    def start() -> FakeQuery:
        calls.append(1)
        return next(it)

    return calls, start


def supervise(config: RestartConfig, *queries: FakeQuery) -> tuple[ExitCode, int, Clock]:
    clock = Clock()
    calls, start = starts(*queries)
    code = run_supervised(
        start=start,  # type: ignore[arg-type]
        strategy=config,
        clock=clock,
        sleep=clock.sleep,
        random=lambda: 0.5,
    )
    return code, len(calls), clock


def test_transient_failures_are_restarted_in_the_same_driver(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = RestartConfig(strategy=FixedDelay(attempts=3, delay_ms=50))
    metrics = RestartMetrics()
    clock = Clock()
    _, start = starts(FakeQuery(TASK_TEXT), FakeQuery(COMMIT_TEXT), FakeQuery(None))
    code = run_supervised(
        start=start,  # type: ignore[arg-type]
        strategy=config,
        metrics=metrics,
        clock=clock,
        sleep=clock.sleep,
    )
    assert code == ExitCode.OK
    assert clock.slept == [0.05, 0.05]
    assert metrics.as_dict() == {
        "failures": 2,
        "task_failures": 1,
        "snapshot_failures": 1,
        "restarts": 2,
        "last_cause": "snapshot failure: "
        "spark_chkpt.errors.InjectedFailureError: failing in-commit of batch 0",
    }
    restarts = [r.getMessage() for r in caplog.records if "restart #" in r.getMessage()]
    assert len(restarts) == 2
    assert "task failure): RuntimeError: boom; restart #1" in restarts[0]


def test_an_exhausted_strategy_exits_with_its_code_and_the_last_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = RestartConfig(strategy=FixedDelay(attempts=2, delay_ms=0))
    code, started, _ = supervise(config, *(FakeQuery(TASK_TEXT) for _ in range(3)))
    assert (code, started) == (ExitCode.RESTARTS_EXHAUSTED, 3)
    assert int(code) == 3
    last = caplog.records[-1].getMessage()
    assert "restart strategy exhausted" in last and "Last cause: RuntimeError: boom" in last
    # The give-up line names the strategy and its limits, not only "restart 2 of 2".
    assert (
        "restart strategy exhausted (restart 2 of 2) after 2 restart(s) (restart strategy "
        "fixed-delay: 2 attempt(s), 0 ms apart); exit code 3" in last
    )


def test_the_exit_codes() -> None:
    assert supervise(RestartConfig(), FakeQuery(None))[0] == ExitCode.OK
    assert supervise(RestartConfig(), FakeQuery(TASK_TEXT))[:2] == (ExitCode.FAILED, 1)
    fenced = COMMIT_TEXT.replace("InjectedFailureError", "FencedError")
    # strategy none: exit 1 whatever failed, as the jobs did before the supervisor
    assert supervise(RestartConfig(), FakeQuery(fenced))[0] == ExitCode.FAILED
    tolerant = RestartConfig(
        strategy=FixedDelay(attempts=9, delay_ms=0), tolerable_snapshot_failures=1
    )
    code, started, _ = supervise(tolerant, FakeQuery(COMMIT_TEXT), FakeQuery(COMMIT_TEXT))
    assert (code, started) == (ExitCode.SNAPSHOT_FAILURES_EXCEEDED, 2)
    assert supervise(tolerant, FakeQuery(fenced))[0] == ExitCode.NOT_RESTARTABLE


def test_a_restart_that_cannot_start_counts_as_a_failure() -> None:
    clock = Clock()
    results: list[object] = [FakeQuery(TASK_TEXT), OSError("broker down"), FakeQuery(None)]

    def start() -> FakeQuery:
        result = results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[return-value]

    code = run_supervised(
        start=start,  # type: ignore[arg-type]
        strategy={
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "2",
        },
        clock=clock,
        sleep=clock.sleep,
    )
    assert code == ExitCode.OK and clock.slept == [1.0, 1.0]


def test_the_first_start_raises() -> None:
    def start() -> FakeQuery:
        raise ConfigError("subscribe", None, "required")

    with pytest.raises(ConfigError):
        run_supervised(start=start, strategy=RestartConfig())  # type: ignore[arg-type]


def test_the_supervisor_keeps_its_failures_in_the_checkpoint_for_status(tmp_path: Path) -> None:
    """``spark-chkpt status`` reads them from ``chkpt/restarts.json``: the strategy, the
    counters and the last verdict, after each failure (the give-up included)."""
    from spark_chkpt.restart.supervisor import read_restart_record

    config = RestartConfig(strategy=FixedDelay(attempts=1, delay_ms=50))
    clock = Clock()
    _, start = starts(FakeQuery(TASK_TEXT), FakeQuery(TASK_TEXT))
    code = run_supervised(
        start=start,  # type: ignore[arg-type]
        strategy=config,
        clock=clock,
        sleep=clock.sleep,
        checkpoint_location=str(tmp_path),
    )
    assert code == ExitCode.RESTARTS_EXHAUSTED
    record = read_restart_record(checkpoint_location=str(tmp_path))
    assert record is not None
    assert (record["failures"], record["restarts"]) == (2, 1)
    assert record["verdict"] == "restart strategy exhausted"
    assert record["strategy"] == config.describe()
    assert [e["restart"] for e in record["history"]] == [1]
