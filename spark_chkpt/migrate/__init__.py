"""``spark-chkpt migrate``: a stopped query moves between Spark's own ``kafka`` source /
``delta`` sink and ``chkpt-kafka`` / ``chkpt-delta`` on its checkpoint, with no record
lost or repeated.

More: docs/concepts/savepoints.md (spark_chkpt/migrate/__init__.py).
"""
