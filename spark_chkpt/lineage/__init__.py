"""Lineage: from a Delta table's version to the snapshot that wrote it and, through the
barriers, to every upstream query's snapshot and its offsets (``spark-chkpt lineage``)."""

from spark_chkpt.lineage.model import Lineage, SnapshotNode, SourceRead
from spark_chkpt.lineage.walk import trace

__all__ = ["Lineage", "SnapshotNode", "SourceRead", "trace"]
