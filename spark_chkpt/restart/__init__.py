"""Restart strategies as in Flink: a failed query started again from its checkpoint.

``run_supervised(start=..., strategy=...)`` (:mod:`spark_chkpt.restart.supervisor`), the
settings by Flink's names (:mod:`spark_chkpt.restart.options`), the strategies'
decisions (:mod:`spark_chkpt.restart.strategy`) and the kinds of failure
(:mod:`spark_chkpt.restart.failure`).
"""

from spark_chkpt.restart.options import (
    ExponentialDelay,
    FailureRate,
    FixedDelay,
    NoRestart,
    RestartConfig,
)
from spark_chkpt.restart.supervisor import ExitCode, run_supervised

__all__ = [
    "ExitCode",
    "ExponentialDelay",
    "FailureRate",
    "FixedDelay",
    "NoRestart",
    "RestartConfig",
    "run_supervised",
]
