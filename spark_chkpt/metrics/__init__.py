"""``spark_chkpt.metrics``: the import path the README gives for the snapshot reporter.

The code lives in :mod:`spark_chkpt.metrics.reporter`; the restart figures of a
supervised query in :mod:`spark_chkpt.metrics.restarts`.
"""

from spark_chkpt.metrics.reporter import SnapshotReporter, store_records
from spark_chkpt.metrics.restarts import RestartEvent, RestartMetrics

__all__ = ["RestartEvent", "RestartMetrics", "SnapshotReporter", "store_records"]
