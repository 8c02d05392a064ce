"""``spark_chkpt.metrics``: the import path the README gives for the snapshot reporter.

The code lives in :mod:`spark_chkpt.metrics.reporter`; the lag (offsets behind the
latest) in :mod:`spark_chkpt.metrics.lag`; the restart figures of a supervised query in
:mod:`spark_chkpt.metrics.restarts`.
"""

from spark_chkpt.metrics.lag import LagReporter, SourceLag, source_lags
from spark_chkpt.metrics.reporter import SnapshotReporter, store_records
from spark_chkpt.metrics.restarts import RestartEvent, RestartMetrics

__all__ = [
    "LagReporter",
    "RestartEvent",
    "RestartMetrics",
    "SnapshotReporter",
    "SourceLag",
    "source_lags",
    "store_records",
]
