"""The supervisor: a failed query started again from its checkpoint, as Flink restarts a job.

A Spark query that fails stays failed. :func:`run_supervised` waits for the query your
``start`` function starts; when it fails, it asks the :class:`RestartPolicy` what to
do, and restarts it **in the same driver**: it calls ``start`` again, which builds the
query anew on the same ``checkpointLocation`` (Spark re-runs the batch that had not
committed; the sinks discard what an earlier attempt already committed, so the restart
is exactly once). Each restart is logged with its cause and counted in a
:class:`~spark_chkpt.metrics.restarts.RestartMetrics`.

It returns the program's exit code (:class:`ExitCode`): ``sys.exit(run_supervised(...))``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random as _random
import time
from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from spark_chkpt.metrics.restarts import RestartMetrics
from spark_chkpt.restart.failure import Failure, FailureKind, classify
from spark_chkpt.restart.options import RestartConfig
from spark_chkpt.restart.strategy import Decision, RestartPolicy, Verdict

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


class ExitCode(IntEnum):
    """What the supervised program exits with."""

    OK = 0  # the query ended (availableNow drained, stopped, Ctrl-C)
    FAILED = 1  # failed, not restarted: strategy none (any failure), or the driver failed
    RESTARTS_EXHAUSTED = 3  # the restart strategy allows no more restarts
    SNAPSHOT_FAILURES_EXCEEDED = 4  # more snapshot failures in a row than tolerated
    NOT_RESTARTABLE = 5  # a failure no restart from this checkpoint can fix


_EXIT = {
    Verdict.NO_RESTART: ExitCode.FAILED,
    Verdict.DRIVER: ExitCode.FAILED,
    Verdict.EXHAUSTED: ExitCode.RESTARTS_EXHAUSTED,
    Verdict.SNAPSHOT_FAILURES_EXCEEDED: ExitCode.SNAPSHOT_FAILURES_EXCEEDED,
    Verdict.FATAL: ExitCode.NOT_RESTARTABLE,
}


class Supervisor:
    """Runs one query under a restart strategy (see :func:`run_supervised`)."""

    def __init__(
        self,
        *,
        start: Callable[[], StreamingQuery],
        config: RestartConfig,
        metrics: RestartMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = _random.random,
        checkpoint_location: str | None = None,
    ) -> None:
        self.start = start
        self.checkpoint_location = checkpoint_location
        self.config = config
        self.metrics = metrics if metrics is not None else RestartMetrics()
        self.policy = RestartPolicy(config, random=random)
        self.clock = clock
        self.sleep = sleep
        self.name = "query"

    def run(self) -> ExitCode:
        """Start the query, restart it per the strategy; the exit code. An error of the
        first start is raised: a query that never ran is the caller's to fix."""
        query = self.start()
        self.name = _name_of(query)
        log.info("supervising %s: restart strategy %s", self.name, self.config.describe())
        while True:
            error = self._wait(query)
            if error is None:
                return ExitCode.OK
            failure, progressed = classify(error), _progressed(query)
            while True:
                decision = self._decide(failure, progressed=progressed)
                if decision.verdict is not Verdict.RESTART:
                    return self._give_up(failure, decision)
                self.sleep(decision.delay_s)
                try:
                    query = self.start()
                    break
                except Exception as e:  # a source or sink that cannot start yet
                    failure, progressed = classify(e, starting=True), False
                    log.warning("%s: the restart failed to start: %s", self.name, failure.cause)

    def _wait(self, query: StreamingQuery) -> BaseException | None:
        """The error the query ended with; None when it ended cleanly."""
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
            return None
        except Exception as e:  # StreamingQueryException, or Py4J's: the driver is gone
            return e
        return query.exception()

    def _decide(self, failure: Failure, *, progressed: bool) -> Decision:
        snapshot = failure.kind is FailureKind.SNAPSHOT
        self.metrics.failed(kind=failure.kind.value, cause=failure.cause, snapshot=snapshot)
        decision = self.policy.on_failure(failure, now=self.clock(), progressed=progressed)
        event = None
        if decision.verdict is Verdict.RESTART:
            event = self.metrics.restarted(
                kind=failure.kind.value, cause=failure.cause, delay_s=decision.delay_s
            )
        self._record(decision)
        if event is not None:
            log.warning(
                "%s failed (%s): %s; restart #%d from its checkpoint in %.3f s (%s)",
                self.name,
                failure.kind.value,
                failure.cause,
                event.restart,
                decision.delay_s,
                decision.detail,
            )
        return decision

    def _record(self, decision: Decision) -> None:
        """The failures and restarts so far into ``<checkpoint>/chkpt/restarts.json``
        (``spark-chkpt status`` shows them), when the checkpoint is known. A record that
        cannot be written never stops the supervisor."""
        if self.checkpoint_location is None:
            return
        try:
            write_restart_record(
                checkpoint_location=self.checkpoint_location,
                strategy=self.config.describe(),
                metrics=self.metrics,
                verdict=decision.verdict.value,
            )
        except Exception as e:
            log.warning("restart record not written under %s: %s", self.checkpoint_location, e)

    def _give_up(self, failure: Failure, decision: Decision) -> ExitCode:
        code = _EXIT[decision.verdict]
        detail = f" ({decision.detail})" if decision.detail else ""
        # The strategy and its limits in the give-up line itself: it is the line a user
        # reads, and the strategy was otherwise only in an INFO line at the start.
        log.error(
            "%s failed (%s), %s%s after %d restart(s) (restart strategy %s); exit code %d. "
            "Last cause: %s",
            self.name,
            failure.kind.value,
            decision.verdict.value,
            detail,
            self.metrics.restarts,
            self.config.describe(),
            int(code),
            failure.cause,
        )
        return code


