"""``spark_chkpt.metrics``: the import path the README gives for the snapshot reporter.

The code lives in :mod:`spark_chkpt.snapshot.metrics`.
"""

from spark_chkpt.snapshot.metrics import SnapshotReporter, store_records

__all__ = ["SnapshotReporter", "store_records"]
