"""``spark_chkpt.metrics``: the import path the README gives for the snapshot reporter.

The code lives in :mod:`spark_chkpt.metrics.reporter`.
"""

from spark_chkpt.metrics.reporter import SnapshotReporter, store_records

__all__ = ["SnapshotReporter", "store_records"]
