"""The pandas UDF of bench row (nj) (:func:`bench.native.jvm_path`): each row's task
attempt, as the ``chkpt-kafka`` sink tags every record it writes.

A module of its own, without ``from __future__ import annotations``: pyspark infers a
pandas UDF's kind from its annotations, which must then be real types, not strings.
"""

import pandas as pd


def attempt_tag(rows: pd.Series) -> pd.Series:
    """The task attempt's stage and attempt id, for every row of ``rows``."""
    from pyspark import TaskContext

    context = TaskContext.get()
    tag = f"{context.stageId()}-{context.taskAttemptId()}".encode() if context else b"-"
    return pd.Series([tag] * len(rows))