def run_supervised(
    *,
    start: Callable[[], StreamingQuery],
    strategy: RestartConfig | Mapping[str, str],
    metrics: RestartMetrics | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    random: Callable[[], float] = _random.random,
    checkpoint_location: str | None = None,
) -> ExitCode:
    """Run the query ``start()`` starts; restart it per ``strategy`` when it fails.

    ``start`` must build the query and start it on the same ``checkpointLocation`` every
    time it is called (a restart calls it again). ``strategy``: a
    :class:`~spark_chkpt.restart.options.RestartConfig`, or settings by Flink's names
    (``{"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts":
    "3"}``). ``metrics`` receives each failure and restart (e.g. a
    ``SnapshotReporter``'s ``restarts``). ``clock``, ``sleep`` and ``random`` are for
    tests. ``checkpoint_location`` (the query's): the failures and restarts so far are
    kept in its ``chkpt/restarts.json``, which ``spark-chkpt status`` shows. Returns the
    :class:`ExitCode`, to pass to ``sys.exit``; the last cause is logged.
    """
    config = (
        strategy if isinstance(strategy, RestartConfig) else RestartConfig.from_options(strategy)
    )
    return Supervisor(
        start=start,
        config=config,
        metrics=metrics,
        clock=clock,
        sleep=sleep,
        random=random,
        checkpoint_location=checkpoint_location,
    ).run()


RESTARTS_FILE = "chkpt/restarts.json"


def write_restart_record(
    *, checkpoint_location: str, strategy: str, metrics: RestartMetrics, verdict: str
) -> None:
    """``<checkpoint>/chkpt/restarts.json``: the strategy, the counters, the last verdict
    and the recent restarts (atomic write)."""
    from spark_chkpt.fs import qualify, resolve

    record = {
        "strategy": strategy,
        **metrics.as_dict(),
        "verdict": verdict,
        "updated_ms": int(time.time() * 1000),
        "history": [dataclasses.asdict(e) for e in metrics.history[-20:]],
    }
    target = resolve(qualify(checkpoint_location)).child(*RESTARTS_FILE.split("/"))
    target.write_atomic(json.dumps(record, indent=2) + "\n")


def read_restart_record(*, checkpoint_location: str) -> dict[str, Any] | None:
    """What :func:`write_restart_record` kept, or None (never supervised, or unreadable)."""
    from spark_chkpt.fs import qualify, resolve

    target = resolve(qualify(checkpoint_location)).child(*RESTARTS_FILE.split("/"))
    try:
        if not target.exists():
            return None
        value = json.loads(target.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _name_of(query: StreamingQuery) -> str:
    try:
        return f"query {query.name or query.id}"
    except Exception:  # a name is only for the log
        return "query"


def _progressed(query: StreamingQuery) -> bool:
    """Whether the failed run completed a batch (Spark posts progress per completed batch)."""
    try:
        return bool(query.recentProgress)
    except Exception:  # the driver's JVM may be gone
        return False
